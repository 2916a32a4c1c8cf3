# errors_server_full: a server at its --max-sessions turns new guests away with a
# reason, and the guest passes that reason on: over unix and over TCP the
# application runs on the CPU (same tokens), and the plugin's one line names the
# endpoint and says the server is full. Once a slot frees up, guests are served.
# usage: errors_server_full.sh PATH-TO-ggml-remote-handshake-client
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/llama_helpers.sh"

CLIENT=${1:?usage: errors_server_full.sh HANDSHAKE_CLIENT}
tiny=$(model tiny)
N=32
run_local local "$tiny" "$N"

start_server srv --max-sessions 1
# Fill the only slot with a session that does nothing for a while.
timeout 120 "$CLIENT" "$srv_TCP" --hold 100 >"$WORK/holder.txt" 2>&1 &
holder=$!
SERVER_PIDS+=("$holder")
wait_for_line "$WORK/holder.txt" '^accepted: ' 20 >/dev/null ||
    { cat "$WORK/holder.txt" "$srv_LOG" >&2; fail "the holding session was not accepted"; }

failures=()
for endpoint in "$srv_UNIX" "$srv_TCP"; do
    for attempt in 1 2 3; do
        name=full-${endpoint%%:*}-$attempt rc=0
        run_guest "$name" "$endpoint" "$tiny" "$N" || rc=$?
        [ "$rc" = 0 ] || fail "$name: llama-simple exited with $rc"
        assert_not_offloaded "$name"
        assert_same_tokens local "$name"
        lines=$(plugin_lines "$name")
        count=$(grep -c '^' <<<"$lines" || true)
        if [ "$count" != 1 ] || ! grep -q "$endpoint.*maximum of 1 sessions" <<<"$lines"; then
            failures+=("$name: expected one line naming $endpoint and the server's reason (maximum of 1 sessions), got: $lines")
        else
            note "$name: $lines"
        fi
    done
done
refused=$(grep -c 'refused .*(--max-sessions)' "$srv_LOG" || true)
[ "$refused" = 6 ] || { cat "$srv_LOG" >&2; fail "the server logged $refused refusals, expected 6"; }

# Free the slot; the next guest is served. (The slot is free once the server has
# reaped the worker: until then its pid still answers kill -0, as a zombie.)
holder_worker=$(sed -n 's/.*session 1 (.*): connected, worker pid \([0-9]*\).*/\1/p' "$srv_LOG")
[ -n "$holder_worker" ] || fail "no worker pid for the holding session"
kill "$holder"
wait_for_line "$srv_LOG" 'session 1 \(.*\): disconnected' 10 >/dev/null || fail "the holder's session did not end"
wait_pid_exit "$holder_worker" 10 || fail "the server did not reap the holder's worker"
session=$(($(sessions_connected "$srv_LOG") + 1))
run_guest_ok served "$srv_UNIX" "$tiny" "$N"
assert_offloaded served
assert_same_tokens local served
assert_session_computed "$srv_LOG" "$session" $((N - 1))

if [ "${#failures[@]}" -gt 0 ]; then
    printf 'FAIL: %s\n' "${failures[@]}" >&2
    fail "${#failures[@]} refused guest(s) were not told why"
fi
echo PASS
