# Shared helpers for integration tests (sourced). Every server a test starts is
# stopped when the test exits, whatever happens.
set -euo pipefail

BUILD=${GGML_REMOTE_BUILD:?run through ctest (GGML_REMOTE_BUILD names the build tree)}
SERVER_BIN=$BUILD/bin/ggml-remote-server
PLUGIN=$BUILD/lib/libggml-remote.so
MODEL_TOOL=$BUILD/bin/ggml-remote-synthetic-model
MODELS=$BUILD/models
TEST_BACKEND_OPS=/usr/libexec/x86_64-linux-gnu/ggml/test-backend-ops
WORK=$(mktemp -d /tmp/ggml-remote-test.XXXXXX)
SERVER_PIDS=()

cleanup() {
    local pid
    for pid in "${SERVER_PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${SERVER_PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }
# skip REASON: the test cannot run on this machine (ctest shows it as skipped).
skip() { echo "SKIP: $*"; exit 77; }
note() { echo "-- $*"; }

# host_device_description NAME: the description the server gives host device NAME
# (--list-devices, in this environment), or nothing when it has no such device.
host_device_description() {
    "$SERVER_BIN" --list-devices 2>/dev/null |
        sed -n "s/^  $1: \(.*\) ([0-9]* MiB, [0-9]* MiB free)\$/\1/p" | head -n1 || true
}

# rss_kb PID: resident memory of a process (0 once it is gone).
rss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status" 2>/dev/null || echo 0; }
# workers: the session workers of the server started as srv (its child processes
# but the services process).
workers() { pgrep -P "$srv_PID" -f ggml-remote-worker || true; }
# services_of PID: the services process of the server whose listener is PID.
services_of() { pgrep -P "$1" -f ggml-remote-services || true; }
# total_kb: resident memory of the server srv's listener, its services process and
# all its workers.
total_kb() {
    local total pid
    total=$(rss_kb "$srv_PID")
    for pid in $(workers) $(services_of "$srv_PID"); do total=$((total + $(rss_kb "$pid"))); done
    echo "$total"
}

# finish LOG: ends a test that collected its problems in the array `failures`:
# PASS when there are none, else each one, LOG, and FAIL. A worker that died from a
# signal is a problem too.
finish() {
    local log=$1
    if grep -q 'worker died' "$log"; then failures+=("a worker died: $(grep 'worker died' "$log")"); fi
    if [ "${#failures[@]}" -gt 0 ]; then
        printf 'FAIL: %s\n' "${failures[@]}" >&2
        echo "--- server log:" >&2
        cat "$log" >&2
        fail "${#failures[@]} expectation(s) not met"
    fi
    echo PASS
}

# model PRESET [TYPE] -> prints the path of a synthetic model, writing it once.
model() {
    local preset=$1 type=${2:-f16}
    local path=$MODELS/$preset-$type.gguf
    mkdir -p "$MODELS"
    if [ ! -s "$path" ]; then
        case $type in
            q4_0)  # beyond the synthetic tool's types: llama.cpp quantizes the f16 model
                llama-quantize "$(model "$preset" f16)" "$path.tmp.$$" Q4_0 >/dev/null 2>&1 ||
                    { echo "llama-quantize failed for $preset" >&2; return 1; } ;;
            *) "$MODEL_TOOL" --preset "$preset" --type "$type" -o "$path.tmp.$$" >/dev/null ;;
        esac
        mv "$path.tmp.$$" "$path"
    fi
    echo "$path"
}

# start_server NAME [SERVER ARGS...]: starts a server listening on a fresh unix
# socket and a free loopback TCP port. Sets ${NAME}_UNIX, ${NAME}_TCP, ${NAME}_PID, ${NAME}_LOG.
start_server() {
    local name=$1; shift
    local sock=$WORK/$name.sock log=$WORK/$name.log
    : >"$log"  # the server's shell may not have created it before the first look
    "$SERVER_BIN" --listen "unix:$sock" --listen tcp://127.0.0.1:0 "$@" >"$log" 2>&1 &
    local pid=$!
    SERVER_PIDS+=("$pid")
    local port="" i
    for i in $(seq 100); do
        # (the log may not exist yet: the server's shell creates it)
        port=$(sed -n 's|.*listening on tcp://127.0.0.1:\([0-9]*\).*|\1|p' "$log" 2>/dev/null | head -n1 || true)
        [ -n "$port" ] && [ -S "$sock" ] && break
        kill -0 "$pid" 2>/dev/null || { cat "$log" >&2; fail "server $name exited at start-up"; }
        sleep 0.1
    done
    [ -n "$port" ] || { cat "$log" >&2; fail "server $name did not start listening"; }
    printf -v "${name}_UNIX" '%s' "unix:$sock"
    printf -v "${name}_TCP" '%s' "tcp://127.0.0.1:$port"
    printf -v "${name}_PID" '%s' "$pid"
    printf -v "${name}_LOG" '%s' "$log"
}

# remote ENDPOINT CMD...: runs CMD as a guest of the server at ENDPOINT.
remote() {
    local endpoint=$1; shift
    GGML_BACKEND_PATH=$PLUGIN GGML_REMOTE_SERVERS=$endpoint "$@"
}

# generate MODEL N [EXTRA ARGS]: greedy generation, deterministic, text on stdout.
generate() {
    local model=$1 n=$2; shift 2
    llama-simple -m "$model" -n "$n" "$@" "Hello world" 2>>"$WORK/generate.err"
}

# expect_server_refusal NAME REGEX... -- ARGS...: `ggml-remote-server ARGS` exits
# non-zero at once (not 124: it did not start serving), never says it listens, and
# its stderr ($WORK/NAME.err) matches every REGEX.
expect_server_refusal() {
    local name=$1 patterns=() pattern rc=0
    shift
    while [ "$1" != -- ]; do patterns+=("$1"); shift; done
    shift
    timeout 10 "$SERVER_BIN" "$@" >"$WORK/$name.out" 2>"$WORK/$name.err" || rc=$?
    [ "$rc" != 0 ] || fail "ggml-remote-server $*: exited 0"
    [ "$rc" != 124 ] || fail "ggml-remote-server $*: kept running instead of refusing"
    for pattern in "${patterns[@]}"; do
        grep -qE -- "$pattern" "$WORK/$name.err" ||
            { cat "$WORK/$name.err" >&2; fail "ggml-remote-server $*: stderr does not match /$pattern/"; }
    done
    if grep -q 'listening on' "$WORK/$name.err"; then fail "ggml-remote-server $*: started listening"; fi
    note "ggml-remote-server $* -> exit $rc: $(head -n 1 "$WORK/$name.err")"
}

# wait_for_socket PATH PID LOG WHAT: waits up to 10 s for the socket file PATH while
# PID runs; else shows LOG and fails saying that WHAT did not listen there.
wait_for_socket() {
    local i
    for i in $(seq 100); do
        [ -S "$1" ] && return 0
        kill -0 "$2" 2>/dev/null || break
        sleep 0.1
    done
    cat "$3" >&2
    fail "$4 did not listen on $1"
}
