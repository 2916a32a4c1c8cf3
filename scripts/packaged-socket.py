#!/usr/bin/env python3
"""Checks that the packaged files all name the one socket of ggml-remote.socket.

The socket unit's ListenStream= is the packaged socket. Each FILE (the service unit,
the conffile, the CDI spec, README.md, ...) must name it, and every path under
/run/ggml-remote that FILE names must be that socket or its directory: a guest
told one path while systemd listens on another finds no server. Each --may-name
file, or folder of sources and documents, must name no other path there either;
with --server, `status --help` must name the socket (status asks it by default).
Prints one line per mistake and exits 1 if there is any.

usage: packaged-socket.py --socket-unit UNIT [--may-name PATH]... [--server BINARY] FILE...
"""
import argparse
import pathlib
import posixpath
import re
import subprocess
import sys

LISTEN_STREAM = re.compile(r"^ListenStream=(/\S+)$", re.MULTILINE)
# A path in the package's place under /run; a trailing dot or slash ends a sentence.
# A metrics endpoint (`--metrics unix:...`) is another socket on purpose.
RUN_PATH = re.compile(r"(?<![\w/.-])(?<!--metrics unix:)(/run/ggml-remote(?:[\w./-]*[\w])?)")


# Files of a --may-name folder that are read: sources and documents.
READ_SUFFIXES = (".cpp", ".h", ".md", ".1")


def plain_text(text):
    """troff as words: `\\-` is a hyphen, font changes vanish."""
    text = text.replace("\\-", "-").replace("\\(hy", "-")
    return re.sub(r"\\f[BIRP]|\\f\(..|\\&", "", text)


def packaged_socket(unit_text):
    match = LISTEN_STREAM.search(unit_text)
    return match.group(1) if match else None


def mistakes_in(name, text, socket):
    """What `text` (of file `name`) gets wrong about `socket`."""
    mistakes = other_paths(name, text, socket)
    if socket not in RUN_PATH.findall(plain_text(text)):
        mistakes.append(f"{name} does not name the packaged socket {socket}")
    return mistakes


def other_paths(name, text, socket):
    """The paths under /run/ggml-remote that `text` names and that are not `socket` or its directory."""
    allowed = {socket, posixpath.dirname(socket)}
    found = dict.fromkeys(RUN_PATH.findall(plain_text(text)))
    return [f"{name} names {path}, neither the packaged socket {socket} nor its directory"
            for path in found if path not in allowed]


def texts_below(path):
    """(name, text) of a file, or of each source and document below a folder."""
    path = pathlib.Path(path)
    files = sorted(p for p in path.rglob("*") if p.suffix in READ_SUFFIXES and p.is_file()) if path.is_dir() else [path]
    for file in files:
        yield str(file), file.read_text(errors="replace")


def status_help_mistakes(server, socket):
    run = subprocess.run([server, "status", "--help"], capture_output=True, text=True, timeout=30)
    if run.returncode != 0:
        return [f"{server} status --help failed ({run.returncode}): {run.stderr.strip()}"]
    name = f"{server} status --help"
    mistakes = other_paths(name, run.stdout, socket)
    if socket not in run.stdout:
        mistakes.append(f"{name} does not name the packaged socket {socket}")
    return mistakes


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--socket-unit", required=True, help="the packaged socket unit (its ListenStream=)")
    parser.add_argument("--may-name", action="append", default=[],
                        help="a file or folder that may name no other path under /run/ggml-remote")
    parser.add_argument("--server", help="the built ggml-remote-server, whose status --help must name the socket")
    parser.add_argument("files", nargs="+", help="files that must name the packaged socket")
    args = parser.parse_args(argv)
    socket = packaged_socket(pathlib.Path(args.socket_unit).read_text())
    if not socket:
        print(f"{args.socket_unit}: no ListenStream=/path")
        return 1
    mistakes = []
    for name in args.files:
        mistakes += mistakes_in(name, pathlib.Path(name).read_text(), socket)
    for path in args.may_name:
        for name, text in texts_below(path):
            mistakes += other_paths(name, text, socket)
    if args.server:
        mistakes += status_help_mistakes(args.server, socket)
    for line in mistakes:
        print(line)
    print(f"{len(args.files)} files checked against {socket}: {len(mistakes)} mistakes")
    return 1 if mistakes else 0


if __name__ == "__main__":
    sys.exit(main())
