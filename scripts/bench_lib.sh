# shellcheck shell=bash
# Helpers shared by bench.sh and bench_many.sh (sourced). The caller sets
# `build` (the build tree) and `work` (a scratch directory it removes).

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_for() {  # wait_for CHECK-COMMAND...
    for _ in $(seq 100); do "$@" 2>/dev/null && return 0; sleep 0.1; done
    echo "bench: timed out waiting for: $*" >&2; return 1
}
tcp_open() { bash -c "exec 3<>/dev/tcp/127.0.0.1/$1"; }  # tcp_open PORT: true once something listens

# ensure_model PRESET[-q4km|-q8]: prints the path of the synthetic F16 llama model,
# writing it once; with a suffix, of its llama-quantize'd copy (Q4_K_M, Q8_0).
ensure_model() {
    case $1 in
        *-q4km) ensure_quantized "${1%-q4km}" Q4_K_M "$1"; return ;;
        *-q8) ensure_quantized "${1%-q8}" Q8_0 "$1"; return ;;
    esac
    local model=${build:?}/models/$1-f16.gguf
    if [ ! -s "$model" ]; then
        echo "bench: writing the $1 model" >&2
        mkdir -p "$build/models"
        "$build/bin/ggml-remote-synthetic-model" --preset "$1" --type f16 -o "$model.tmp" >/dev/null
        mv "$model.tmp" "$model"
    fi
    echo "$model"
}

# ensure_quantized PRESET TYPE NAME: the F16 model quantized to TYPE, written once.
ensure_quantized() {
    local f16 out=${build:?}/models/$3.gguf
    f16=$(ensure_model "$1")
    if [ ! -s "$out" ]; then
        echo "bench: quantizing the $1 model to $2" >&2
        llama-quantize "$f16" "$out.tmp" "$2" >"$out.log" 2>&1 || { tail -5 "$out.log" >&2; return 1; }
        mv "$out.tmp" "$out"
    fi
    echo "$out"
}

# cache_as_read FILE: the file's pages cached as a model read from disk has them. A
# file just written sits in the page cache in the pieces it was written in, mostly
# smaller than 2 MiB; read back (readahead), it is cached in 2 MiB folios, which a
# process that maps the file (llama.cpp locally, the server over shm) maps with
# huge pages. So every model is written out, dropped from the cache and read back.
cache_as_read() {
    python3 - "$1" <<'PY'
import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
os.fsync(fd)
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
while os.read(fd, 8 << 20):
    pass
os.close(fd)
PY
}

# run_load MODEL RUNNER...: one model load, prints the seconds it took. RUNNER is
# the command (a function, say) that runs llama-completion's command line for one
# variant: local, through a server, with --rpc.
run_load() {
    # llama-completion -v stamps each log line with the time since start: the model
    # load runs from reading the file's metadata to the first line about the context
    # (weights uploaded, or mapped). One thread: it loses its last lines otherwise.
    # A failed run prints nan, which the report shows as "-".
    local model=$1 log=${work:?}/load.log
    shift
    "$@" llama-completion -m "$model" -n 1 -p Hi -no-cnv --no-warmup -t 1 -v </dev/null >/dev/null 2>"$log" || true
    load_seconds "$log"
}

# load_seconds LOG: the model load's seconds in the log of `llama-completion -v`
# (run_load's; the VM benchmark's, run inside the VM), or nan.
load_seconds() {
    python3 - "$1" <<'PY'
import re, sys
def stamp(line):
    m = re.match(r"(\d+)\.(\d+)\.(\d+)\.(\d+) ", line)
    return int(m[1]) * 60 + int(m[2]) + int(m[3]) / 1e3 + int(m[4]) / 1e6 if m else None
# llama.cpp first loads the model without data to fit its parameters to the
# device memory: the real load is the last one.
start = end = None
for line in open(sys.argv[1], errors="replace"):
    if "llama_model_loader: loaded meta data" in line:
        start, end = stamp(line), None
    elif start is not None and end is None and re.match(r"\S+ \S+ llama_context", line):
        end = stamp(line)
print(f"{end - start:.4f}" if start is not None and end is not None else "nan")
PY
}
