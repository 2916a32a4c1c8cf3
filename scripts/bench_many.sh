#!/usr/bin/env bash
# make bench, the many-guests section (issue 15): what one server costs and gives
# when several guests share it, side by side with llama.cpp alone and ggml-rpc.
#   load  the model's load time: local; through our server over TCP without a
#         weight store; with a fresh --weight-store, first and second load; through
#         ggml-rpc-server -c with a fresh cache, first and second load; a fresh
#         server of ours whose --models holds the model, first loads of a guest
#         that never hashed the file and of one that did, with the bytes that crossed.
#   pss   the server's memory (PSS of the listener and all its workers), at its
#         peak while 1 and while 4 TCP guests generate at once (with a store: one
#         the model is in, and 4 guests on an empty one).
#   tg    tg t/s of 1, 2 and 4 llama-bench guests started together through one
#         server over shm, and of as many local llama-bench processes.
#   latency  an interactive guest (llama-server, streamed replies with a pause to
#         read each) alone and beside 3 busy guests (llama-bench prompts back to
#         back): the p50 and p99 time between two tokens, through our server over
#         shm and as local processes.
# Usage: bench_many.sh BUILD [RAW]. bench.sh passes its raw.jsonl and prints these
# tables with its own; alone, it writes BUILD/bench/many.jsonl and its own report
# (BUILD/bench/results-many.json).
#   BENCH_MANY_PARTS="load pss tg latency"  BENCH_MANY_REPS=5 (rounds of each part)
#   BENCH_MANY_LOAD_MODEL=mid  BENCH_MANY_PSS_MODEL="mid mid-q4km" (each in turn)
#   BENCH_MANY_PSS_TOKENS=16  BENCH_MANY_PSS_CTX=256 (the memory guests' llama-completion -n and -c)
#   BENCH_MANY_TG_MODEL="small small-q4km"  BENCH_MANY_GUESTS="1 2 4"  BENCH_MANY_TG=64
#   BENCH_MANY_RUNS=3 (llama-bench -r)  BENCH_THREADS=2
#   BENCH_MANY_LATENCY_MODEL="small small-q4km"  BENCH_MANY_LATENCY_REPS=3
#   BENCH_MANY_LATENCY_VARIANTS="shm local"
#   BENCH_MANY_LATENCY_REQUESTS=8  BENCH_MANY_LATENCY_TOKENS=32  BENCH_MANY_LATENCY_PAUSE=1
#   BENCH_MANY_LATENCY_SECONDS=40 (the interactive guest's replies, tokens each,
#   seconds between them, and none started after this long)
#   BENCH_MANY_TIMEOUT=600 (seconds before a guest is given up)
#   BENCH_MANY_CORE_SCHEDULING_OFF (the server options that turn core scheduling off,
#   for a 4-guest comparison row; by default --no-core-scheduling when --help lists it)
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out=$build/bench
mkdir -p "$out"
raw=${2:-}
standalone=0
if [ -z "$raw" ]; then
    standalone=1 raw=$out/many.jsonl
    : >"$raw"
fi
parts=${BENCH_MANY_PARTS:-load pss tg latency}
reps=${BENCH_MANY_REPS:-5}
load_model=${BENCH_MANY_LOAD_MODEL:-mid}
pss_models=${BENCH_MANY_PSS_MODEL:-mid mid-q4km}  # users run quantized models beside F16
pss_tokens=${BENCH_MANY_PSS_TOKENS:-16}
# A small context, as llama-simple sizes its own: the KV cache is each guest's own
# whatever the server does, and at llama-completion's default (2048 for these
# models) it added 145 MiB per mid-model guest (one run: 867 MiB for one guest
# against 722 at 256), so the figure is mostly weights and compute buffers.
pss_ctx=${BENCH_MANY_PSS_CTX:-256}
tg_models=${BENCH_MANY_TG_MODEL:-small small-q4km}
tg_guests=${BENCH_MANY_GUESTS:-1 2 4}
tg=${BENCH_MANY_TG:-64}
runs=${BENCH_MANY_RUNS:-3}
threads=${BENCH_THREADS:-2}
latency_models=${BENCH_MANY_LATENCY_MODEL:-small small-q4km}
latency_reps=${BENCH_MANY_LATENCY_REPS:-3}
read -r -a latency_variants <<<"${BENCH_MANY_LATENCY_VARIANTS:-shm local}"
latency_requests=${BENCH_MANY_LATENCY_REQUESTS:-8}
latency_tokens=${BENCH_MANY_LATENCY_TOKENS:-32}
latency_pause=${BENCH_MANY_LATENCY_PAUSE:-1}
latency_seconds=${BENCH_MANY_LATENCY_SECONDS:-40}
bounded=(timeout "${BENCH_MANY_TIMEOUT:-600}")  # a guest that hangs ends; the round goes on
server=$build/bin/ggml-remote-server
rpc_server=/usr/libexec/x86_64-linux-gnu/llama/bin/ggml-rpc-server
plugin=(env GGML_BACKEND_PATH="$build/lib/libggml-remote.so")
report=(python3 "$here/bench_report.py")

work=$(mktemp -d /tmp/ggml-remote-bench-many.XXXXXX)
pids=()  # every server, guest and sampler started here, for cleanup
cleanup() {
    # A guest's pid is the subshell that waits for the gate: its child (timeout,
    # which passes the signal on to the guest) is ended first, or the guest would
    # outlive an interrupted run.
    for pid in "${pids[@]}"; do
        pkill -TERM -P "$pid" 2>/dev/null || true
        kill "$pid" 2>/dev/null || true
    done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
# shellcheck source=bench_lib.sh
source "$here/bench_lib.sh"  # free_port, wait_for, tcp_open, ensure_model, cache_as_read, run_load

# The server's features come and go with its version: ask its --help, so that the
# same script measures the tree before a feature and the tree after it.
server_help=$("$server" --help 2>&1 || true)
weight_store=0
grep -q -- '--weight-store' <<<"$server_help" && weight_store=1
models=0
grep -q -- '--models' <<<"$server_help" && models=1
# The switch that turns core scheduling off: BENCH_MANY_CORE_SCHEDULING_OFF names
# it (options, split at spaces) where it is spelt otherwise; "" means no such row.
if [ -n "${BENCH_MANY_CORE_SCHEDULING_OFF+set}" ]; then
    core_scheduling_off=$BENCH_MANY_CORE_SCHEDULING_OFF
elif grep -q -- '--no-core-scheduling' <<<"$server_help"; then
    core_scheduling_off=--no-core-scheduling
else
    core_scheduling_off=
    if grep -qi 'core.scheduling' <<<"$server_help"; then
        echo "bench-many: the server's --help speaks of core scheduling but lists no --no-core-scheduling;" \
            "no comparison row (BENCH_MANY_CORE_SCHEDULING_OFF=OPTIONS names the switch)" >&2
    fi
fi
if [ "$weight_store" = 0 ]; then
    echo "bench-many: the server has no --weight-store: first and second loads are the store-less path" >&2
fi

# Servers. Each start sets started_pid and started_port (and started_sock for ours).
start_ours() {  # start_ours NAME OPTIONS...: our server on a unix socket and on TCP
    local name=$1; shift
    started_port=$(free_port) started_sock=$work/$name.sock
    "$server" --listen "unix:$started_sock" --listen "tcp://127.0.0.1:$started_port" \
        --threads "$threads" "$@" >"$work/$name.log" 2>&1 &
    started_pid=$!; pids+=("$started_pid")
    wait_for tcp_open "$started_port" || { tail -5 "$work/$name.log" >&2; return 1; }
}
start_rpc() {  # start_rpc NAME: ggml-rpc-server -c, its cache in a directory of its own
    local name=$1
    started_port=$(free_port)
    mkdir -p "$work/$name"
    XDG_CACHE_HOME=$work/$name "$rpc_server" -H 127.0.0.1 -p "$started_port" -t "$threads" -c \
        >"$work/$name.log" 2>&1 &
    started_pid=$!; pids+=("$started_pid")
    wait_for tcp_open "$started_port" || { tail -5 "$work/$name.log" >&2; return 1; }
}
stop() { kill "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; }
stop_tree() { pkill -TERM -P "$1" 2>/dev/null || true; stop "$1"; }  # a runner's subshell and its guest

# Runners: each runs a llama.cpp command line as one kind of guest. A guest keeps
# the digests of its model's weights (for a server's weight store) in
# GGML_REMOTE_CACHE_DIR; guest_cache puts them in a directory of this run's, so
# that a first load hashes the model as on a machine that never loaded it.
guest_cache=$work/guest-cache
guest_local() { "$@"; }
guest_tcp() {
    local port=$1; shift
    "${plugin[@]}" GGML_REMOTE_CACHE_DIR="$guest_cache" GGML_REMOTE_SERVERS="tcp://127.0.0.1:$port" \
        GGML_REMOTE_STATS=1 "$@" -ngl 99
}
# sent_bytes: what the last run_load's guest sent its servers (GGML_REMOTE_STATS's line).
sent_bytes() { awk '/^ggml-remote: .* bytes sent/ { for (i = 1; i < NF; i++) if ($(i + 1) == "bytes" && $(i + 2) ~ /^sent/) n += $i } END { print n + 0 }' "$work/load.log"; }
guest_shm() { local sock=$1; shift; "${plugin[@]}" GGML_REMOTE_SERVERS="shm:$sock" "$@" -ngl 99; }
guest_rpc() { local port=$1; shift; "$@" --rpc "127.0.0.1:$port" -ngl 99; }

# Guests that start together: each waits for a line on a fifo, and the fifo stays
# open for writing here until all have ended, so a guest that reaches its read
# late still finds its line instead of blocking on the open.
gates=0
start_gate() {
    gates=$((gates + 1)) gate=$work/gate-$gates guest_pids=()
    mkfifo "$gate"
    exec 9<>"$gate"
}
launch_guest() {  # launch_guest OUT ERR RUNNER...: RUNNER, once the gate opens
    local stdout=$1 stderr=$2 ended=$gate.ended.${#guest_pids[@]}; shift 2
    # The time each guest ends tells whether they ran side by side: one that ends
    # long before the others left them the machine for the rest of their run.
    {
        exec 9>&-
        read -r _ <"$gate"
        rc=0
        "$@" </dev/null >"$stdout" 2>"$stderr" || rc=$?
        echo "$EPOCHREALTIME" >"$ended"
        exit "$rc"
    } &
    guest_pids+=($!); pids+=($!)
}
open_gate() {
    local _pid
    gate_opened=$EPOCHREALTIME
    for _pid in "${guest_pids[@]}"; do echo go >&9; done
}
wait_guests() {  # wait_guests: sets failed_guests (how many failed) and guests_ended (seconds after the gate opened, each)
    local pid
    failed_guests=0
    for pid in "${guest_pids[@]}"; do wait "$pid" || failed_guests=$((failed_guests + 1)); done
    exec 9>&-
    guests_ended=$(python3 -c 'import sys; print(",".join(f"{float(open(p).read()) - float(sys.argv[1]):.3f}" for p in sys.argv[2:]))' \
        "$gate_opened" "$gate".ended.*)
    rm -f "$gate" "$gate".ended.*
}

rotated() {  # rotated ROUND ITEMS...: the items, starting from the ROUND-th (round 1: as given)
    local round=$1; shift
    local items=("$@") by=$(((round - 1) % $#))
    echo "${items[@]:by}" "${items[@]:0:by}"
}

# load: a fresh weight store (our server restarted with a new directory), fresh
# guest digests and a fresh ggml-rpc cache every round, so that each round has a
# first load. Every round starts with the model cached as read, as bench.sh
# measures loads.
load_part() {
    local model rep group nostore_port nostore_pid store_port store_pid rpc_port rpc_pid
    model=$(ensure_model "$load_model")
    start_ours load-nostore
    nostore_port=$started_port nostore_pid=$started_pid
    for rep in $(seq "$reps"); do
        local store_args=()
        [ "$weight_store" = 1 ] && store_args=(--weight-store "$work/store-$rep")
        guest_cache=$work/guest-cache-$rep
        start_ours "load-store-$rep" "${store_args[@]}"
        store_port=$started_port store_pid=$started_pid
        start_rpc "rpc-cache-$rep"
        rpc_port=$started_port rpc_pid=$started_pid
        cache_as_read "$model"
        # A first load and its second stay a pair, in that order; the pairs and
        # the single loads take turns at going first.
        local groups=(local tcp tcp-store rpc-cache)
        [ "$models" = 1 ] && groups+=(tcp-models)
        for group in $(rotated "$rep" "${groups[@]}"); do
            echo "bench-many: $load_model load, $group (round $rep of $reps)" >&2
            case $group in
                local) record_load local "$(run_load "$model" guest_local)" ;;
                tcp) record_load tcp "$(run_load "$model" guest_tcp "$nostore_port")" "$(sent_bytes)" ;;
                tcp-store)
                    record_load tcp-store-first "$(run_load "$model" guest_tcp "$store_port")" "$(sent_bytes)"
                    # The store keeps a model once its first guest's upload pauses (the
                    # session's worker copies it then, and its closing line, which counts
                    # the store's lookups, comes after): the second load is that of a
                    # model the store holds.
                    wait_for grep -q 'disconnected after.*weight store: ' "$work/load-store-$rep.log"
                    record_load tcp-store-second "$(run_load "$model" guest_tcp "$store_port")" "$(sent_bytes)" ;;
                rpc-cache)
                    record_load rpc-cache-first "$(run_load "$model" guest_rpc "$rpc_port")"
                    record_load rpc-cache-second "$(run_load "$model" guest_rpc "$rpc_port")" ;;
                tcp-models) models_loads "$model" "$rep" ;;
            esac
        done
        stop "$store_pid"
        stop "$rpc_pid"
        rm -rf "$work/store-$rep" "$work/rpc-cache-$rep" "$guest_cache"  # the mid model's copies: 620 MiB each
    done
    stop "$nostore_pid"
}
record_load() {  # record_load VARIANT SECONDS [BYTES SENT] (uses model, rep)
    "${report[@]}" record-many-load "$load_model" "$1" "$rep" "${2:-nan}" "$weight_store" "${3:-}" \
        "$(stat -L -c %s "$model")" >>"$raw"
}
# models_loads MODEL REP: first loads through a fresh server whose --models holds
# the model (a link to it), each on a server of its own: by a guest that never
# hashed the file (it hashes it as it uploads, and keeps the digests), then by
# that guest again (hashed before).
models_loads() {
    local model=$1 rep=$2 kind seconds directory=$work/models-$2
    mkdir -p "$directory"
    ln -sf "$model" "$directory/"
    for kind in unhashed hashed; do
        start_ours "load-models-$rep-$kind" --models "$directory"
        wait_for grep -q 'models: .* indexed in' "$work/load-models-$rep-$kind.log"
        seconds=$(guest_cache=$work/models-cache-$rep run_load "$model" guest_tcp "$started_port")
        record_load "tcp-models-$kind" "$seconds" "$(sent_bytes)"
        stop "$started_pid"
    done
    rm -rf "$directory" "$work/models-cache-$rep"
}

# pss: a fresh server (and store) for each measurement, sampled from before the
# guests start until the last one ends. With a store, the guests find it holding
# the model (one guest loaded it before; that is the steady state the target is
# about), and a third case releases 4 guests on an empty store: their first loads
# run at once, which may leave a copy each.
pss_part() {
    local model rep case_ cases=(1 4)
    model=$(ensure_model "$pss_model")
    cache_as_read "$model"
    [ "$weight_store" = 1 ] && cases+=(4:fresh-store)
    for rep in $(seq "$reps"); do
        for case_ in $(rotated "$rep" "${cases[@]}"); do
            echo "bench-many: $pss_model memory, ${case_%%:*} tcp guests ${case_#*:} (round $rep of $reps)" >&2
            measure_pss "$model" "${case_%%:*}" "$(pss_store_state "$case_")"
        done
    done
}
pss_store_state() {  # pss_store_state CASE: how the store stands when the guests start
    case $1 in
        *:fresh-store) echo fresh ;;
        *) if [ "$weight_store" = 1 ]; then echo warm; else echo none; fi ;;
    esac
}
no_workers() { ! pgrep -P "$1" >/dev/null; }  # no_workers PID: the server serves nobody
measure_pss() {  # measure_pss MODEL GUESTS STORE-STATE (uses rep)
    local model=$1 guests=$2 store_state=$3 i idle_kb sampler store_args=()
    [ "$weight_store" = 1 ] && store_args=(--weight-store "$work/pss-store")
    guest_cache=$work/pss-guest-cache
    start_ours "pss-$rep-$guests-$store_state" "${store_args[@]}"
    if [ "$store_state" = warm ]; then
        run_load "$model" guest_tcp "$started_port" >/dev/null  # fills the store
        wait_for no_workers "$started_pid"
    fi
    idle_kb=$(python3 "$here/bench_pss.py" "$started_pid" 1 | cut -d' ' -f1)
    start_gate
    for i in $(seq "$guests"); do
        launch_guest /dev/null "$work/pss-guest-$i.err" guest_tcp "$started_port" \
            "${bounded[@]}" llama-completion -m "$model" -c "$pss_ctx" -n "$pss_tokens" -p "Hello world" -no-cnv
    done
    python3 "$here/bench_pss.py" "$started_pid" >"$work/pss-samples" &
    sampler=$!; pids+=("$sampler")
    open_gate
    wait_guests
    stop "$sampler"
    stop "$started_pid"
    rm -rf "$work/pss-store" "$guest_cache"
    if [ "$failed_guests" != 0 ]; then
        echo "bench-many: $failed_guests of $guests guests failed:" >&2; tail -5 "$work/pss-guest-1.err" >&2
        return
    fi
    "${report[@]}" record-many-pss "$pss_model" ours "$guests" "$rep" "$idle_kb" "$store_state" \
        <"$work/pss-samples" >>"$raw"
}

# tg: one server for all rounds (a second one without core scheduling, when the
# server has that switch); each case starts its guests together.
tg_part() {
    local model rep case_ shm_sock nocs_sock cases=() n most=0 servers=()
    model=$(ensure_model "$tg_model")
    cache_as_read "$model"
    start_ours "tg-$tg_model"
    shm_sock=$started_sock servers+=("$started_pid")
    for n in $tg_guests; do
        cases+=("local:$n" "shm:$n")
        [ "$n" -gt "$most" ] && most=$n
    done
    if [ -n "$core_scheduling_off" ]; then
        # shellcheck disable=SC2086 # the switch may be an option and its value
        start_ours "tg-no-core-scheduling-$tg_model" $core_scheduling_off
        nocs_sock=$started_sock servers+=("$started_pid")
        cases+=("shm-no-core-scheduling:$most")
    fi
    for rep in $(seq "$reps"); do
        for case_ in $(rotated "$rep" "${cases[@]}"); do
            echo "bench-many: $tg_model tg, ${case_%:*} x ${case_#*:} (round $rep of $reps)" >&2
            case ${case_%:*} in
                local) measure_tg "${case_%:*}" "${case_#*:}" guest_local ;;
                shm) measure_tg "${case_%:*}" "${case_#*:}" guest_shm "$shm_sock" ;;
                shm-no-core-scheduling) measure_tg "${case_%:*}" "${case_#*:}" guest_shm "$nocs_sock" ;;
            esac
        done
    done
    for n in "${servers[@]}"; do stop "$n"; done  # the next model's servers start afresh
}
measure_tg() {  # measure_tg VARIANT GUESTS RUNNER... (uses model, rep)
    local variant=$1 guests=$2 i files=(); shift 2
    start_gate
    for i in $(seq "$guests"); do
        files+=("$work/tg-$i.json")
        launch_guest "$work/tg-$i.json" "$work/tg-$i.err" "$@" \
            "${bounded[@]}" llama-bench -m "$model" -p 0 -n "$tg" -r "$runs" -t "$threads" -o json
    done
    open_gate
    wait_guests
    if [ "$failed_guests" != 0 ]; then
        echo "bench-many: $failed_guests of $guests guests failed ($variant):" >&2; tail -5 "$work/tg-1.err" >&2
        return
    fi
    "${report[@]}" record-many-tg "$tg_model" "$variant" "$guests" "$rep" "$guests_ended" "${files[@]}" >>"$raw"
}

# latency: one server for all rounds; each round measures the interactive guest
# alone and then beside three busy ones, through our server and locally.
latency_part() {
    local model rep variant sock
    model=$(ensure_model "$latency_model")
    cache_as_read "$model"
    start_ours "latency-$latency_model"
    sock=$started_sock
    for rep in $(seq "$latency_reps"); do
        for variant in $(rotated "$rep" "${latency_variants[@]}"); do
            echo "bench-many: $latency_model latency, $variant (round $rep of $latency_reps)" >&2
            case $variant in
                shm) measure_latency shm guest_shm "$sock" ;;
                local) measure_latency local guest_local ;;
            esac
        done
    done
    stop "$started_pid"
}
healthy() { python3 -c 'import sys, urllib.request; urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/health")' "$1"; }
measure_latency() {  # measure_latency VARIANT RUNNER...: the interactive guest alone, then beside 3 busy ones
    local variant=$1 port interactive busy=() i case_; shift
    port=$(free_port)
    "$@" "${bounded[@]}" llama-server -m "$model" -t "$threads" -c 1024 -np 1 --port "$port" \
        >"$work/interactive.log" 2>&1 &
    interactive=$!; pids+=("$interactive")
    if ! wait_for healthy "$port" && ! wait_for healthy "$port"; then
        tail -5 "$work/interactive.log" >&2; stop "$interactive"; return
    fi
    python3 "$here/bench_stream.py" "$port" 1 8 0 "$work/latency-warm.json"
    for case_ in alone busy; do
        if [ "$case_" = busy ]; then
            for i in 1 2 3; do
                "$@" "${bounded[@]}" llama-bench -m "$model" -p 512 -n 0 -r 100000 -t "$threads" \
                    >"$work/busy-$i.log" 2>&1 &
                busy+=($!); pids+=($!)
            done
            sleep 5  # their models load, and they compute
        fi
        python3 "$here/bench_stream.py" "$port" "$latency_requests" "$latency_tokens" "$latency_pause" \
            "$work/latency-$case_.json" "$latency_seconds" || { echo "bench-many: the interactive guest failed ($variant)" >&2; break; }
    done
    for i in "${busy[@]}"; do stop_tree "$i"; done
    stop_tree "$interactive"
    [ -s "$work/latency-busy.json" ] && "${report[@]}" record-many-latency "$latency_model" "$variant" "$rep" \
        "$work/latency-alone.json" "$work/latency-busy.json" >>"$raw"
    rm -f "$work"/latency-*.json
}

for part in $parts; do
    case $part in
        load) load_part ;;
        pss) for pss_model in $pss_models; do pss_part; done ;;
        tg) for tg_model in $tg_models; do tg_part; done ;;
        latency) for latency_model in $latency_models; do latency_part; done ;;
        *) echo "bench-many: no part $part (load, pss, tg, latency)" >&2; exit 2 ;;
    esac
done
if [ "$standalone" = 1 ]; then
    "${report[@]}" report "$out/results-many.json" <"$raw"
fi
