# errors_silent_server: issue 40, class 6. A long llama.cpp generation through the
# remote device whose worker is stopped mid-way (SIGSTOP: alive to the kernel,
# its socket open, silent). The server keeps its sessions alive while it computes
# (kSessionKeepAlive), so the guest gives up after its silence limit (15 s by
# default) and says so once: it does not wait out the reply timeout (10
# minutes), which is what it did before keep-alives. The test gives it
# WATCHDOG_S; a guest still waiting then fails the test.
# usage: errors_silent_server.sh unix|tcp|shm
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/llama_helpers.sh"

transport=${1:?usage: errors_silent_server.sh unix|tcp|shm}
SILENCE_MS=15000 # GGML_REMOTE_SILENCE_TIMEOUT_MS's default
WATCHDOG_S=60    # the silence limit and a busy machine's margin; far below 600 s
GUEST_TIMEOUT=300
# The lost session stays lost: its devices fail, and llama-simple ends.
export GGML_REMOTE_RECONNECT=0

small=$(model small)
start_server srv
case $transport in
    unix) endpoint=$srv_UNIX ;;
    tcp) endpoint=$srv_TCP ;;
    shm) endpoint=shm:${srv_UNIX#unix:} ;;
    *) fail "unknown transport '$transport'" ;;
esac

# A stopped worker never ends, nor lets the server end: it goes on first.
worker=""
continue_worker_then_cleanup() {
    [ -z "$worker" ] || kill -CONT "$worker" 2>/dev/null || true
    stop_guests_then_cleanup
}
trap continue_worker_then_cleanup EXIT

session=$(($(sessions_connected "$srv_LOG") + 1))
start_guest victim "$endpoint" "$small" 4000
victim=$GUEST_PID
connected=$(wait_for_line "$srv_LOG" "session $session \\(.*\\): connected, worker pid [0-9]+" 30) ||
    { cat "$srv_LOG" >&2; fail "the guest never connected"; }
worker=$(sed -n 's/.*worker pid \([0-9]*\).*/\1/p' <<<"$connected")
[ -n "$worker" ] || fail "no worker pid in: $connected"
wait_generating victim "$victim"
assert_offloaded victim

note "stopping worker $worker of session $session (SIGSTOP)"
kill -STOP "$worker"
stopped_at=$(now_ms)
if ! wait_pid_exit "$victim" "$WATCHDOG_S"; then
    tail -n 5 "$WORK/victim.err" >&2
    fail "the guest still waited on its stopped server after $WATCHDOG_S s (a silent server holds it)"
fi
took=$(($(now_ms) - stopped_at))
rc=0
wait "$victim" || rc=$?
note "the guest exited with code $rc, $took ms after the stop"
[ "$rc" != 124 ] || fail "the guest had to be stopped by timeout"

lost=$(grep "^ggml-remote: lost the connection to ggml-remote-server at $endpoint" "$WORK/victim.err" || true)
[ "$(grep -c . <<<"$lost")" = 1 ] || {
    grep 'ggml-remote' "$WORK/victim.err" >&2
    fail "expected the plugin to report the lost connection once"
}
[[ $lost == *"silent for $SILENCE_MS ms"* ]] || fail "the lost connection does not name the silence: $lost"
note "victim: $lost"

kill -CONT "$worker"
kill -0 "$srv_PID" 2>/dev/null || fail "the server died"
echo PASS
