# Helpers for the llama_* and errors_* integration tests; sourced after lib.sh.
# Every run of an application is bounded by `timeout`, every wait by a deadline.

PROMPT="Hello world"
GUEST_TIMEOUT=${GUEST_TIMEOUT:-120}  # seconds any one llama-simple may take

# now_ms: wall-clock milliseconds.
now_ms() {
    local t=${EPOCHREALTIME//[.,]/}
    echo $((t / 1000))
}

# llama.cpp's tools (llama-cli, llama-completion) log through a queue that a thread
# of theirs empties, and exit without waiting for it: on a busy machine their last
# lines never appear (ggml's own "failed to load" line, no plugin loaded: lost in 157
# of 300 `llama-cli --list-devices` runs beside four busy loops on 2 cores), and
# llama-completion's last token with them. The plugin drains that queue at exit
# once it has logged a line, so runs without it (or where it logged nothing) stay
# exposed: a test that reads such a log runs the tool again while the line it reads
# is missing; its own check still judges the last run.
# until_logged FILE REGEX COMMAND...: runs COMMAND, which writes FILE anew (its own
# redirection: one around until_logged would append), until FILE has a line
# matching REGEX (grep -E), five times at most. COMMAND's status if it fails.
until_logged() {
    local file=$1 regex=$2 attempt rc
    shift 2
    for attempt in 1 2 3 4 5; do
        rc=0
        "$@" || rc=$?
        [ "$rc" = 0 ] || return "$rc"
        grep -qE -- "$regex" "$file" && return 0
        note "$(basename "$file") lacks the line read from it (llama.cpp's log lost its end?), run $attempt of 5"
    done
}

# COMPLETION_END: the line llama-completion logs after its last token.
COMPLETION_END='common_perf_print: *eval time'

# greedy_once NAME [PREFIX...]: llama-completion's $N greedy tokens of the model at
# $path, one thread, with the flags in $llama_args, run through PREFIX (an
# environment, a namespace). Output in $WORK/NAME.out and $WORK/NAME.err.
greedy_once() {
    local name=$1
    shift
    timeout "$GUEST_TIMEOUT" "$@" llama-completion -m "$path" -n "$N" --temp 0 -s 1 -no-cnv --no-warmup -t 1 \
        -p "$PROMPT" "${llama_args[@]}" </dev/null >"$WORK/$name.out" 2>"$WORK/$name.err"
}

# greedy NAME [PREFIX...]: greedy_once, whose log reached its end, and which generated.
greedy() {
    local name=$1 rc=0
    until_logged "$WORK/$name.err" "$COMPLETION_END" greedy_once "$@" || rc=$?
    [ "$rc" = 0 ] || { tail -n 20 "$WORK/$name.err" >&2; fail "$name: llama-completion exited with $rc"; }
    assert_generated "$name"
}

# run_local NAME MODEL N: the reference: stock llama-simple without the plugin.
# Output in $WORK/NAME.out and $WORK/NAME.err.
run_local() {
    local name=$1 model=$2 n=$3 rc=0
    env -u GGML_BACKEND_PATH -u GGML_REMOTE_SERVERS timeout "$GUEST_TIMEOUT" \
        llama-simple -m "$model" -n "$n" "$PROMPT" >"$WORK/$name.out" 2>"$WORK/$name.err" || rc=$?
    if [ "$rc" != 0 ]; then
        tail -n 20 "$WORK/$name.err" >&2
        fail "local run $name: llama-simple exited with $rc"
    fi
    assert_generated "$name"
}

# run_guest NAME SERVERS MODEL N [ARGS...]: llama-simple with the plugin, offering
# every layer to the remote devices (-ngl 99). Returns llama-simple's exit code;
# output in $WORK/NAME.out and $WORK/NAME.err.
run_guest() {
    local name=$1 servers=$2 model=$3 n=$4
    shift 4
    GGML_BACKEND_PATH=$PLUGIN GGML_REMOTE_SERVERS=$servers timeout "$GUEST_TIMEOUT" \
        llama-simple -m "$model" -n "$n" -ngl 99 "$@" "$PROMPT" >"$WORK/$name.out" 2>"$WORK/$name.err"
}

# run_guest_ok NAME SERVERS MODEL N [ARGS...]: run_guest that must succeed and generate.
run_guest_ok() {
    local name=$1 rc=0
    run_guest "$@" || rc=$?
    if [ "$rc" != 0 ]; then
        tail -n 20 "$WORK/$name.err" >&2
        fail "guest run $name: llama-simple exited with $rc"
    fi
    assert_generated "$name"
}

# assert_generated NAME: the run printed the prompt and text after it.
assert_generated() {
    local out=$WORK/$1.out
    grep -q "$PROMPT" "$out" || fail "$1: the output does not contain the prompt: '$(head -c 200 "$out")'"
    local size
    size=$(wc -c <"$out")
    [ "$size" -ge $((${#PROMPT} + 16)) ] || fail "$1: nothing generated after the prompt: '$(cat "$out")'"
}

# assert_same_tokens EXPECTED ACTUAL: two runs printed the very same text.
assert_same_tokens() {
    if ! cmp -s "$WORK/$1.out" "$WORK/$2.out"; then
        echo "--- $1:" >&2
        cat "$WORK/$1.out" >&2
        echo "--- $2:" >&2
        cat "$WORK/$2.out" >&2
        fail "$2 generated different tokens than $1"
    fi
}

# assert_offloaded NAME: llama.cpp put the model's layers on REMOTE0 and none on the CPU.
assert_offloaded() {
    local err=$WORK/$1.err
    grep -q 'assigned to device REMOTE0' "$err" ||
        { grep -E 'ggml-remote|assigned to device' "$err" >&2 || true; fail "$1: no layer was assigned to REMOTE0"; }
    if grep -q 'layer .* assigned to device CPU' "$err"; then
        grep 'assigned to device' "$err" >&2
        fail "$1: some layers stayed on the CPU"
    fi
}

# assert_not_offloaded NAME: no remote device was used (and none was listed).
assert_not_offloaded() {
    local err=$WORK/$1.err
    if grep -q 'REMOTE0' "$err"; then
        grep 'REMOTE0' "$err" | head -n 5 >&2
        fail "$1: a remote device appeared although no server could be used"
    fi
}

# plugin_lines NAME: the lines the plugin logged ("ggml-remote: ...").
plugin_lines() { grep '^ggml-remote: ' "$WORK/$1.err" || true; }

# assert_one_plugin_line NAME REGEX...: the plugin logged exactly one line, and it
# matches every REGEX (grep -E).
assert_one_plugin_line() {
    local name=$1 lines count pattern
    shift
    lines=$(plugin_lines "$name")
    count=$(printf '%s' "$lines" | grep -c '^' || true)
    [ "$count" = 1 ] || { printf '%s\n' "$lines" >&2; fail "$name: expected exactly one ggml-remote line, got $count"; }
    for pattern in "$@"; do
        printf '%s\n' "$lines" | grep -qE -- "$pattern" ||
            fail "$name: the ggml-remote line does not match /$pattern/: $lines"
    done
    note "$name: $lines"
}

# sessions_connected LOG: how many sessions the server has accepted so far.
sessions_connected() { grep -c ': connected, worker pid ' "$1" || true; }

# wait_for_line LOG REGEX SECONDS: waits until a line of LOG matches, prints it.
wait_for_line() {
    local log=$1 pattern=$2 seconds=$3 deadline line
    deadline=$(($(now_ms) + seconds * 1000))
    while :; do
        line=$(grep -E -- "$pattern" "$log" 2>/dev/null | head -n 1 || true)
        if [ -n "$line" ]; then
            printf '%s\n' "$line"
            return 0
        fi
        [ "$(now_ms)" -lt "$deadline" ] || return 1
        sleep 0.05
    done
}

# session_end LOG ID: the server's closing line of session ID (waits up to 10 s:
# the worker writes it after the guest has gone).
session_end() {
    wait_for_line "$1" "session $2 \(.*\): (disconnected|closed by the server|worker died|worker exited)" 10 ||
        { cat "$1" >&2; fail "the server did not log the end of session $2"; }
}

# graph_computes LINE: the graph compute total of a closing line.
graph_computes() { sed -n 's/.* \([0-9][0-9]*\) graph computes.*/\1/p' <<<"$1"; }

# assert_session_computed LOG ID MIN: session ID ended normally after at least MIN graph computes.
assert_session_computed() {
    local log=$1 id=$2 min=$3 line computes
    line=$(session_end "$log" "$id")
    [[ $line == *": disconnected after "* ]] || fail "session $id did not end normally: $line"
    computes=$(graph_computes "$line")
    [ -n "$computes" ] || fail "session $id: no graph compute total in: $line"
    [ "$computes" -ge "$min" ] || fail "session $id ran only $computes graph computes on the server (expected >= $min): $line"
    note "server: $line"
}

# assert_session_transport LOG ID TRANSPORT: the server saw session ID come over
# TRANSPORT (an shm guest connects over the unix socket).
assert_session_transport() {
    local scheme=${3/shm/unix}
    grep -q "session $2 ($scheme:" "$1" || fail "session $2 did not come over $3: $(grep "session $2 " "$1")"
}

# assert_session_tls13 LOG ID: session ID logged its TLS 1.3 identity, 'guest'.
assert_session_tls13() {
    grep -q "session $2 (.*): TLS as 'guest': (TLS1.3)" "$1" ||
        fail "session $2 did not log its TLS 1.3 identity: $(grep "session $2 " "$1")"
}

# wait_pid_exit PID SECONDS: waits until PID has exited; 1 if it is still running.
wait_pid_exit() {
    local pid=$1 deadline
    deadline=$(($(now_ms) + $2 * 1000))
    while kill -0 "$pid" 2>/dev/null; do
        [ "$(now_ms)" -lt "$deadline" ] || return 1
        sleep 0.02
    done
}

# start_guest NAME SERVERS MODEL N [ARGS...]: run_guest in the background; sets
# GUEST_PID (that of `timeout`, which passes a kill on to llama-simple). A guest
# still running when the test ends is stopped.
GUEST_PIDS=()
start_guest() {
    local name=$1 servers=$2 model=$3 n=$4
    shift 4
    GGML_BACKEND_PATH=$PLUGIN GGML_REMOTE_SERVERS=$servers timeout "$GUEST_TIMEOUT" \
        llama-simple -m "$model" -n "$n" -ngl 99 "$@" "$PROMPT" >"$WORK/$name.out" 2>"$WORK/$name.err" &
    GUEST_PID=$!
    GUEST_PIDS+=("$GUEST_PID")
}

# wait_generating NAME PID: waits until the guest started with start_guest prints
# tokens after the prompt (and fails if it ends before that).
wait_generating() {
    local deadline=$(($(now_ms) + 120000))
    while [ "$(wc -c <"$WORK/$1.out")" -lt $((${#PROMPT} + 8)) ]; do
        kill -0 "$2" 2>/dev/null || { tail -n 20 "$WORK/$1.err" >&2; fail "$1 ended before the kill"; }
        [ "$(now_ms)" -lt "$deadline" ] || fail "$1 generated nothing in 120 s"
        sleep 0.05
    done
}

stop_guests_then_cleanup() {
    local pid
    for pid in "${GUEST_PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    cleanup
}
trap stop_guests_then_cleanup EXIT

# traffic_per_token NAME SERVERS MODEL: what one more generated token costs on the
# wire, from GGML_REMOTE_STATS of a 16- and a 24-token run: prints "COMMANDS
# ROUND_TRIPS BYTES_SENT" (per token; the sent bytes include the token's inputs).
traffic_per_token() {
    local name=$1 servers=$2 model=$3 n line
    local -a counts=()
    for n in 16 24; do
        GGML_REMOTE_STATS=1 run_guest "$name-stats-$n" "$servers" "$model" "$n" ||
            fail "$name: the run with GGML_REMOTE_STATS failed: $(tail -3 "$WORK/$name-stats-$n.err")"
        line=$(grep -m1 'ggml-remote: .* commands' "$WORK/$name-stats-$n.err") ||
            fail "$name: no statistics line: $(tail -3 "$WORK/$name-stats-$n.err")"
        counts+=("$(sed -n 's/.*: \([0-9]*\) commands, \([0-9]*\) round trips, \([0-9]*\) bytes sent.*/\1 \2 \3/p' <<<"$line")")
    done
    read -r c1 r1 b1 <<<"${counts[0]}"
    read -r c2 r2 b2 <<<"${counts[1]}"
    echo "$(((c2 - c1) / 8)) $(((r2 - r1) / 8)) $(((b2 - b1) / 8))"
}

# store_files_mapped STORE WHAT PID: device:inode of the weight store's plain entries
# (WHAT=entries) or of its repacked images (WHAT=images, r-<key>) the process maps.
store_files_mapped() {
    awk -v store="$1/" -v what="$2" 'index($6, store) == 1 {
        image = $6 ~ /\/r-[0-9a-f]+$/
        if ((what == "images") == image) print $4 ":" $5 }' "/proc/$3/maps" | sort -u
}
