#!/usr/bin/env bash
# Token generation of several llama-bench guests at once (issue 15, "many guests"):
# 1 and N guests over shm through one server, with core scheduling on and off, and
# 1 and N local processes for comparison. Prints one line per round and variant:
# the aggregate t/s and each guest's.
#   usage: scripts/bench-many-guests.sh [BUILD]   (inside the sysroot: scripts/in-sysroot)
#   MANY_GUESTS=4  MANY_ROUNDS=3  MANY_TG=64  MANY_REPS=3  MANY_THREADS=2  MANY_MODEL=small
#   MANY_VARIANTS="local-1 local-N shm-1 shm-N shm-N-off"
#   also: shm-1-off (one guest, scheduling off), shm-mix and shm-mix-off (one guest
#   processes prompts of MANY_PP tokens, large graphs, while N-1 generate: does it
#   starve them?)
# Every variant of a round starts afresh (new guests, a new server), in an order
# rotated from round to round. On a shared machine the figures are noisy: say so.
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
guests=${MANY_GUESTS:-4}
rounds=${MANY_ROUNDS:-3}
tg=${MANY_TG:-64}
reps=${MANY_REPS:-3}  # llama-bench -r: each guest's figure is the mean of its runs
pp=${MANY_PP:-512}
threads=${MANY_THREADS:-2}
preset=${MANY_MODEL:-small}
variants=(${MANY_VARIANTS:-local-1 local-N shm-1 shm-N shm-N-off})
model=$build/models/$preset-f16.gguf
work=$(mktemp -d /tmp/ggml-remote-many.XXXXXX)
server_pid=""
cleanup() {
    [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT

mkdir -p "$build/models"
[ -s "$model" ] || "$build/bin/ggml-remote-synthetic-model" --preset "$preset" --type f16 -o "$model" >/dev/null

start_server() {  # start_server [ARGS...]
    rm -f "$work/r.sock"
    "$build/bin/ggml-remote-server" --listen "unix:$work/r.sock" --threads "$threads" "$@" >"$work/server.log" 2>&1 &
    server_pid=$!
    for _ in $(seq 100); do [ -S "$work/r.sock" ] && return 0; sleep 0.1; done
    echo "bench: the server did not start" >&2
    cat "$work/server.log" >&2
    exit 1
}

stop_server() {
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    server_pid=""
}

# run_guests COUNT REMOTE(0|1) MIX(0|1): COUNT llama-bench processes at once (with
# MIX, the first processes prompts, with more runs, so that it outlasts the others);
# prints each t/s.
run_guests() {
    local count=$1 remote=$2 mix=$3 i pids=() work_args
    for i in $(seq "$count"); do
        work_args=(-p 0 -n "$tg" -r "$reps")
        [ "$mix" = 1 ] && [ "$i" = 1 ] && work_args=(-p "$pp" -n 0 -r $((reps * 4)))
        if [ "$remote" = 1 ]; then
            GGML_BACKEND_PATH=$build/lib/libggml-remote.so GGML_REMOTE_SERVERS=shm:$work/r.sock \
                llama-bench -m "$model" "${work_args[@]}" -t "$threads" -ngl 99 -o json >"$work/g$i.json" 2>"$work/g$i.err" &
        else
            env -u GGML_BACKEND_PATH llama-bench -m "$model" "${work_args[@]}" -t "$threads" -o json \
                >"$work/g$i.json" 2>"$work/g$i.err" &
        fi
        pids+=($!)
    done
    for i in "${!pids[@]}"; do
        wait "${pids[$i]}" || { tail -n 5 "$work/g$((i + 1)).err" >&2; echo "bench: guest $((i + 1)) failed" >&2; }
    done
    for i in $(seq "$count"); do
        python3 -c 'import json,sys; print("%.1f" % json.load(open(sys.argv[1]))[0]["avg_ts"])' "$work/g$i.json" \
            2>/dev/null || echo 0
    done
}

run_variant() {  # run_variant NAME: prints "NAME aggregate per-guest..."
    local name=$1 count remote=1 mix=0 args=()
    case $name in
        local-1) count=1 remote=0 ;;
        local-N) count=$guests remote=0 ;;
        shm-1) count=1 ;;
        shm-1-off) count=1 args=(--no-core-scheduling) ;;
        shm-N) count=$guests ;;
        shm-N-off) count=$guests args=(--no-core-scheduling) ;;
        shm-mix) count=$guests mix=1 ;;
        shm-mix-off) count=$guests mix=1 args=(--no-core-scheduling) ;;
        *) echo "bench: unknown variant $name" >&2; exit 2 ;;
    esac
    [ "$remote" = 1 ] && start_server "${args[@]}"
    local figures
    figures=$(run_guests "$count" "$remote" "$mix" | tr '\n' ' ')
    [ "$remote" = 1 ] && stop_server
    awk -v name="$name" -v figures="$figures" -v mix="$mix" 'BEGIN {
        n = split(figures, f, " "); total = 0
        for (i = 1 + mix; i <= n; i++) total += f[i]
        if (mix) printf "%-11s pp guest %7.1f t/s; generating: %7.1f t/s, per guest:", name, f[1], total
        else printf "%-11s aggregate %7.1f t/s   per guest:", name, total
        for (i = 1 + mix; i <= n; i++) printf " %s", f[i]
        printf "\n" }'
}

echo "# $guests guests, $preset model, tg $tg, -t $threads, $(nproc) CPUs, $rounds rounds"
for round in $(seq "$rounds"); do
    echo "# round $round"
    n=${#variants[@]}
    for k in $(seq 0 $((n - 1))); do run_variant "${variants[$(((k + round) % n))]}"; done
done
