# attacks_contained: attacks that no check before compute can catch, because the bad
# index is tensor data only a kernel reads (a GET_ROWS row id past the end), or that
# ggml-cpu turns into a work buffer it cannot allocate. The guest's worker process is
# the last line of defence: each attack ends its own session (an error reply, or the
# worker dies), the server goes on, the signal (if any) is logged for that session only,
# and llama.cpp then generates through the same server the tokens the CPU generates.
# usage: attacks_contained.sh ATTACK_CLIENT
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/llama_helpers.sh"

CLIENT=${1:?usage: attacks_contained.sh ATTACK_CLIENT}
start_server srv

rc=0
"$CLIENT" "$srv_UNIX" --contained >"$WORK/attacks.out" 2>&1 || rc=$?
sed 's/^/   /' "$WORK/attacks.out"
[ "$rc" = 0 ] || fail "attack_client exited with $rc"
attacks=$(grep -c '^PASS' "$WORK/attacks.out")

sessions=$(sessions_connected "$srv_LOG")
[ "$sessions" = "$attacks" ] || fail "$attacks attacks but $sessions sessions in the server log"
for id in $(seq 1 "$sessions"); do note "$(session_end "$srv_LOG" "$id")"; done
kill -0 "$srv_PID" 2>/dev/null || fail "the server is gone"
died=$(grep -c 'worker died from signal' "$srv_LOG" || true)
note "$died of $attacks contained attacks ended their worker by a signal"

tiny=$(model tiny)
N=16
run_local local "$tiny" "$N"
run_guest_ok remote "$srv_UNIX" "$tiny" "$N"
assert_offloaded remote
assert_same_tokens local remote
[ "$(grep -c 'worker died from signal' "$srv_LOG" || true)" = "$died" ] || fail "a worker died serving llama.cpp"
note "llama.cpp after the attacks: same $N tokens as the CPU: $(head -c 80 "$WORK/remote.out")..."
echo PASS
