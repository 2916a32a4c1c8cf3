# reconnect_shm: kill -9 of a guest's worker mid-generation over shm: with the CPU
# device every buffer and mapped weight is memory the guest holds too, so the
# plugin reconnects, hands that memory back, runs the interrupted compute again,
# and llama-simple finishes with the very tokens of an uninterrupted run. Prints
# the time from the worker's death to the next generated token.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/llama_helpers.sh"

tiny=$(model tiny)
N=1500
start_server srv --cores 1
shm="shm:${srv_UNIX#unix:}"

# The reference: the same run on the same server, undisturbed (same thread count).
run_guest_ok reference "$shm" "$tiny" "$N"

session=$(($(sessions_connected "$srv_LOG") + 1))
start_guest victim "$shm" "$tiny" "$N"
victim=$GUEST_PID
connected=$(wait_for_line "$srv_LOG" "session $session \\(.*\\): connected, worker pid [0-9]+" 30) ||
    { cat "$srv_LOG" >&2; fail "the victim never connected"; }
worker=$(sed -n 's/.*worker pid \([0-9]*\).*/\1/p' <<<"$connected")
wait_generating victim "$victim"
kill -0 "$victim" 2>/dev/null || fail "the victim ended before the kill"

note "killing worker $worker of session $session"
kill -9 "$worker"
killed_at=$(now_ms)
# Resumed: the first token after the plugin said it reconnected (tokens computed
# before the death may still come out after the kill).
resumed_at=""
until grep -q '^ggml-remote: reconnected to' "$WORK/victim.err"; do
    kill -0 "$victim" 2>/dev/null || { tail -n 20 "$WORK/victim.err" >&2; fail "the victim ended without reconnecting"; }
    [ $(($(now_ms) - killed_at)) -lt 30000 ] || fail "no reconnection within 30 s of the kill"
    sleep 0.002
done
printed=$(wc -c <"$WORK/victim.out")
while kill -0 "$victim" 2>/dev/null; do
    if [ "$(wc -c <"$WORK/victim.out")" -gt "$printed" ]; then resumed_at=$(now_ms); break; fi
    sleep 0.002
done
rc=0
wait "$victim" || rc=$?
[ "$rc" = 0 ] || { tail -n 8 "$WORK/victim.err" "$srv_LOG" >&2; fail "the victim exited with $rc"; }
[ -n "$resumed_at" ] || fail "no token came after the reconnection (the run had ended before it?)"
assert_same_tokens reference victim

line=$(grep '^ggml-remote: reconnected to' "$WORK/victim.err") ||
    { grep '^ggml-remote' "$WORK/victim.err" >&2; fail "the plugin did not say it reconnected"; }
[[ $line == *"nothing lost"* ]] || fail "over shm nothing should be lost: $line"
note "plugin: $line"
note "from the worker's death to the next token: $((resumed_at - killed_at)) ms"
echo PASS
