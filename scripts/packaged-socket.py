#!/usr/bin/env python3
"""Checks that the packaged files all name the one socket of ggml-remote.socket.

The socket unit's ListenStream= is the packaged socket. Each FILE (the service unit,
the conffile, the CDI spec, README.md, ...) must name it, and every path under
/run/ggml-remote that FILE names must be that socket or its directory: a guest
told one path while systemd listens on another finds no server. Prints one line
per mistake and exits 1 if there is any.

usage: packaged-socket.py --socket-unit UNIT FILE...
"""
import argparse
import pathlib
import posixpath
import re
import sys

LISTEN_STREAM = re.compile(r"^ListenStream=(/\S+)$", re.MULTILINE)
# A path in the package's place under /run; a trailing dot or slash ends a sentence.
RUN_PATH = re.compile(r"(?<![\w/.-])(/run/ggml-remote(?:[\w./-]*[\w])?)")


def packaged_socket(unit_text):
    match = LISTEN_STREAM.search(unit_text)
    return match.group(1) if match else None


def mistakes_in(name, text, socket):
    """What `text` (of file `name`) gets wrong about `socket`."""
    allowed = {socket, posixpath.dirname(socket)}
    found = list(dict.fromkeys(RUN_PATH.findall(text)))
    mistakes = [f"{name} names {path}, neither the packaged socket {socket} nor its directory"
                for path in found if path not in allowed]
    if socket not in found:
        mistakes.append(f"{name} does not name the packaged socket {socket}")
    return mistakes


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--socket-unit", required=True, help="the packaged socket unit (its ListenStream=)")
    parser.add_argument("files", nargs="+", help="files that must name the packaged socket")
    args = parser.parse_args(argv)
    socket = packaged_socket(pathlib.Path(args.socket_unit).read_text())
    if not socket:
        print(f"{args.socket_unit}: no ListenStream=/path")
        return 1
    mistakes = []
    for name in args.files:
        mistakes += mistakes_in(name, pathlib.Path(name).read_text(), socket)
    for line in mistakes:
        print(line)
    print(f"{len(args.files)} files checked against {socket}: {len(mistakes)} mistakes")
    return 1 if mistakes else 0


if __name__ == "__main__":
    sys.exit(main())
