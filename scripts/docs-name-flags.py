#!/usr/bin/env python3
"""Checks that the documentation names every server flag and environment variable.

Every flag that `ggml-remote-server --help` lists (and `status --help`) must appear in
the man page and in the reference; every GGML_REMOTE_* variable the sources read
(a quoted "GGML_REMOTE_..." literal under the given source folders) must appear in
the reference. The other way round, every long flag that the man page, the reference
and each --doc name must be the server's or one of another program's that they quote
(OTHER_PROGRAMS_FLAGS). Socket paths are scripts/packaged-socket.py's to check.
Prints one line per mistake and exits 1 if there is any.

usage: docs-name-flags.py --server BINARY --man PAGE --reference FILE [--doc FILE]...
                          [--sources DIR]...
"""
import argparse
import pathlib
import re
import subprocess
import sys

# An option line of --help: two spaces, an optional short flag, then the long flag.
# Continuation lines are indented further and only mention flags.
OPTION_LINE = re.compile(r"^ {2}(?:(-[A-Za-z]),)?\s{1,8}(--[a-z][a-z0-9-]*)")
ANY_FLAG = re.compile(r"(?<![\w-])(--?[a-z][a-z0-9-]*)")
ENV_LITERAL = re.compile(r'"(GGML_REMOTE_[A-Z0-9_]+)"')

# Long flags the documents quote from other programs, not the server's.
OTHER_PROGRAMS_FLAGS = {
    "--rpc": "llama.cpp's ggml-rpc devices",
    "--reuid": "setpriv",
    "--regid": "setpriv",
    "--init-groups": "setpriv",
    "--load-mode": "test-backend-ops",
    "--local": "ggml-remote-rtt",
    "--rm": "podman",
    "--device": "podman (a CDI device)",
    "--group-add": "podman",
}


def flags_of_help(text):
    """The flags an option table defines, and those of usage lines ("usage:" or "status")."""
    flags = []
    for line in text.splitlines():
        match = OPTION_LINE.match(line)
        if match:
            flags += [flag for flag in match.groups() if flag]
        elif line.startswith("usage:") or re.match(r"^\s+\S+ status ", line):
            flags += [flag for flag in ANY_FLAG.findall(line) if flag.startswith("--")]
    return list(dict.fromkeys(flags))


def env_of_sources(folders):
    names = []
    for folder in folders:
        for path in sorted(pathlib.Path(folder).rglob("*")):
            if path.suffix in (".cpp", ".h") and path.is_file():
                names += ENV_LITERAL.findall(path.read_text(errors="replace"))
    return sorted(set(names))


def plain_text(text):
    """troff or Markdown as words: `\\-` is a hyphen, font changes vanish."""
    text = text.replace("\\-", "-").replace("\\(hy", "-")
    return re.sub(r"\\f[BIRP]|\\f\(..|\\&", "", text)


def names_missing(names, text):
    text = plain_text(text)
    return [name for name in names if not re.search(r"(?<![\w-])" + re.escape(name) + r"(?![\w-])", text)]


def unknown_flags(known, text):
    """Long flags `text` names that are neither in `known` nor another program's."""
    named = dict.fromkeys(ANY_FLAG.findall(plain_text(text)))
    return [flag for flag in named if flag.startswith("--") and flag not in known and flag not in OTHER_PROGRAMS_FLAGS]


def help_text(server, *args):
    run = subprocess.run([server, *args, "--help"], capture_output=True, text=True, timeout=30)
    if run.returncode != 0:
        sys.exit(f"{server} {' '.join(args)} --help failed ({run.returncode}): {run.stderr.strip()}")
    return run.stdout


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", required=True, help="the built ggml-remote-server")
    parser.add_argument("--man", required=True, help="the man page (troff)")
    parser.add_argument("--reference", required=True, help="docs/REFERENCE.md")
    parser.add_argument("--sources", action="append", default=[], help="folders whose GGML_REMOTE_* literals count")
    parser.add_argument("--doc", action="append", default=[], help="another document (README) whose flags must exist")
    args = parser.parse_args(argv)

    flags = flags_of_help(help_text(args.server))
    flags += [flag for flag in flags_of_help(help_text(args.server, "status")) if flag not in flags]
    if len(flags) < 10:
        sys.exit(f"only {len(flags)} flags found in {args.server} --help: has its layout changed?")
    env = env_of_sources(args.sources)
    man = pathlib.Path(args.man).read_text()
    reference = pathlib.Path(args.reference).read_text()

    missing = [f"{args.man} does not name {flag}" for flag in names_missing(flags, man)]
    missing += [f"{args.reference} does not name {flag}" for flag in names_missing(flags, reference)]
    missing += [f"{args.reference} does not name {name}" for name in names_missing(env, reference)]
    documents = {args.man: man, args.reference: reference}
    documents.update({doc: pathlib.Path(doc).read_text() for doc in args.doc})
    for name, text in documents.items():
        missing += [f"{name} names {flag}, which the server does not have" for flag in unknown_flags(flags, text)]
    for line in missing:
        print(line)
    print(f"checked {len(flags)} flags and {len(env)} environment variables: {len(missing)} missing")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
