#!/usr/bin/env python3
"""Writes the hand-made seeds of the listener's channel targets.

usage: make_listener_corpus.py CORPUS_DIR

  CORPUS_DIR/store_channel/seed-*   scripts for fuzz_store_channel.cpp: commits and
                                    finds of each tenant, a share's eviction, a
                                    commit under way that others wait for, a shared
                                    store, damage found on use, refused commits
  CORPUS_DIR/model_library/seed-*   scripts for fuzz_model_library.cpp: sound GGUF
                                    files, files in every place, changes, lies

The byte layouts are the targets' own (each reads its input as a script of bytes,
fuzz_support.h's InputScript): keep them in step with the targets.
"""
import os
import struct
import sys

# fuzz_store_channel.cpp
FIND, COMMIT, COMMIT_UNDER_WAY, WAITERS, UNKNOWN, END, DAMAGE = 0, 2, 3, 4, 5, 6, 7
DERIVED, CLAIM = 1, 2


def store_settings(shared=False, verify=False, limit_units=30, sizes=(90, 150, 200, 40)):
    """Settings, the limit (2 + n) * 8 KiB, four contents of sizes[i] * 64 bytes."""
    out = bytes([(1 if shared else 0) | (2 if verify else 0), limit_units])
    for i, size in enumerate(sizes):
        out += bytes([size, 7 * i]) + bytes(range(10 * i, 10 * i + 8))
    return out


def op(slot, kind, collect=False):
    return bytes([(0x80 if collect else 0) | slot * 8 + kind])


def find(slot, content, flags=0, digest_variant=0, size_plan=0):
    return op(slot, FIND) + bytes([content + 4 * digest_variant, size_plan, flags, 0])


def commit(slot, content, flags=0, phase=(0, 0), pipes=0, plan=0, under_way=False, digest_variant=0):
    kind = COMMIT_UNDER_WAY if under_way else COMMIT
    return op(slot, kind) + bytes([content + 4 * digest_variant, 0, flags, phase[0], phase[1], pipes, plan])


def store_seeds():
    seeds = {}
    seeds["tenants"] = store_settings() + commit(0, 0) + find(2, 0) + find(1, 0) + find(0, 0, DERIVED) + \
        commit(0, 1, DERIVED, phase=(3, 5)) + find(1, 1, DERIVED) + find(0, 1, DERIVED) + op(0, WAITERS)
    # alice fills the store; bob, then carol, take their shares back.
    seeds["shares"] = store_settings(limit_units=6) + commit(0, 0) + commit(0, 1) + commit(1, 2) + \
        commit(2, 0) + commit(2, 1) + commit(3, 2) + find(0, 0) + commit(3, 3) + commit(0, 3)
    # A claim, a worker that waits, the commit under way, a second commit at once.
    seeds["in_flight"] = store_settings() + find(0, 1, CLAIM) + find(1, 1) + op(0, WAITERS) + \
        commit(0, 1, under_way=True) + find(1, 1) + find(2, 1, CLAIM) + op(0, WAITERS) + \
        commit(0, 2, under_way=True) + commit(1, 1) + op(0, WAITERS, collect=True) + find(1, 1)
    seeds["shared"] = store_settings(shared=True, limit_units=8) + commit(0, 0) + find(2, 0) + find(3, 0, CLAIM) + \
        find(2, 1, CLAIM) + find(0, 1) + commit(2, 1, under_way=True) + find(3, 1) + commit(3, 2, DERIVED) + \
        find(2, 2, DERIVED) + commit(1, 3) + commit(3, 3)
    seeds["damage"] = store_settings(verify=True) + commit(0, 0) + commit(0, 1) + commit(2, 2) + \
        op(0, DAMAGE) + bytes([0]) + find(0, 0) + op(0, DAMAGE) + bytes([64 + 1]) + find(1, 1) + \
        op(0, DAMAGE) + bytes([128]) + find(2, 2) + commit(0, 0)
    seeds["refused"] = store_settings(limit_units=1) + commit(0, 0, pipes=5) + commit(0, 0, pipes=6) + \
        commit(0, 0, plan=4) + commit(0, 0, plan=5) + commit(0, 0, plan=6) + commit(0, 0, plan=7) + \
        commit(1, 1, digest_variant=2) + commit(2, 2, pipes=7) + find(2, 2) + commit(3, 0, phase=(255, 255))
    seeds["requests"] = store_settings() + op(0, UNKNOWN) + bytes([0, 9]) + op(1, UNKNOWN) + bytes([128, 0]) + \
        op(2, UNKNOWN) + bytes([200, 1]) + find(0, 0, CLAIM) + op(0, END) + bytes([0]) + find(1, 0) + \
        op(1, END) + bytes([1]) + op(2, END) + bytes([2]) + find(0, 0, 0xFF) + op(3, WAITERS)
    return seeds


# fuzz_model_library.cpp
TOP, HIDDEN, OTHER_SUFFIX, SUBDIRECTORY, LINK_OUTSIDE, FIFO = 0, 5, 6, 7, 8, 9
CHANGE, CHANGE_HOW, INDEX, FIND_OVER_CHANNEL, OTHER, CHECK = 0, 1, 2, 3, 5, 7


def gguf(tensors, alignment=0, damage=0, version=None):
    """A file of `tensors` (size byte, seed, offset lie); alignment: index, 0 the default."""
    shape = 16 * (len(tensors) - 1) + (15 if version is not None else 0)
    out = bytes([shape, alignment])
    if version is not None:
        out += bytes([version])
    for size, seed, lie in tensors:
        out += bytes([size, seed, lie])
    return out + bytes([damage])


def library(files, steps=b""):
    out = bytes([len(files) - 1])
    for place, file in files:
        out += bytes([place]) + file
    return out + steps


def library_op(file, kind):
    return bytes([file * 8 + kind])


def library_seeds():
    seeds = {}
    sound = gguf([(40, 1, 0), (200, 2, 0)])
    seeds["sound"] = library([(TOP, sound)], library_op(0, FIND_OVER_CHANNEL) + bytes([0, 0]) +
                             library_op(0, FIND_OVER_CHANNEL) + bytes([1, 1]) + library_op(0, CHECK))
    seeds["places"] = library([(TOP, gguf([(100, 3, 0)], alignment=1)), (HIDDEN, gguf([(100, 4, 0)])),
                               (LINK_OUTSIDE, gguf([(120, 5, 0), (10, 6, 0)], alignment=2)),
                               (SUBDIRECTORY, gguf([(90, 7, 0)]))], library_op(0, CHECK))
    seeds["other_suffix"] = library([(OTHER_SUFFIX, gguf([(60, 8, 0)])), (TOP, gguf([(61, 8, 0)]))],
                                    library_op(0, CHECK))
    seeds["changes"] = library([(TOP, gguf([(80, 9, 0), (81, 10, 0)])), (TOP, gguf([(82, 11, 0)]))],
                               library_op(0, CHANGE) + gguf([(83, 12, 0)]) + library_op(0, CHECK) +
                               library_op(1, CHANGE_HOW) + bytes([1]) + library_op(1, CHECK) +
                               library_op(0, INDEX) + library_op(1, CHANGE_HOW) + bytes([2, 128]) +
                               library_op(0, INDEX) + library_op(0, CHANGE_HOW) + bytes([3]) +
                               library_op(0, CHECK) + library_op(0, INDEX))
    seeds["lies"] = library([(TOP, gguf([(70, 13, 7), (71, 14, 0)])), (TOP, gguf([(72, 15, 6), (73, 16, 6)])),
                             (TOP, gguf([(74, 17, 5)], alignment=5)), (TOP, gguf([(75, 18, 0)], version=2))],
                            library_op(0, CHECK))
    seeds["patched"] = library([(TOP, gguf([(76, 19, 0)], damage=2) + struct.pack("<H", 9) + bytes([1]) +
                                 struct.pack("<H", 30) + bytes([4])),
                                (TOP, gguf([(77, 20, 0)], damage=0x70) + bytes([200]))],
                               library_op(0, CHECK) + library_op(0, OTHER) + bytes([0]) +
                               library_op(0, OTHER) + bytes([1]) + library_op(0, OTHER) + bytes([2]))
    # A FIFO named like a model: indexing must go on past it (it hung on open).
    seeds["fifo"] = library([(FIFO, gguf([(50, 21, 0)])), (TOP, gguf([(51, 22, 0)]))], library_op(0, CHECK))
    return seeds


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    for target, seeds in (("store_channel", store_seeds()), ("model_library", library_seeds())):
        directory = os.path.join(sys.argv[1], target)
        os.makedirs(directory, exist_ok=True)
        for name, data in seeds.items():
            with open(os.path.join(directory, "seed-" + name), "wb") as out:
                out.write(data)


if __name__ == "__main__":
    main()
