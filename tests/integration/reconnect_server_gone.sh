# reconnect_server_gone: the server is killed (listener and worker) mid-generation
# and never comes back. The plugin tries to reconnect for at most the connect
# timeout, says so in one line, and the application gets its error within that
# time: llama-simple exits, it does not hang.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/llama_helpers.sh"

tiny=$(model tiny)
TIMEOUT_MS=1500
start_server srv --cores 1
session=$(($(sessions_connected "$srv_LOG") + 1))
GGML_REMOTE_CONNECT_TIMEOUT_MS=$TIMEOUT_MS start_guest victim "$srv_TCP" "$tiny" 4000
victim=$GUEST_PID
connected=$(wait_for_line "$srv_LOG" "session $session \\(.*\\): connected, worker pid [0-9]+" 30) ||
    { cat "$srv_LOG" >&2; fail "the victim never connected"; }
worker=$(sed -n 's/.*worker pid \([0-9]*\).*/\1/p' <<<"$connected")
wait_generating victim "$victim"

kill -9 "$srv_PID" "$worker"
killed_at=$(now_ms)
limit_s=$((TIMEOUT_MS / 1000 + 3))
wait_pid_exit "$victim" "$limit_s" || { tail -n 5 "$WORK/victim.err" >&2; fail "the victim still ran $limit_s s after the kill"; }
took=$(($(now_ms) - killed_at))
rc=0
wait "$victim" || rc=$?
[ "$rc" != 0 ] || fail "the victim exited with 0 although its server was gone"
[ "$rc" != 124 ] || fail "the victim had to be stopped by timeout"
series=$(grep -c '^ggml-remote: could not reconnect to' "$WORK/victim.err" || true)
[ "$series" -ge 1 ] || { grep '^ggml-remote' "$WORK/victim.err" >&2; fail "the plugin did not say it gave up"; }
note "plugin: $(grep -m1 '^ggml-remote: could not reconnect' "$WORK/victim.err")"
note "the victim exited with $rc, $took ms after the kill (connect timeout $TIMEOUT_MS ms)"
echo PASS
