# peer_fairness: one peer cannot take every session. A peer is an address on TCP and
# a user on the unix socket; at its cap (--max-sessions-per-peer, by default a
# quarter of --max-sessions) it is refused with a reason and a log line while
# another peer is still served, and a session that ends gives its slot back. Unix
# peers that run as root or as the server's own user are not limited.
# usage: peer_fairness.sh PATH-TO-ggml-remote-handshake-client
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/llama_helpers.sh"

CLIENT=${1:?usage: peer_fairness.sh HANDSHAKE_CLIENT}
failures=()
declare -A HOLDER

# hold NAME ENDPOINT [CLIENT ARGS...] [-- RUNNER...]: a session that stays open for
# up to 120 s (the client in $WORK/NAME.txt); returns once the server has answered.
hold() {
    local name=$1 endpoint=$2 args=() runner=()
    shift 2
    while [ $# -gt 0 ] && [ "$1" != -- ]; do args+=("$1"); shift; done
    if [ $# -gt 0 ]; then shift; runner=("$@"); fi
    "${runner[@]}" timeout 130 "$CLIENT" "$endpoint" --hold 120 "${args[@]}" >"$WORK/$name.txt" 2>&1 &
    HOLDER[$name]=$!
    SERVER_PIDS+=("$!")
    wait_for_line "$WORK/$name.txt" '^(accepted|message|reply): ' 15 >/dev/null || true
}

expect_accepted() {
    grep -q '^accepted: ' "$WORK/$1.txt" || failures+=("$1: not served: $(tr '\n' ' ' <"$WORK/$1.txt")")
}

# expect_refused NAME REGEX: refused as over its cap, with a reason matching REGEX.
expect_refused() {
    local out=$WORK/$1.txt
    if grep -q '^reply: code=limit_exceeded' "$out" && grep -qE "^message: .*$2" "$out"; then
        note "$1: $(grep '^message: ' "$out")"
    else
        failures+=("$1: expected a refusal matching /$2/, got: $(tr '\n' ' ' <"$out")")
    fi
}

# end_session NAME LOG ID: the holder NAME hangs up; returns once the server has
# reaped the worker of session ID (until then it still counts).
end_session() {
    local worker
    worker=$(sed -n "s/.*session $3 (.*): connected, worker pid \([0-9]*\).*/\1/p" "$2")
    kill "${HOLDER[$1]}"
    wait_for_line "$2" "session $3 \(.*\): disconnected" 10 >/dev/null || failures+=("$1: session $3 did not end")
    wait_pid_exit "$worker" 10 || failures+=("$1: worker $worker of session $3 was not reaped")
}

# --- TCP with the default cap: --max-sessions 8 gives each address 2 sessions.
start_server tcp --max-sessions 8
hold a1 "$tcp_TCP" && expect_accepted a1
hold a2 "$tcp_TCP" && expect_accepted a2
hold a3 "$tcp_TCP" && expect_refused a3 'address 127\.0\.0\.1 holds 2 sessions.*--max-sessions-per-peer 2'
hold b1 "$tcp_TCP" --from 127.0.0.2 && expect_accepted b1
grep -qE 'refused tcp://127\.0\.0\.1:[0-9]+: address 127\.0\.0\.1 holds 2 sessions' "$tcp_LOG" ||
    failures+=("tcp: the refusal of a3 was not logged")
end_session a1 "$tcp_LOG" 1
hold a4 "$tcp_TCP" && expect_accepted a4

# --- unix sockets: users, --max-sessions-per-peer 1. The server runs as root here,
# so root's guests are exempt; two other users share the socket.
start_server unix --max-sessions 8 --max-sessions-per-peer 1
chmod 711 "$WORK"
chmod 666 "${unix_UNIX#unix:}"
as_user() { echo -- setpriv --reuid="$1" --regid="$1" --clear-groups; }
if [ "$(id -u)" = 0 ]; then
    hold n1 "$unix_UNIX" $(as_user 65534) && expect_accepted n1
    hold n2 "$unix_UNIX" $(as_user 65534) && expect_refused n2 'uid 65534 holds 1 sessions.*--max-sessions-per-peer 1'
    hold o1 "$unix_UNIX" $(as_user 4242) && expect_accepted o1
    for i in 1 2 3; do hold "root$i" "$unix_UNIX" && expect_accepted "root$i"; done
    grep -qE 'refused unix:.* uid 65534: uid 65534 holds 1 sessions' "$unix_LOG" ||
        failures+=("unix: the refusal of n2 was not logged")
else
    note "not root: the unix part (other users' guests) is left out"
fi

if grep -q 'worker died' "$tcp_LOG" "$unix_LOG"; then failures+=("a worker died"); fi
if [ "${#failures[@]}" -gt 0 ]; then
    printf 'FAIL: %s\n' "${failures[@]}" >&2
    echo "--- server logs:" >&2
    cat "$tcp_LOG" "$unix_LOG" >&2
    fail "${#failures[@]} expectation(s) not met"
fi
echo PASS
