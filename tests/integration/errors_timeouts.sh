# errors_timeouts: a guest cannot hold a worker by sending nothing or half a frame.
# On a server with --handshake-timeout 2 --frame-timeout 2 (and no idle limit, the
# default):
#  - a client that connects and sends nothing, and one that sends half a frame
#    header, are disconnected about 2 s after connecting;
#  - a guest that completes the handshake and then sends half a frame is
#    disconnected about 2 s later;
#  - a guest that completes the handshake and then sends nothing for 6 s is not
#    disconnected (an idle llama-server must not lose its session);
#  - meanwhile llama.cpp generates the CPU's tokens through the same server;
#  - the server logs why it ended each session.
# On a server with --idle-timeout 2, a guest that completes the handshake and then
# sends nothing is disconnected about 2 s later.
# usage: errors_timeouts.sh PATH-TO-ggml-remote-handshake-client
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/llama_helpers.sh"

CLIENT=${1:?usage: errors_timeouts.sh HANDSHAKE_CLIENT}
TIMEOUT_S=2
LATEST_MS=20000  # the timeout plus a worker's start (loading backends) on a busy machine

tiny=$(model tiny)
N=64
run_local local "$tiny" "$N"
start_server srv --handshake-timeout "$TIMEOUT_S" --frame-timeout "$TIMEOUT_S"

# stall NAME ENDPOINT CLIENT-ARGS...: runs the client in the background; its output,
# and the milliseconds it ran, end up in $WORK/NAME.txt.
STALLERS=()
stall() {
    local name=$1 endpoint=$2
    shift 2
    (
        started=$(now_ms)
        timeout 60 "$CLIENT" "$endpoint" "$@" >"$WORK/$name.txt" 2>&1 || true
        echo "ran: $(($(now_ms) - started)) ms" >>"$WORK/$name.txt"
    ) &
    STALLERS+=($!)
    SERVER_PIDS+=($!)
}
stall silent "$srv_UNIX" --raw "" --reply-timeout 30
stall half-header "$srv_TCP" --raw "GRMT..." --reply-timeout 30
stall half-frame "$srv_UNIX" --then half-frame
stall idle "$srv_TCP" --hold 6

# The server keeps serving a good guest while the stallers wait.
run_guest_ok good "$srv_UNIX" "$tiny" "$N"
assert_offloaded good
assert_same_tokens local good
note "llama.cpp, meanwhile: the CPU's $N tokens"
for pid in "${STALLERS[@]}"; do wait "$pid"; done

# ran_ms NAME: how long the client ran.
ran_ms() { sed -n 's/^ran: \([0-9]*\) ms$/\1/p' "$WORK/$1.txt"; }

# assert_cut NAME LINE-REGEX: the client saw the server hang up, within the limits.
assert_cut() {
    local name=$1 pattern=$2 ms
    grep -qE -- "$pattern" "$WORK/$name.txt" || { cat "$WORK/$name.txt" >&2; fail "$name: the server did not hang up"; }
    ms=$(ran_ms "$name")
    [ "$ms" -ge $((TIMEOUT_S * 1000 - 200)) ] || fail "$name: hung up after $ms ms, before the $TIMEOUT_S s timeout"
    [ "$ms" -le "$LATEST_MS" ] || fail "$name: hung up only after $ms ms (timeout $TIMEOUT_S s)"
    note "$name: disconnected after $ms ms"
}
assert_cut silent '^reply: none \(.*(closed by peer|reset by peer)'
assert_cut half-header '^reply: none \(.*(closed by peer|reset by peer)'
assert_cut half-frame '^then: closed by the server after '

grep -q '^accepted: ' "$WORK/idle.txt" || { cat "$WORK/idle.txt" >&2; fail "idle: not accepted"; }
ms=$(ran_ms idle)
[ "$ms" -ge 5800 ] || fail "idle: the session ended after $ms ms, before the guest left"
note "idle: still served after $ms ms of silence (no --idle-timeout)"

# The server says why it ended each stalled session, and nothing else went wrong.
count() { grep -cE -- "$1" "$srv_LOG" || true; }
[ "$(count "closed by the server: no handshake within $TIMEOUT_S s of connecting \(--handshake-timeout\)")" = 2 ] ||
    { cat "$srv_LOG" >&2; fail "expected two sessions ended for their handshake"; }
[ "$(count "closed by the server: a frame of 4096 bytes was not complete within $TIMEOUT_S s \(--frame-timeout\)")" = 1 ] ||
    { cat "$srv_LOG" >&2; fail "expected one session ended for its half frame"; }
[ "$(count ': disconnected after ([6-9]|[1-9][0-9])\.[0-9] s')" -ge 1 ] || { cat "$srv_LOG" >&2; fail "the idle session was not ended by its guest"; }
[ "$(count 'worker died|worker exited')" = 0 ] || { cat "$srv_LOG" >&2; fail "a worker died"; }
grep -E 'closed by the server' "$srv_LOG" | sed 's/^/   /'

# With --idle-timeout, a session that sends nothing between frames ends too.
start_server idler --idle-timeout "$TIMEOUT_S"
stall idle-cut "$idler_UNIX" --then idle
wait "${STALLERS[-1]}"
assert_cut idle-cut '^then: closed by the server after '
[ "$(grep -cE "closed by the server: idle for $TIMEOUT_S s \(--idle-timeout\)" "$idler_LOG" || true)" = 1 ] ||
    { cat "$idler_LOG" >&2; fail "the idle session's end was not logged as idle"; }
echo PASS
