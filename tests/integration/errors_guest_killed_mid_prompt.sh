# errors_guest_killed_mid_prompt: kill -9 of a guest in the middle of a long
# compute (a prompt of about 512 tokens on the mid model, one graph of several
# seconds on a few cores) does not leave its worker computing for nobody. The
# worker notices the hang-up during the compute, ggml-cpu's abort callback stops
# the compute, and the worker exits:
#  - the worker is gone, and the server's memory back at its baseline (within
#    2 MiB), within 2 s of the kill (the target is 1 s; the time is printed);
#  - the session ends as a disconnect, not a death by signal.
# Over unix, TCP and shm (a shm guest's hang-up shows on its unix socket).
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/llama_helpers.sh"

BACK_LIMIT_MS=2000
TOLERANCE_KB=2048
# About 512 tokens with the synthetic models' vocabulary (two per word).
PROMPT=$(for i in $(seq 32); do printf 'alpha river stone light green house music paper '; done)
GUEST_TIMEOUT=300

mid=$(model mid)
model_kb=$(($(stat -c %s "$mid") / 1024))
# Two threads: a compute shows as CPU time of a thread beside the worker's main one.
start_server srv --threads 2

# start_victim NAME SERVERS: start_guest, with llama-simple's output unbuffered, so
# that its prompt shows when it is printed, just before it is decoded.
start_victim() {
    GGML_BACKEND_PATH=$PLUGIN GGML_REMOTE_SERVERS=$2 timeout "$GUEST_TIMEOUT" \
        stdbuf -o0 llama-simple -m "$mid" -n 4 -ngl 99 "$PROMPT" >"$WORK/$1.out" 2>"$WORK/$1.err" &
    GUEST_PID=$!
    GUEST_PIDS+=("$GUEST_PID")
}
# compute_ticks WORKER: the CPU time (in ticks) used so far by the worker's threads
# other than its main one. Only a compute burns it: ggml's thread pool (the main
# thread alone receives the guest's weights, and the watchdog thread sleeps).
compute_ticks() {
    local total=0 task
    for task in /proc/"$1"/task/*; do
        [ "${task##*/}" = "$1" ] && continue
        total=$((total + $(awk '{ print $14 + $15 }' "$task/stat" 2>/dev/null || echo 0)))
    done
    echo "$total"
}
# wait_computing NAME PID WORKER: waits until the guest has printed its prompt (it
# decodes it next) and its worker's compute threads are busy: the compute runs.
wait_computing() {
    local deadline=$(($(now_ms) + 120000)) before after
    while [ "$(wc -c <"$WORK/$1.out")" -lt "${#PROMPT}" ]; do
        kill -0 "$2" 2>/dev/null || { tail -n 20 "$WORK/$1.err" >&2; fail "$1 ended before the kill"; }
        [ "$(now_ms)" -lt "$deadline" ] || fail "$1 did not reach its prompt in 120 s"
        sleep 0.02
    done
    while :; do
        before=$(compute_ticks "$3")
        sleep 0.1
        after=$(compute_ticks "$3")
        [ $((after - before)) -ge 4 ] && return 0
        [ "$(now_ms)" -lt "$deadline" ] || fail "$1: its worker never started computing"
    done
}

run_guest_ok warm-up "$srv_UNIX" "$(model tiny)" 4
for i in $(seq 100); do
    [ -z "$(workers)" ] && break
    sleep 0.05
done
baseline_kb=$(total_kb)
note "baseline: listener $baseline_kb KiB resident, no worker"

for endpoint in "$srv_UNIX" "$srv_TCP" "shm:${srv_UNIX#unix:}"; do
    name=victim-${endpoint%%:*}
    session=$(($(sessions_connected "$srv_LOG") + 1))
    start_victim "$name" "$endpoint"
    line=$(wait_for_line "$srv_LOG" "session $session \\(.*\\): connected, worker pid [0-9]+" 30) ||
        { cat "$srv_LOG" >&2; fail "$name never connected"; }
    worker=$(sed -n 's/.*worker pid \([0-9]*\).*/\1/p' <<<"$line")
    wait_computing "$name" "$GUEST_PID" "$worker"
    during_kb=$(total_kb)
    # A shm worker maps the guest's model file instead of holding a copy: only the
    # pages it touched, and its compute buffers, show.
    expected_kb=$((model_kb / 2))
    [ "${endpoint%%:*}" = shm ] && expected_kb=16384
    [ "$during_kb" -ge $((baseline_kb + expected_kb)) ] ||
        fail "$name: $during_kb KiB during the compute: the measure does not see the worker's memory"
    [ "$(wc -c <"$WORK/$name.out")" -le $((${#PROMPT} + 8)) ] || fail "$name: the prompt was decoded before the kill"

    llama=$(pgrep -P "$GUEST_PID" llama-simple) || fail "$name: no llama-simple under $GUEST_PID"
    kill -9 "$llama"
    killed_at=$(now_ms)
    exited_ms=""
    back_ms=""
    while [ -z "$back_ms" ] && [ $(($(now_ms) - killed_at)) -lt $((BACK_LIMIT_MS + 3000)) ]; do
        [ -z "$exited_ms" ] && ! kill -0 "$worker" 2>/dev/null && exited_ms=$(($(now_ms) - killed_at))
        [ -n "$exited_ms" ] && [ -z "$(workers)" ] && [ "$(total_kb)" -le $((baseline_kb + TOLERANCE_KB)) ] &&
            back_ms=$(($(now_ms) - killed_at))
        sleep 0.01
    done
    note "$name: $during_kb KiB while computing its prompt; killed; worker gone after ${exited_ms:-more than 5000} ms," \
        "server back to $(total_kb) KiB (baseline $baseline_kb) after ${back_ms:-more than 5000} ms"
    [ -n "$back_ms" ] && [ "$back_ms" -le "$BACK_LIMIT_MS" ] ||
        fail "$name: the memory was not back within $BACK_LIMIT_MS ms of the kill"
    line=$(session_end "$srv_LOG" "$session")
    [[ $line == *": disconnected after "* ]] || fail "$name: the session ended badly: $line"
    wait "$GUEST_PID" 2>/dev/null || true
done
! grep -q 'worker died\|worker exited' "$srv_LOG" || { cat "$srv_LOG" >&2; fail "a worker died"; }
kill -0 "$srv_PID" || fail "the server is gone"
echo PASS
