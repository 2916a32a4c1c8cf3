#!/usr/bin/env python3
"""bench_pss.py PID [COUNT]: every 100 ms, the PSS in kB of PID and all its
descendants and how many processes that is, one line per sample; COUNT samples,
or until killed. PSS splits a shared page among the processes that map it, so a
page the workers share (one copy of a model's weights) counts once in the sum, a
private one fully."""
import os
import sys
import time


def tree(root):
    """root and its descendants, from every process's parent in /proc/PID/stat."""
    children = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            stat = open(f"/proc/{name}/stat").read()
        except OSError:
            continue
        # The command name may hold spaces and parentheses: the fields after it
        # start at the last ')'.
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        children.setdefault(ppid, []).append(int(name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += children.get(pid, [])
    return found


def pss_kb(pid):
    try:
        for line in open(f"/proc/{pid}/smaps_rollup"):
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except OSError:  # a worker that ended between the listing and the read
        pass
    return 0


def main():
    root = int(sys.argv[1])
    count = int(sys.argv[2]) if len(sys.argv) > 2 else None
    while count is None or count > 0:
        procs = tree(root)
        print(sum(pss_kb(pid) for pid in procs), len(procs), flush=True)
        if count is not None:
            count -= 1
        time.sleep(0.1)


if __name__ == "__main__":
    main()
