#!/usr/bin/env python3
"""Checks the tree's layers and process boundary by what each file includes.

Every folder of src/ may include only the folders its rule allows (a folder also
includes itself). A rule missing for a folder is a failure, so a new folder must say
where it stands. Usage: layers.py SRC_DIR; exit status 1 with each offending include.
"""
import pathlib
import re
import sys

# folder -> the folders its files may include, beyond themselves
ALLOWED = {
    "abi": [],
    "protocol": ["abi"],
    "transport": ["protocol"],
    "guest": ["guest/session", "protocol", "transport", "abi"],
    "guest/session": ["guest", "protocol", "transport", "abi"],
    # The host: what both processes hold, the listener, and the worker's parts.
    "host/common": ["protocol", "transport"],
    "host/worker/jail": ["host/common", "protocol", "transport"],
    # The listener probes the workers' jail at start-up; it never links a session,
    # a graph or a guest's weights.
    "host/listener": ["host/common", "host/worker/jail", "protocol", "transport"],
    # The services process: the store's owner, the model library, the peer broker.
    # The listener starts it; neither includes the other.
    "host/services": ["host/common", "host/worker/jail", "protocol", "transport"],
    # The graph checks and the op table they read (one library; ops/ holds a file per op family).
    "host/worker/graph": ["host/worker/graph/ops", "protocol", "abi"],
    "host/worker/graph/ops": ["host/worker/graph", "protocol", "abi"],
    "host/worker/weights": ["host/common", "protocol", "transport"],
    "host/worker/session": ["host/common", "host/worker/jail", "host/worker/graph", "host/worker/weights",
                            "protocol", "transport", "abi"],
}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def folder_of(path, src):
    return str(path.parent.relative_to(src))


def target_folder(include):
    return include.rsplit("/", 1)[0] if "/" in include else None


def offences(src):
    found = []
    for path in sorted(src.rglob("*")):
        if path.suffix not in (".h", ".cpp"):
            continue
        folder = folder_of(path, src)
        if folder not in ALLOWED:
            found.append(f"{path}: folder {folder} has no rule in scripts/layers.py")
            continue
        allowed = set(ALLOWED[folder]) | {folder}
        for include in INCLUDE.findall(path.read_text(errors="replace")):
            target = target_folder(include)
            if target is not None and (src / include).exists() and target not in allowed:
                found.append(f"{path}: includes {include} ({folder} may include {', '.join(sorted(allowed))})")
    return found


def main():
    src = pathlib.Path(sys.argv[1]).resolve()
    found = offences(src)
    for line in found:
        print(line)
    if not found:
        print(f"layers: every include of {src} keeps to its folder's rule")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
