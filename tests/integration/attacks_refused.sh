# attacks_{unix,tcp}: a hostile guest (attack_client.cpp) against a real server over the
# given transport. Every attack class (byte ranges outside buffers and sizes that
# overflow, broken tensor lists, unknown and freed handles, refused ops, nodes that
# break their op's rules, lying frames, commands out of turn) gets an error reply with
# the expected code or a clean end of its session; no worker dies from a signal; and
# afterwards the same server serves llama.cpp the very tokens the local CPU generates.
# usage: attacks_refused.sh unix|tcp ATTACK_CLIENT
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/llama_helpers.sh"

transport=${1:?usage: attacks_refused.sh unix|tcp ATTACK_CLIENT}
CLIENT=${2:?usage: attacks_refused.sh unix|tcp ATTACK_CLIENT}
case $transport in unix | tcp) ;; *) fail "unknown transport '$transport'" ;; esac

start_server srv
if [ "$transport" = unix ]; then endpoint=$srv_UNIX; else endpoint=$srv_TCP; fi

rc=0
"$CLIENT" "$endpoint" >"$WORK/attacks.out" 2>&1 || rc=$?
sed 's/^/   /' "$WORK/attacks.out"
[ "$rc" = 0 ] || fail "attack_client exited with $rc: $(grep -c '^FAIL' "$WORK/attacks.out") attack(s) not refused as expected"
attacks=$(grep -c '^PASS' "$WORK/attacks.out")
[ "$attacks" -ge 50 ] || fail "only $attacks attacks ran"

# Every session the attacks opened has ended, and none by a signal. The listener
# logs a session as it accepts it, which on a busy machine can come just after
# the client has finished with it.
for _ in $(seq 100); do
    sessions=$(sessions_connected "$srv_LOG")
    [ "$sessions" -ge "$attacks" ] && break
    sleep 0.1
done
[ "$sessions" = "$attacks" ] || fail "$attacks attacks but $sessions sessions in the server log"
for id in $(seq 1 "$sessions"); do session_end "$srv_LOG" "$id" >/dev/null; done
if grep -E 'worker died from signal|worker exited with code' "$srv_LOG"; then
    fail "an attack crashed its worker (server log above)"
fi
kill -0 "$srv_PID" 2>/dev/null || fail "the server is gone"
note "$attacks attacks refused over $transport; no worker died"

# A well-behaved guest after all that: the same tokens as on the CPU.
tiny=$(model tiny)
N=16
run_local local "$tiny" "$N"
run_guest_ok remote "$endpoint" "$tiny" "$N"
assert_offloaded remote
assert_same_tokens local remote
if grep -E 'worker died from signal' "$srv_LOG"; then fail "a worker died serving llama.cpp"; fi
note "llama.cpp after the attacks: same $N tokens as the CPU: $(head -c 80 "$WORK/remote.out")..."
echo PASS
