# tls_preauth: key-less TLS clients never keep out a guest that holds the key.
# A --tls-psk server with --max-sessions 1 and --max-unauthenticated 4:
#  - three clients that connect and say nothing, and one that dribbles handshake
#    bytes (one every half second), fill the unauthenticated cap; none of them takes
#    the one session place;
#  - a guest with the key then gets the session at once (within 3 s, handshake and
#    hello included); the listener ends the oldest unauthenticated connection to make
#    room for its handshake;
#  - a second guest with the key is refused after its handshake: the server is full
#    (the session cap still holds, and the refusal reaches the guest through TLS);
#  - every key-less connection is ended within the handshake limit (5 s; the
#    listener's own deadline is 8 s), dribbling or not;
#  - after all that, a fresh round of key-less clients, one more than the cap, and
#    the guest with the key still gets in at once.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/llama_helpers.sh"

CLIENT=${1:?usage: tls_preauth.sh HANDSHAKE_CLIENT}
CAP=4
AT_ONCE_MS=3000

psktool -u guest -p "$WORK/keys.psk" >/dev/null
start_server srv --tls-psk "$WORK/keys.psk" --max-sessions 1 --max-unauthenticated "$CAP"
port=${srv_TCP##*:}
failures=()

idle_client() {
    perl -MIO::Socket::INET -e '$s = IO::Socket::INET->new("127.0.0.1:" . shift) or die; sleep 30' "$port" &
    SERVER_PIDS+=($!)
}
# A TLS record header, then a ClientHello's first bytes, one every half second.
dribbling_client() {
    perl -MIO::Socket::INET -e '$s = IO::Socket::INET->new("127.0.0.1:" . shift) or die; $s->autoflush(1);
        for $b (0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03, (0) x 60) {
            print $s chr($b) or exit; select(undef, undef, undef, 0.5) }' "$port" &
    SERVER_PIDS+=($!)
}
wait_for_workers() {
    local want=$1 deadline=$(($(now_ms) + 3000))
    while [ "$(sessions_connected "$srv_LOG")" -lt "$want" ]; do
        [ "$(now_ms)" -lt "$deadline" ] || {
            failures+=("only $(sessions_connected "$srv_LOG") of $want connections got a worker")
            return
        }
        sleep 0.05
    done
}

# keyed_guest NAME [ARGS]: a guest with the key; prints how long until it was accepted (or "refused").
keyed_guest() {
    local name=$1 started
    shift
    started=$(now_ms)
    "$CLIENT" "$srv_TCP" --psk "$WORK/keys.psk" "$@" >"$WORK/$name.txt" 2>&1 || true
    if grep -q '^accepted: ' "$WORK/$name.txt"; then echo $(($(now_ms) - started)); else echo refused; fi
}

for i in 1 2 3; do idle_client; done
dribbling_client
wait_for_workers 4

# The guest with the key holds its session for 4 s while the next one tries.
"$CLIENT" "$srv_TCP" --psk "$WORK/keys.psk" --hold 4 >"$WORK/holder.txt" 2>&1 &
holder=$!
SERVER_PIDS+=("$holder")
started=$(now_ms)
wait_for_line "$WORK/holder.txt" '^(accepted|reply|message): ' 10 >/dev/null || true
took=$(($(now_ms) - started))
if grep -q '^accepted: ' "$WORK/holder.txt"; then
    note "with $CAP key-less connections open, the guest with the key was accepted after $took ms"
    [ "$took" -lt "$AT_ONCE_MS" ] || failures+=("the guest with the key waited $took ms (more than $AT_ONCE_MS)")
else
    failures+=("the guest with the key was not served: $(tr '\n' ' ' <"$WORK/holder.txt")")
fi
grep -q "ended unauthenticated to make room" "$srv_LOG" ||
    failures+=("the listener did not end an unauthenticated connection at the cap of $CAP")

second=$(keyed_guest second)
if [ "$second" = refused ]; then
    grep -q '^message: .*maximum of 1 sessions' "$WORK/second.txt" ||
        failures+=("the second guest was refused without the reason: $(tr '\n' ' ' <"$WORK/second.txt")")
    note "a second guest with the key: $(grep '^message: ' "$WORK/second.txt")"
else
    failures+=("a second guest with the key got a session past --max-sessions 1")
fi
wait "$holder" 2>/dev/null || true

# Every key-less connection ends within the limits, dribbling or not.
ended_pattern='no TLS handshake within|TLS handshake failed|ended unauthenticated|not authenticated within'
deadline=$(($(now_ms) + 12000))
while ended=$(grep -cE "$ended_pattern" "$srv_LOG" || true); [ "$ended" -lt 4 ] && [ "$(now_ms)" -lt "$deadline" ]; do
    sleep 0.2
done
[ "$ended" -ge 4 ] || failures+=("only $ended of 4 key-less connections were ended within 12 s")
note "key-less connections ended: $ended"

# Another round, one more than the cap; the guest with the key still gets in at once.
before=$(sessions_connected "$srv_LOG")
for i in $(seq $((CAP + 1))); do idle_client; done
wait_for_workers $((before + CAP + 1))
third=$(keyed_guest third)
if [ "$third" = refused ]; then
    failures+=("after a second round of key-less clients the guest with the key was refused: $(tr '\n' ' ' <"$WORK/third.txt")")
else
    note "with $((CAP + 1)) more key-less connections, the guest with the key was accepted after $third ms"
    [ "$third" -lt "$AT_ONCE_MS" ] || failures+=("the guest with the key waited $third ms the second time")
fi

finish "$srv_LOG"
