#!/usr/bin/env python3
"""Turns recorded sessions (GGML_REMOTE_RECORD_DIR) into the fuzzers' seed corpus.

usage: make_corpus.py RECORD_DIR CORPUS_DIR

RECORD_DIR holds session-<pid>/NNNNNN-<command>.frame files, each a 16-byte frame
header and its payload. Writes, named by content hash (so repeated runs dedup):
  CORPUS_DIR/message_decoder/    single frames as they came over the socket, and
                                 each session's opening frames back to back
  CORPUS_DIR/tensor_validation/  buffer prefix + every distinct tensor list
  CORPUS_DIR/session/            each whole session as [u16 cmd][u32 len][payload]...
"""
import hashlib
import os
import struct
import sys
from collections import defaultdict

HEADER = struct.Struct("<HHiQ")  # protocol::FrameHeader
# CommandId values whose request carries a tensor list after its fixed part.
SUPPORTS_OP, ALLOC_SIZE, INIT_TENSOR, GRAPH_COMPUTE = 4, 5, 10, 20
TENSOR_TAILS = {SUPPORTS_OP: 4, ALLOC_SIZE: 4, INIT_TENSOR: 8, GRAPH_COMPUTE: 13}
GRAPH_REPLAY = 2
POLICY_NONE, POLICY_REQUIRED = 0, 2
MAX_DECODER_FRAME = 1 << 20       # the message decoder's payload limit
FRAMES_PER_COMMAND = 6            # distinct single frames kept per command
OPENING_BYTES = 64 << 10          # each session's opening frames, back to back


def write(directory, data):
    os.makedirs(directory, exist_ok=True)
    name = hashlib.sha1(data).hexdigest()
    with open(os.path.join(directory, name), "wb") as f:
        f.write(data)


def read_sessions(record_dir):
    for session in sorted(os.listdir(record_dir)):
        path = os.path.join(record_dir, session)
        frames = []
        for name in sorted(os.listdir(path)):
            with open(os.path.join(path, name), "rb") as f:
                data = f.read()
            command, _, _, size = HEADER.unpack_from(data)
            assert size == len(data) - HEADER.size, f"{name}: truncated frame"
            frames.append((command, data))
        yield session, frames


def tensor_list_seed(command, payload):
    fixed = TENSOR_TAILS[command]
    if len(payload) < fixed:
        return None
    if command == GRAPH_COMPUTE and payload[12] == GRAPH_REPLAY:
        return None
    policy = POLICY_NONE if command in (SUPPORTS_OP, ALLOC_SIZE) else POLICY_REQUIRED
    # fuzz_tensor_validation.cpp's prefix: buffer size, read-only mask, data policy.
    return struct.pack("<QBB", 1 << 32, 0, policy) + payload[fixed:]


def main():
    record_dir, corpus = sys.argv[1], sys.argv[2]
    by_command = defaultdict(dict)
    counts = defaultdict(int)
    for _, frames in read_sessions(record_dir):
        session = bytearray()
        opening = bytearray()
        for command, data in frames:
            payload = data[HEADER.size:]
            session += struct.pack("<HI", command, len(payload)) + payload
            if len(opening) + len(data) <= OPENING_BYTES:
                opening += data
            if len(payload) <= MAX_DECODER_FRAME:
                by_command[command].setdefault(hashlib.sha1(data).digest(), data)
            if command in TENSOR_TAILS:
                seed = tensor_list_seed(command, payload)
                if seed is not None:
                    write(os.path.join(corpus, "tensor_validation"), seed)
                    counts["tensor_validation"] += 1
        write(os.path.join(corpus, "session"), bytes(session))
        write(os.path.join(corpus, "message_decoder"), bytes(opening))
        counts["session"] += 1
    # A few frames of each command, spread over their sizes.
    for command, frames in by_command.items():
        ordered = sorted(frames.values(), key=len)
        step = max(1, len(ordered) // FRAMES_PER_COMMAND)
        for data in ordered[::step][:FRAMES_PER_COMMAND]:
            write(os.path.join(corpus, "message_decoder"), data)
            counts["message_decoder"] += 1
    for target in sorted(counts):
        print(f"{target}: {counts[target]} seeds written to {os.path.join(corpus, target)}")


if __name__ == "__main__":
    main()
