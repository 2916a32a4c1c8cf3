#!/usr/bin/env bash
# make bench: llama.cpp on the same synthetic models, locally and through every
# remote transport (ours over shm, unix and TCP; ggml-rpc with and without its
# cache), in one run, interleaved and repeated. Prints a table and writes
# BUILD/bench/results.json.
#   BENCH_MODELS="tiny small mid"  BENCH_REPS=  BENCH_RUNS=3  BENCH_PP=64  BENCH_TG=64  BENCH_THREADS=2
# Each of the rounds starts every variant afresh (a new guest process, a new
# server session), in an order rotated from round to round, and its figure is
# llama-bench's mean of BENCH_RUNS runs: on a 2-core VM a single short run, or a
# single process, varies by +-15%, mostly from one process to the next. So the
# models whose rounds take seconds get 15 rounds, the mid one (a minute and a
# half a round) 5; BENCH_REPS sets one count for all.
#   BENCH_WHISPER="micro" (whisper-bench on synthetic whisper models; empty to skip)
#   BENCH_VULKAN=0 skips the Vulkan section (issue 17; BENCH_VULKAN_MODELS="tiny small",
#   BENCH_VULKAN_REPS=3 rounds) and the RTT section's Vulkan rows; without a Vulkan
#   device both skip themselves.
#   BENCH_RTT=0, BENCH_ACCOUNTING=0, BENCH_MANY=0, BENCH_TENSOR=0 skip those sections (BENCH_MANY_*:
#   see bench_many.sh; BENCH_TENSOR_*: bench_tensor.sh)
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
models=${BENCH_MODELS:-tiny small mid}
reps_for() {  # reps_for MODEL [KIND]: the rounds that model gets (in the vulkan section: BENCH_VULKAN_REPS)
    if [ "${2:-}" = vulkan ]; then echo "${BENCH_VULKAN_REPS:-3}"; return; fi
    if [ -n "${BENCH_REPS:-}" ]; then echo "$BENCH_REPS"; return; fi
    case $1 in tiny|small) echo 15 ;; *) echo 5 ;; esac
}
runs=${BENCH_RUNS:-3}
pp=${BENCH_PP:-64}
tg=${BENCH_TG:-64}
threads=${BENCH_THREADS:-2}
whisper_models=${BENCH_WHISPER-micro}
rpc_server=/usr/libexec/x86_64-linux-gnu/llama/bin/ggml-rpc-server
out=$build/bench
mkdir -p "$out" "$build/models"
raw=$out/raw.jsonl
: >"$raw"
work=$(mktemp -d /tmp/ggml-remote-bench.XXXXXX)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

# shellcheck source=bench_lib.sh
source "$here/bench_lib.sh"  # free_port, wait_for, ensure_model, cache_as_read, run_load

# Servers: ours (unix socket for unix: and shm:, plus TCP) and ggml-rpc twice.
port=$(free_port)
"$build/bin/ggml-remote-server" --listen "unix:$work/remote.sock" --listen "tcp://127.0.0.1:$port" \
    --threads "$threads" >"$work/remote.log" 2>&1 &
pids+=($!)
rpc_port=$(free_port)
"$rpc_server" -H 127.0.0.1 -p "$rpc_port" -t "$threads" >"$work/rpc.log" 2>&1 &
pids+=($!)
rpc_cache_port=$(free_port)
mkdir -p "$work/rpc-cache"
XDG_CACHE_HOME=$work/rpc-cache "$rpc_server" -H 127.0.0.1 -p "$rpc_cache_port" -t "$threads" -c >"$work/rpc-cache.log" 2>&1 &
pids+=($!)
wait_for test -S "$work/remote.sock"
wait_for tcp_open "$rpc_port"
wait_for tcp_open "$rpc_cache_port"

plugin=(env GGML_BACKEND_PATH="$build/lib/libggml-remote.so")
transports=(local shm unix tcp rpc rpc-cache)
run_variant() {  # run_variant TRANSPORT TOOL ARGS...: the tool, set up for that transport
    local transport=$1; shift
    case $transport in
        local) "$@" ;;
        shm) "${plugin[@]}" GGML_REMOTE_SERVERS="shm:$work/remote.sock" "$@" -ngl 99 ;;
        unix) "${plugin[@]}" GGML_REMOTE_SERVERS="unix:$work/remote.sock" "$@" -ngl 99 ;;
        tcp) "${plugin[@]}" GGML_REMOTE_SERVERS="tcp://127.0.0.1:$port" "$@" -ngl 99 ;;
        rpc) "$@" --rpc "127.0.0.1:$rpc_port" -ngl 99 ;;
        rpc-cache) "$@" --rpc "127.0.0.1:$rpc_cache_port" -ngl 99 ;;
    esac
}
# llama_rounds MODEL KIND RUNNER VARIANT...: the model's rounds; each runs llama-bench
# (and, in the cpu section, one model load) as every variant (RUNNER VARIANT TOOL
# ARGS... runs a tool as that variant), in an order rotated from round to round.
llama_rounds() {
    local name=$1 kind=$2 runner=$3
    shift 3
    local variants=("$@") model reps rep shift_by variant load_s json=$work/bench.json
    model=$(ensure_model "$name")
    cache_as_read "$model"
    reps=$(reps_for "$name" "$kind")
    for rep in $(seq "$reps"); do
        # Each round starts with another variant: a place in the order (the first
        # run after the previous model's, say) favours no variant every time.
        shift_by=$(((rep - 1) % ${#variants[@]}))
        for variant in "${variants[@]:shift_by}" "${variants[@]:0:shift_by}"; do
            echo "bench: $kind $name $variant (round $rep of $reps)" >&2
            if ! "$runner" "$variant" llama-bench -m "$model" -p "$pp" -n "$tg" -r "$runs" -t "$threads" -o json \
                >"$json" 2>"$work/bench.err"; then
                echo "bench: llama-bench failed for $kind $name $variant:" >&2; tail -5 "$work/bench.err" >&2
                continue
            fi
            load_s=nan
            if [ "$kind" = cpu ]; then load_s=$(run_load "$model" "$runner" "$variant"); fi
            python3 "$here/bench_report.py" record "$name" "$variant" "$rep" "${load_s:-nan}" "$kind" <"$json" >>"$raw"
        done
    done
}
for name in $models; do
    llama_rounds "$name" cpu run_variant "${transports[@]}"
done
# whisper.cpp: whisper-bench's fixed encoder + decoder workload (it has no RPC option).
for name in $whisper_models; do
    model=$build/models/whisper-$name-f16.bin
    if [ ! -s "$model" ]; then
        echo "bench: writing the whisper $name model" >&2
        "$build/bin/ggml-remote-synthetic-whisper" --preset "$name" --type f16 -o "$model.tmp" >/dev/null
        mv "$model.tmp" "$model"
    fi
    reps=$(reps_for "$name")
    for rep in $(seq "$reps"); do
        for transport in local shm unix tcp; do
            echo "bench: whisper-$name $transport (round $rep of $reps)" >&2
            case $transport in
                local) whisper-bench -m "$model" -t "$threads" ;;
                shm) "${plugin[@]}" GGML_REMOTE_SERVERS="shm:$work/remote.sock" whisper-bench -m "$model" -t "$threads" ;;
                unix) "${plugin[@]}" GGML_REMOTE_SERVERS="unix:$work/remote.sock" whisper-bench -m "$model" -t "$threads" ;;
                tcp) "${plugin[@]}" GGML_REMOTE_SERVERS="tcp://127.0.0.1:$port" whisper-bench -m "$model" -t "$threads" ;;
            esac >"$work/whisper.log" 2>&1 || { echo "bench: whisper-bench failed for $transport" >&2; tail -5 "$work/whisper.log" >&2; continue; }
            python3 "$here/bench_report.py" record-whisper "whisper-$name" "$transport" "$rep" <"$work/whisper.log" >>"$raw"
        done
    done
done

# Vulkan (issue 17): llama.cpp on the host's Vulkan0 (lavapipe here; ggml shows a
# CPU-type Vulkan device only with GGML_VK_VISIBLE_DEVICES=0), locally against a
# server that serves only Vulkan0, over shm and tcp. The guest runs without that
# variable, so that its own ggml offers no Vulkan0 beside REMOTE0.
vulkan=0
run_vulkan() {  # run_vulkan VARIANT TOOL ARGS...: the tool on Vulkan0, here or through the Vulkan server
    local variant=$1; shift
    case $variant in
        local) GGML_VK_VISIBLE_DEVICES=0 "$@" -ngl 99 ;;
        shm) env -u GGML_VK_VISIBLE_DEVICES "${plugin[@]}" GGML_REMOTE_SERVERS="shm:$work/vulkan.sock" "$@" -ngl 99 ;;
        tcp) env -u GGML_VK_VISIBLE_DEVICES "${plugin[@]}" GGML_REMOTE_SERVERS="tcp://127.0.0.1:$vulkan_port" "$@" -ngl 99 ;;
    esac
}
if [ "${BENCH_VULKAN:-1}" = 1 ]; then
    if GGML_VK_VISIBLE_DEVICES=0 "$build/bin/ggml-remote-server" --list-devices 2>/dev/null | grep -q 'Vulkan0'; then
        vulkan=1
        vulkan_port=$(free_port)
        # With a shader cache, as the packaged unit runs: a session compiles its
        # pipelines once, not in every round.
        GGML_VK_VISIBLE_DEVICES=0 "$build/bin/ggml-remote-server" -d Vulkan0 --listen "unix:$work/vulkan.sock" \
            --listen "tcp://127.0.0.1:$vulkan_port" --threads "$threads" --shader-cache "$work/shader-cache" \
            >"$work/vulkan.log" 2>&1 &
        pids+=($!)
        wait_for test -S "$work/vulkan.sock"
        wait_for tcp_open "$vulkan_port"
        for name in ${BENCH_VULKAN_MODELS:-tiny small}; do
            llama_rounds "$name" vulkan run_vulkan local shm tcp
        done
    else
        echo "bench: no Vulkan device (GGML_VK_VISIBLE_DEVICES=0 ggml-remote-server --list-devices): Vulkan skipped" >&2
    fi
fi

# Transport microbenchmarks: the round trip of an empty command and 16 MiB writes
# and reads (over shm: the shared-memory copy against a local memcpy).
if [ "${BENCH_RTT:-1}" = 1 ]; then
    for transport in shm shm-socket unix tcp; do
        echo "bench: round trips through $transport" >&2
        case $transport in
            shm) endpoint=shm:$work/remote.sock ring=1 ;;
            shm-socket) endpoint=shm:$work/remote.sock ring=0 ;;
            unix) endpoint=unix:$work/remote.sock ring=1 ;;
            tcp) endpoint=tcp://127.0.0.1:$port ring=1 ;;
        esac
        GGML_REMOTE_SHARED_RING=$ring "$build/bin/ggml-remote-rtt" "$endpoint" 20000 2>&1 |
            python3 "$here/bench_report.py" record-rtt "$transport" >>"$raw" || echo "bench: rtt failed for $transport" >&2
    done
    # To a buffer of the Vulkan server's device, beside ggml's own set/get on a local
    # Vulkan0 buffer in the same process.
    if [ "$vulkan" = 1 ]; then
        for transport in shm tcp; do
            echo "bench: 16 MiB to Vulkan0 through $transport" >&2
            case $transport in
                shm) endpoint=shm:$work/vulkan.sock ;;
                tcp) endpoint=tcp://127.0.0.1:$vulkan_port ;;
            esac
            GGML_VK_VISIBLE_DEVICES=0 "$build/bin/ggml-remote-rtt" "$endpoint" 0 --device 0 --local Vulkan0 2>&1 |
                python3 "$here/bench_report.py" record-rtt "vulkan-$transport" >>"$raw" ||
                echo "bench: rtt failed for vulkan-$transport" >&2
        done
    fi
fi

# Per generated token: the difference between a 32- and a 64-token generation.
if [ "${BENCH_ACCOUNTING:-1}" = 1 ]; then
    for name in $models; do
        model=$build/models/$name-f16.gguf
        for transport in shm unix tcp; do
            case $transport in
                shm) endpoint=shm:$work/remote.sock ;;
                unix) endpoint=unix:$work/remote.sock ;;
                tcp) endpoint=tcp://127.0.0.1:$port ;;
            esac
            for n in 32 64; do
                GGML_REMOTE_STATS=1 "${plugin[@]}" GGML_REMOTE_SERVERS="$endpoint" \
                    llama-simple -m "$model" -n "$n" -ngl 99 "Hello world" 2>&1 >/dev/null |
                    grep 'ggml-remote: .* commands' >"$work/stats-$n" || true
            done
            python3 "$here/bench_report.py" record-accounting "$name" "$transport" "$work/stats-32" "$work/stats-64" \
                >>"$raw" || echo "bench: no accounting for $name $transport" >&2
        done
    done
fi

# Many guests at once (issue 15): loads with a weight store, the server's memory
# under four guests, and concurrent generation; its own servers and knobs.
if [ "${BENCH_MANY:-1}" = 1 ]; then
    "$here/bench_many.sh" "$build" "$raw" || echo "bench: the many-guests section failed; the report has the rest" >&2
fi

python3 "$here/bench_report.py" report "$out/results.json" <"$raw"

# Tensor parallelism (issue 28): -sm layer against -sm tensor over two servers, ours
# against ggml-rpc's, and the pinned setup; its own servers, knobs and tables.
if [ "${BENCH_TENSOR:-1}" = 1 ]; then
    "$here/bench_tensor.sh" "$build" || echo "bench: the tensor-parallel section failed" >&2
fi
