#!/usr/bin/env bash
# Records real llama.cpp sessions through ggml-remote-server (GGML_REMOTE_RECORD_DIR)
# and turns them into the fuzzers' seed corpus (make_corpus.py).
# usage: tests/fuzz/record_corpus.sh BUILD_DIR CORPUS_DIR   (inside scripts/in-sysroot)
set -euo pipefail
build=$(realpath "${1:?usage: record_corpus.sh BUILD_DIR CORPUS_DIR}")
corpus=${2:?usage: record_corpus.sh BUILD_DIR CORPUS_DIR}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d /tmp/ggml-remote-record.XXXXXX)
server_pid=""
cleanup() {
    [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT

# Models just big enough to be real: every graph and weight ends up in the seeds.
"$build/bin/ggml-remote-synthetic-model" --n-embd 32 --n-layer 1 --n-head 2 --n-ff 64 --n-vocab 259 \
    --type q8_0 -o "$work/micro-q8_0.gguf" >/dev/null
"$build/bin/ggml-remote-synthetic-model" --n-embd 32 --n-layer 2 --n-head 4 --n-head-kv 2 --n-ff 64 \
    --n-vocab 259 --type f16 -o "$work/micro-f16.gguf" >/dev/null

GGML_REMOTE_RECORD_DIR=$work/frames "$build/bin/ggml-remote-server" --listen "unix:$work/server.sock" \
    >"$work/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 100); do [ -S "$work/server.sock" ] && break; sleep 0.1; done
[ -S "$work/server.sock" ] || { cat "$work/server.log" >&2; exit 1; }

guest() {
    GGML_BACKEND_PATH=$build/lib/libggml-remote.so GGML_REMOTE_SERVERS=unix:$work/server.sock \
        timeout 120 "$@" >>"$work/guest.log" 2>&1 || { tail -20 "$work/guest.log" >&2; exit 1; }
}
# Generation: load, prompt, decode graphs stored and replayed. Unix, not shm: every
# byte travels in frames, so the recording holds whole sessions.
guest llama-simple -m "$work/micro-q8_0.gguf" -n 4 -ngl 99 "Hello world"
guest llama-simple -m "$work/micro-f16.gguf" -n 3 -ngl 99 "Hi"
# Half the layers remote: tensors copied between the local CPU and the remote device.
guest llama-simple -m "$work/micro-f16.gguf" -n 2 -ngl 1 "Hi"
kill "$server_pid"
wait "$server_pid" 2>/dev/null || true
server_pid=""
echo "recorded $(find "$work/frames" -name '*.frame' | wc -l) frames in $(ls "$work/frames" | wc -l) sessions"
python3 "$here/make_corpus.py" "$work/frames" "$corpus"
