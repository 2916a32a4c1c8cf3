# errors_guest_killed: kill -9 of a guest mid-generation frees everything it held on
# the server. Four rounds (over shm, unix, TCP, shm): a llama.cpp guest generates on
# the remote device with a 56 MiB model, is killed with SIGKILL, and then
#  - its worker exits within 5 s, having logged the end of the session (not a death
#    by signal);
#  - the server is back to its baseline within 5 s: no worker process left, and the
#    resident memory of the listener and all its processes within 2 MiB of what it
#    was before the first guest (while the guest ran, it was above the baseline by
#    more than half the model: the measure sees a worker's memory);
#  - across the rounds the listener does not grow (within 1 MiB of round 1).
# Afterwards a new guest gets the CPU's tokens.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/llama_helpers.sh"

EXIT_LIMIT_S=5
TOLERANCE_KB=2048
GROWTH_KB=1024

small=$(model small)
tiny=$(model tiny)
model_kb=$(($(stat -c %s "$small") / 1024))
run_local tiny-local "$tiny" 32
GUEST_TIMEOUT=300
start_server srv

# wait_no_workers SECONDS: until the listener has no worker left; 1 if it still has.
wait_no_workers() {
    local deadline=$(($(now_ms) + $1 * 1000))
    while [ -n "$(workers)" ]; do
        [ "$(now_ms)" -lt "$deadline" ] || return 1
        sleep 0.05
    done
}

# One complete session first, so that the baseline is that of a server that has
# already served (its log lines written, its allocator warmed up).
run_guest_ok warm-up "$srv_UNIX" "$tiny" 8
assert_session_computed "$srv_LOG" 1 7
wait_no_workers 5 || fail "the warm-up session's worker did not exit"
baseline_kb=$(total_kb)
note "baseline: no worker, listener $baseline_kb KiB resident"

round_kb=()
round=0
for endpoint in "$srv_TCP" "$srv_UNIX" "shm:${srv_UNIX#unix:}" "$srv_UNIX"; do
    round=$((round + 1))
    name=victim-$round
    session=$(($(sessions_connected "$srv_LOG") + 1))
    start_guest "$name" "$endpoint" "$small" 4000
    line=$(wait_for_line "$srv_LOG" "session $session \\(.*\\): connected, worker pid [0-9]+" 30) ||
        { cat "$srv_LOG" >&2; fail "$name never connected"; }
    worker=$(sed -n 's/.*worker pid \([0-9]*\).*/\1/p' <<<"$line")
    wait_generating "$name" "$GUEST_PID"
    assert_offloaded "$name"
    during_kb=$(total_kb)
    [ "$during_kb" -ge $((baseline_kb + model_kb / 2)) ] ||
        fail "round $round: $during_kb KiB while the guest ran: the measure does not see the worker's model ($model_kb KiB)"

    llama=$(pgrep -P "$GUEST_PID" llama-simple) || fail "round $round: no llama-simple under $GUEST_PID"
    kill -9 "$llama"
    killed_at=$(now_ms)
    wait_pid_exit "$worker" "$EXIT_LIMIT_S" ||
        { cat "$srv_LOG" >&2; fail "round $round: worker $worker still running $EXIT_LIMIT_S s after its guest was killed"; }
    exited_ms=$(($(now_ms) - killed_at))
    line=$(session_end "$srv_LOG" "$session")
    [[ $line =~ ": disconnected after "|": closed by the server: " ]] || fail "round $round: the session ended badly: $line"
    wait_no_workers "$EXIT_LIMIT_S" || fail "round $round: workers left: $(workers)"
    after_kb=$(total_kb)
    round_kb+=("$after_kb")
    note "round $round (${endpoint%%:*}): $during_kb KiB while generating; guest killed; worker gone after $exited_ms ms; $after_kb KiB, no worker"
    [ "$after_kb" -le $((baseline_kb + TOLERANCE_KB)) ] ||
        fail "round $round: the server holds $after_kb KiB after the kill, baseline $baseline_kb KiB"
    wait "$GUEST_PID" 2>/dev/null || true
done
[ "${round_kb[-1]}" -le $((round_kb[0] + GROWTH_KB)) ] ||
    fail "the listener grew from $((round_kb[0])) KiB to ${round_kb[-1]} KiB over $round rounds"
[ "$(grep -c 'worker died\|worker exited' "$srv_LOG" || true)" = 0 ] || { cat "$srv_LOG" >&2; fail "a worker died"; }
kill -0 "$srv_PID" || fail "the server is gone"

session=$(($(sessions_connected "$srv_LOG") + 1))
run_guest_ok after "$srv_UNIX" "$tiny" 32
assert_offloaded after
assert_same_tokens tiny-local after
assert_session_computed "$srv_LOG" "$session" 31
echo PASS
