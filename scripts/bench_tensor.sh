#!/usr/bin/env bash
# make bench, tensor parallelism section (issue 28): llama.cpp's -sm layer against
# -sm tensor (ggml's meta backend) over two servers, ours (shm, unix, and tcp: the
# servers sum over a TCP link between them, as between machines) against
# ggml-rpc's, in one run, rounds rotated; then the pinned setup: one server on one
# core against two servers on a core each.
#   bench_tensor.sh BUILD
#   BENCH_TENSOR_MODELS="small mid-q4km"  BENCH_TENSOR_REPS=3  BENCH_TENSOR_PP=64  BENCH_TENSOR_TG=32
#   BENCH_TENSOR_PINNED_MODEL=mid-q4km (empty: no pinned part)
# Prints one table per part: pp and tg in tokens/s, median [min-max] of the rounds
# (each round llama-bench's mean of 2 runs), and tg against ours with -sm layer and
# against ggml-rpc's -sm tensor.
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
models=${BENCH_TENSOR_MODELS:-small mid-q4km}
reps=${BENCH_TENSOR_REPS:-3}
pp=${BENCH_TENSOR_PP:-64}
tg=${BENCH_TENSOR_TG:-32}
pinned_model=${BENCH_TENSOR_PINNED_MODEL-mid-q4km}
rpc_server=/usr/libexec/x86_64-linux-gnu/llama/bin/ggml-rpc-server
work=$(mktemp -d /tmp/ggml-remote-bench-tensor.XXXXXX)
pids=()
stop_servers() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    pids=()
}
cleanup() {
    stop_servers
    rm -rf "$work"
}
trap cleanup EXIT
# shellcheck source=bench_lib.sh
source "$here/bench_lib.sh"  # free_port, wait_for, tcp_open, ensure_model, cache_as_read

plugin=(env GGML_BACKEND_PATH="$build/lib/libggml-remote.so")
raw=$work/raw.tsv
: >"$raw"

# start_ours NAME [TASKSET CPU] [SERVER ARGS...]: a server of ours on $work/NAME.sock.
start_ours() {
    local name=$1 cpu=$2
    shift 2
    local pin=()
    [ -n "$cpu" ] && pin=(taskset -c "$cpu")
    "${pin[@]}" "$build/bin/ggml-remote-server" --listen "unix:$work/$name.sock" "$@" >"$work/$name.log" 2>&1 &
    pids+=($!)
    wait_for test -S "$work/$name.sock"
}

# record PART MODEL VARIANT JSON: llama-bench's pp and tg means, one line each.
record() {
    python3 - "$1" "$2" "$3" "$4" >>"$raw" <<'PY'
import json, sys
part, model, variant, path = sys.argv[1:5]
for test in json.load(open(path)):
    kind = "pp" if test["n_prompt"] > 0 else "tg"
    print(f"{part}\t{model}\t{variant}\t{kind}\t{test['avg_ts']:.2f}")
PY
}

# bench PART MODEL VARIANT ARGS...: one llama-bench round of a variant (ARGS: its
# environment and flags, as `env ... llama-bench` takes them after the model).
bench_round() {
    local part=$1 name=$2 variant=$3 model
    shift 3
    model=$(ensure_model "$name")
    echo "bench-tensor: $part $name $variant" >&2
    if ! "$@" -m "$model" -p "$pp" -n "$tg" -r 2 -o json >"$work/bench.json" 2>"$work/bench.err"; then
        echo "bench-tensor: llama-bench failed for $part $name $variant:" >&2
        tail -3 "$work/bench.err" >&2
        return 0
    fi
    record "$part" "$name" "$variant" "$work/bench.json"
}

# variant_command VARIANT: the command line (up to llama-bench's own flags) of a variant.
variant_command() {
    local a=$work/a.sock b=$work/b.sock
    case $1 in
        ours-layer) echo "${plugin[*]} GGML_REMOTE_SERVERS=shm:$a,shm:$b llama-bench -t 1 -ngl 99 -sm layer" ;;
        ours-tensor) echo "${plugin[*]} GGML_REMOTE_SERVERS=shm:$a,shm:$b llama-bench -t 1 -ngl 99 -sm tensor" ;;
        ours-tensor-unix) echo "${plugin[*]} GGML_REMOTE_SERVERS=unix:$a,unix:$b llama-bench -t 1 -ngl 99 -sm tensor" ;;
        ours-tensor-tcp) echo "${plugin[*]} GGML_REMOTE_SERVERS=tcp://127.0.0.1:$tcp_a,tcp://127.0.0.1:$tcp_b llama-bench -t 1 -ngl 99 -sm tensor" ;;
        rpc-layer) echo "llama-bench -t 1 -ngl 99 -sm layer --rpc 127.0.0.1:$rpc_a,127.0.0.1:$rpc_b" ;;
        rpc-tensor) echo "llama-bench -t 1 -ngl 99 -sm tensor --rpc 127.0.0.1:$rpc_a,127.0.0.1:$rpc_b" ;;
        one-server) echo "${plugin[*]} GGML_REMOTE_SERVERS=shm:$work/one.sock llama-bench -t 1 -ngl 99" ;;
        two-layer) echo "${plugin[*]} GGML_REMOTE_SERVERS=shm:$work/p0.sock,shm:$work/p1.sock llama-bench -t 1 -ngl 99 -sm layer" ;;
        two-tensor) echo "${plugin[*]} GGML_REMOTE_SERVERS=shm:$work/p0.sock,shm:$work/p1.sock llama-bench -t 1 -ngl 99 -sm tensor" ;;
        two-tensor-tcp) echo "${plugin[*]} GGML_REMOTE_SERVERS=tcp://127.0.0.1:$tcp_a,tcp://127.0.0.1:$tcp_b llama-bench -t 1 -ngl 99 -sm tensor" ;;
    esac
}

# rounds PART MODEL VARIANT...: $reps rounds, each starting with another variant.
rounds() {
    local part=$1 name=$2
    shift 2
    local variants=("$@") rep shift_by variant
    cache_as_read "$(ensure_model "$name")"
    for rep in $(seq "$reps"); do
        shift_by=$(((rep - 1) % ${#variants[@]}))
        for variant in "${variants[@]:shift_by}" "${variants[@]:0:shift_by}"; do
            # shellcheck disable=SC2046
            bench_round "$part" "$name" "$variant" $(variant_command "$variant")
        done
    done
}

# Part 1: two servers on the whole machine, each with one thread; the second may
# dial the first for a TCP link (--tensor-peer).
tcp_a=$(free_port)
tcp_b=$(free_port)
start_ours a "" --threads 1 --listen "tcp://127.0.0.1:$tcp_a"
start_ours b "" --threads 1 --listen "tcp://127.0.0.1:$tcp_b" --tensor-peer "tcp://127.0.0.1:$tcp_a"
rpc_a=$(free_port)
rpc_b=$(free_port)
"$rpc_server" -H 127.0.0.1 -p "$rpc_a" -t 1 >"$work/rpc-a.log" 2>&1 &
pids+=($!)
"$rpc_server" -H 127.0.0.1 -p "$rpc_b" -t 1 >"$work/rpc-b.log" 2>&1 &
pids+=($!)
wait_for tcp_open "$rpc_a"
wait_for tcp_open "$rpc_b"
for name in $models; do
    rounds split "$name" ours-layer ours-tensor ours-tensor-unix ours-tensor-tcp rpc-layer rpc-tensor
done
stop_servers

# Part 2: pinned, one core a server (its workers too: taskset is inherited).
if [ -n "$pinned_model" ]; then
    start_ours one 0 --cores 1 --threads 1
    tcp_a=$(free_port)
    tcp_b=$(free_port)
    start_ours p0 0 --cores 1 --threads 1 --listen "tcp://127.0.0.1:$tcp_a"
    start_ours p1 1 --cores 1 --threads 1 --listen "tcp://127.0.0.1:$tcp_b" --tensor-peer "tcp://127.0.0.1:$tcp_a"
    rounds pinned "$pinned_model" one-server two-layer two-tensor two-tensor-tcp
    stop_servers
fi

python3 - "$raw" <<'PY'
import statistics, sys
from collections import defaultdict
rows = defaultdict(list)
order = []
for line in open(sys.argv[1]):
    part, model, variant, kind, value = line.rstrip("\n").split("\t")
    key = (part, model, variant)
    if key not in order:
        order.append(key)
    rows[key + (kind,)].append(float(value))
def med(key):
    values = rows.get(key)
    return statistics.median(values) if values else None
def cell(key):
    values = rows.get(key)
    if not values:
        return "-"
    return f"{statistics.median(values):,.1f} [{min(values):,.1f}-{max(values):,.1f}]"
def ratio(a, b):
    return f"{a / b:.2f}x" if a and b else "-"
for part, title, base in (("split", "two servers, one thread each", ("ours-layer", "rpc-tensor")),
                          ("pinned", "pinned: a server a core (taskset, --cores 1)", ("one-server", None))):
    keys = [k for k in order if k[0] == part]
    if not keys:
        continue
    print(f"\n## tensor parallelism, {title} (tokens/s, median [min-max])")
    if part == "split":
        print("| model | variant | pp | tg | tg / ours layer | tg / ggml-rpc tensor |")
        print("|---|---|---|---|---|---|")
    else:
        print("| model | variant | pp | tg | pp / one server | tg / one server |")
        print("|---|---|---|---|---|---|")
    for _, model, variant in keys:
        pp, tgv = med((part, model, variant, "pp")), med((part, model, variant, "tg"))
        first, second = base
        if part == "split":
            extra = [ratio(tgv, med((part, model, first, "tg"))), ratio(tgv, med((part, model, second, "tg")))]
        else:
            extra = [ratio(pp, med((part, model, first, "pp"))), ratio(tgv, med((part, model, first, "tg")))]
        print(f"| {model} | {variant} | {cell((part, model, variant, 'pp'))} | "
              f"{cell((part, model, variant, 'tg'))} | " + " | ".join(extra) + " |")
PY
