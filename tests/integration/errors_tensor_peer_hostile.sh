# errors_tensor_peer_hostile: raw TCP clients play a hostile peer server against
# a running server, on the path a peer link takes (a first byte of 0xC7 hands the
# connection to the listener's peer broker, tensor_split over tcp):
#   (a) a well-formed peer hello for a group nobody here enrolled (a random token
#       id): the worker logs that it refused a peer server's connection, and the
#       connection is closed at once;
#   (b) the hello's magic and then silence: the worker gives up within its 5 s
#       wait (plus slack) and closes the connection;
#   (c) 32 bytes that start with 0xC7 but are no hello: refused and closed.
# No worker dies, and a guest then generates the CPU's tokens on that server.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/llama_helpers.sh"

GIVE_UP_LIMIT_MS=8000  # the worker's 5 s for the hello, and slack
tiny=$(model tiny)
run_local tiny-local "$tiny" 16
start_server srv
port=${srv_TCP##*:}
failures=()

# peer_client NAME HEX: connects to the server's TCP port, sends the bytes of HEX,
# sends nothing more, and reads until the server closes the connection (30 s at
# most). Prints "closed MS" (milliseconds from the send to the end of file, and
# any bytes the server sent) or "open".
peer_client() {
    python3 - "$port" "$2" <<'PY'
import socket, sys, time
port, payload = int(sys.argv[1]), bytes.fromhex(sys.argv[2])
s = socket.create_connection(("127.0.0.1", port), timeout=10)
s.sendall(payload)
sent = time.monotonic()
s.settimeout(30)
received = b""
try:
    while True:
        chunk = s.recv(4096)
        if not chunk:
            print("closed %d %d" % ((time.monotonic() - sent) * 1000, len(received)))
            break
        received += chunk
except socket.timeout:
    print("open")
except ConnectionResetError:
    print("closed %d %d" % ((time.monotonic() - sent) * 1000, len(received)))
PY
}

# expect_closed NAME RESULT LIMIT_MS: the server closed the connection within LIMIT_MS.
expect_closed() {
    local name=$1 result=$2 limit=$3 ms
    if [[ $result != closed* ]]; then
        failures+=("$name: the server kept the connection open ($result)")
        return
    fi
    ms=$(cut -d' ' -f2 <<<"$result")
    [ "$ms" -le "$limit" ] || failures+=("$name: the server closed the connection only after $ms ms")
    note "$name: closed after $ms ms"
}

# hello TOKEN_ID_HEX FROM TO: the 32-byte peer hello (little-endian ranks).
hello() { printf 'c747525045455231%s%02x000000%02x000000' "$1" "$2" "$3"; }

# (a) a hello for a group nobody here is in.
token_id=$(python3 -c 'import os; print(os.urandom(16).hex())')
result=$(peer_client unknown "$(hello "$token_id" 1 0)")
expect_closed "unknown group" "$result" 3000
wait_for_line "$srv_LOG" "refused a peer server's connection: no session here is in that group" 5 >/dev/null ||
    failures+=("unknown group: no refusal in the server's log")

# (b) the magic, then silence.
result=$(peer_client silent "c747525045455231")
expect_closed "magic then silence" "$result" "$GIVE_UP_LIMIT_MS"
ms=$(cut -d' ' -f2 <<<"$result")
[[ $result != closed* ]] || [ "$ms" -ge 4000 ] ||
    failures+=("magic then silence: closed after $ms ms, before the worker's wait for the hello")

# (c) the first byte of the magic, then no hello.
result=$(peer_client wrong "c7$(printf '58%.0s' $(seq 31))")
expect_closed "wrong magic" "$result" 3000
refusals=$(grep -c "refused: not a peer server's hello" "$srv_LOG" || true)
[ "$refusals" -ge 2 ] || failures+=("wrong magic and silence: $refusals refusals of a hello in the server's log")
if grep -q "handed to its session" "$srv_LOG"; then failures+=("a hostile connection was handed to a session"); fi

# The server goes on.
run_guest_ok after "$srv_TCP" "$tiny" 16
assert_same_tokens tiny-local after
note "a guest over TCP then generates the CPU's tokens"
finish "$srv_LOG"
