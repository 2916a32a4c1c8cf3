# errors_version_mismatch: the server refuses a handshake it cannot honour with a
# reply that says why, then closes the session, and keeps serving everyone else.
#  - a guest speaking protocol version K+1 gets version_mismatch naming both versions;
#  - a peer with a foreign magic (not a ggml-remote guest) gets bad_request;
#  - a first message that is not the handshake gets bad_request;
#  - bytes that are not a frame at all get an error reply, not a crash;
#  - a correct handshake is accepted (so the refusals above are not the client's fault);
# and afterwards llama.cpp guests over unix and TCP still get the CPU's tokens.
# usage: errors_version_mismatch.sh PATH-TO-ggml-remote-handshake-client
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/llama_helpers.sh"

CLIENT=${1:?usage: errors_version_mismatch.sh HANDSHAKE_CLIENT}
[ -x "$CLIENT" ] || fail "no handshake client at $CLIENT"

start_server srv
K=$(sed -n 's/.*protocol version \([0-9]*\).*/\1/p' <<<"$("$SERVER_BIN" --version)")
[ -n "$K" ] || fail "ggml-remote-server --version does not state its protocol version"

# handshake NAME ARGS...: one bounded client run against the server's unix socket.
handshake() {
    local name=$1 rc=0
    shift
    timeout 20 "$CLIENT" "$@" >"$WORK/$name.txt" 2>&1 || rc=$?
    [ "$rc" = 0 ] || { cat "$WORK/$name.txt" >&2; fail "$name: the server did not reply (client exit $rc)"; }
    note "$name: $(tr '\n' ' ' <"$WORK/$name.txt")"
}
expect() {  # expect NAME REGEX: a line of the client's output matches
    grep -qE -- "$2" "$WORK/$1.txt" || { cat "$WORK/$1.txt" >&2; fail "$1: expected a line matching /$2/"; }
}

handshake accepted "$srv_UNIX"
expect accepted "this build speaks $K\)"
expect accepted "^reply: code=ok "
expect accepted "^accepted: protocol_version=$K device_count=[1-9]"

handshake newer "$srv_UNIX" --protocol-version next
expect newer "protocol_version=$((K + 1)) "
expect newer "^reply: code=version_mismatch status=2 command=1 "
expect newer "^message: .*version $((K + 1))"
expect newer "^message: .*version $K([^0-9]|$)"
expect newer "^connection: closed$"

handshake newer-tcp "$srv_TCP" --protocol-version 0
expect newer-tcp "^reply: code=version_mismatch "
expect newer-tcp "^message: .*version 0[^0-9].*version $K([^0-9]|$)"
expect newer-tcp "^connection: closed$"

handshake foreign-magic "$srv_UNIX" --magic 0x50545448
expect foreign-magic "^reply: code=bad_request status=3 "
expect foreign-magic "^message: .*not a ggml-remote guest"
expect foreign-magic "^connection: closed$"

handshake no-hello "$srv_UNIX" --command 2
expect no-hello "^reply: code=bad_request "
expect no-hello "^message: .*handshake"
expect no-hello "^connection: closed$"

handshake http "$srv_TCP" --raw $'GET / HTTP/1.1\r\nHost: localhost\r\n\r\n'
expect http "^reply: code=(bad_request|limit_exceeded) "
expect http "^connection: closed$"

# The server logged each refusal against its session, and no worker crashed.
wait_for_line "$srv_LOG" "session 2 \(.*\): closed by the server: .*version $((K + 1))" 10 >/dev/null ||
    { cat "$srv_LOG" >&2; fail "the server did not log why it closed session 2"; }
wait_for_line "$srv_LOG" "session 4 \(.*\): closed by the server: .*not a ggml-remote guest" 10 >/dev/null ||
    { cat "$srv_LOG" >&2; fail "the server did not log why it closed session 4"; }
if grep -E 'worker (died|exited)' "$srv_LOG"; then fail "a worker crashed on a bad handshake"; fi
kill -0 "$srv_PID" 2>/dev/null || fail "the server exited"

# And it still serves real guests.
tiny=$(model tiny)
run_local local "$tiny" 32
for endpoint in "$srv_UNIX" "$srv_TCP"; do
    name=after-${endpoint%%:*}
    session=$(($(sessions_connected "$srv_LOG") + 1))
    run_guest_ok "$name" "$endpoint" "$tiny" 32
    assert_offloaded "$name"
    assert_same_tokens local "$name"
    assert_session_computed "$srv_LOG" "$session" 31
done
echo PASS
