#!/usr/bin/env python3
"""Seeds for the guest_replies fuzz target (fuzz_guest_replies.cpp): what a server
sends a guest during that target's script of calls, once as a truthful server
would, then with one lie each (the lies a hostile server told llama-simple, and
their neighbours). usage: make_guest_reply_corpus.py OUT_DIR"""
import os
import struct
import sys

REPLY = 1  # kFrameReply


def frame(command, payload, status=0, size=None):
    size = len(payload) if size is None else size
    return struct.pack('<HHiQ', command, REPLY, status, size) + payload


def truthful():
    """The replies in the script's order, as (name, bytes)."""
    device_info = struct.pack('<IIQQQQBBBB', 1, 0, 1 << 30, 1 << 31, 64, 1 << 40, 1, 0, 1, 0) + b'CPU\0a host CPU\0CPU\0'
    status_device = b'CPU'.ljust(64, b'\0') + b'a host CPU'.ljust(128, b'\0') + struct.pack('<QQ', 1, 2)
    return [
        ('hello', frame(1, struct.pack('<IIQ', 3, 1, 0))),
        ('device_info', frame(2, device_info)),
        ('alloc_size', frame(5, struct.pack('<Q', 256))),
        ('supports_op', frame(4, b'\1')),
        ('buffer_alloc', frame(6, struct.pack('<QQB', 1, 4096, 0))),
        ('device_memory', frame(3, struct.pack('<QQ', 1, 2))),
        ('buffer_from_file', frame(21, struct.pack('<Q', 2))),
        ('buffer_adopt', frame(29, struct.pack('<Q', 3))),
        ('get_tensor', frame(13, bytes(range(64)))),
        ('get_tensor_2d', frame(14, bytes(48))),
        ('copy_tensor', frame(16, b'\1')),
        ('copy_tensor_later', frame(16, b'\1')),
        ('get_tensor_later', frame(13, bytes(32))),
        ('backend_init', frame(17, struct.pack('<Q', 4))),
        ('graph_optimize', frame(28, struct.pack('<BII', 1, 3, 1) + struct.pack('<iiiii', 2, 0, 1, 0, 4))),
        ('synchronize', frame(22, b'')),
        ('server_status', frame(23, struct.pack('<IIII', 1, 4, 1, 0) + status_device)),
        ('weight_lookup', frame(26, b'\0')),
    ]


def lies():
    """(seed name, reply replaced, its false bytes)."""
    return [
        ('hello-devices-2e31', 'hello', frame(1, struct.pack('<IIQ', 3, 1 << 31, 0))),
        ('hello-caps-not-asked', 'hello', frame(1, struct.pack('<IIQ', 3, 1, 3))),
        ('hello-version', 'hello', frame(1, struct.pack('<IIQ', 2, 1, 0))),
        ('device-info-huge-length', 'device_info', frame(2, b'', size=1 << 62)),
        ('device-info-alignment-2e63', 'device_info',
         frame(2, struct.pack('<IIQQQQBBBB', 1, 0, 1, 2, 1 << 63, 1 << 40, 1, 0, 1, 0) + b'a\0b\0c\0')),
        ('device-info-no-strings', 'device_info', frame(2, struct.pack('<IIQQQQBBBB', 1, 0, 1, 2, 64, 1, 1, 1, 1, 2))),
        ('alloc-size-small', 'alloc_size', frame(5, struct.pack('<Q', 8))),
        ('alloc-size-huge', 'alloc_size', frame(5, struct.pack('<Q', 1 << 63))),
        ('buffer-alloc-short', 'buffer_alloc', frame(6, struct.pack('<QQB', 1, 2048, 0))),
        ('buffer-alloc-huge', 'buffer_alloc', frame(6, struct.pack('<QQB', 1, (1 << 64) - 1, 0))),
        ('buffer-alloc-shared-no-file', 'buffer_alloc', frame(6, struct.pack('<QQB', 1, 4096, 1))),
        ('buffer-alloc-region', 'buffer_alloc', frame(6, struct.pack('<QQBQ', 1, 4096, 2, 1 << 40))),
        ('get-tensor-short', 'get_tensor', frame(13, bytes(32))),
        ('get-tensor-huge-length', 'get_tensor', frame(13, b'', size=1 << 62)),
        ('refusal-long', 'device_memory', frame(3, b'no', status=1, size=1 << 40)),
        ('refusal-unknown-code', 'device_memory', frame(3, b'why\n\x1b[2J', status=99)),
        ('wrong-command', 'device_memory', frame(2, struct.pack('<QQ', 1, 2))),
        ('later-refused', 'copy_tensor_later', frame(16, b'nope', status=3)),
        ('graph-optimize-no-permutation', 'graph_optimize',
         frame(28, struct.pack('<BII', 1, 3, 0) + struct.pack('<iii', 0, 0, 1))),
        ('graph-optimize-huge-counts', 'graph_optimize', frame(28, struct.pack('<BII', 1, 1 << 31, 1 << 31))),
        ('server-status-counts', 'server_status', frame(23, struct.pack('<IIII', 1, 4, 1 << 30, 1 << 30))),
    ]


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    replies = truthful()
    seeds = {'truthful': b''.join(data for _, data in replies)}
    for seed, replaced, false in lies():
        seeds[seed] = b''.join(false if name == replaced else data for name, data in replies)
    for name, data in seeds.items():
        with open(os.path.join(out, name), 'wb') as f:
            f.write(data)


if __name__ == '__main__':
    main()
