# llama_four_guests: one server serves four llama.cpp guests at once (two over
# unix, two over TCP, two different models); each gets exactly the tokens the
# local CPU produces, and the server log shows four sessions that each computed.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/llama_helpers.sh"

tiny=$(model tiny)
small=$(model small)
N=32
run_local tiny-local "$tiny" "$N"
run_local small-local "$small" "$N"

start_server srv
# name endpoint model reference
guests=(
    "g1 $srv_UNIX $small small-local"
    "g2 $srv_TCP $small small-local"
    "g3 $srv_UNIX $tiny tiny-local"
    "g4 $srv_TCP $tiny tiny-local"
)
# All four start together; each connects when the plugin loads, so the small
# model's sessions (loading 57 MiB of weights) are certain to overlap.
pids=()
for guest in "${guests[@]}"; do
    read -r name endpoint path _ <<<"$guest"
    start_guest "$name" "$endpoint" "$path" "$N"
    pids+=("$GUEST_PID")
done
for i in "${!pids[@]}"; do
    read -r name _ <<<"${guests[$i]}"
    rc=0
    wait "${pids[$i]}" || rc=$?
    if [ "$rc" != 0 ]; then
        tail -n 20 "$WORK/$name.err" >&2
        fail "guest $name exited with $rc"
    fi
done

for guest in "${guests[@]}"; do
    read -r name endpoint _ reference <<<"$guest"
    assert_generated "$name"
    assert_offloaded "$name"
    assert_same_tokens "$reference" "$name"
    note "$name ($endpoint): same tokens as $reference"
done

[ "$(sessions_connected "$srv_LOG")" = 4 ] || { cat "$srv_LOG" >&2; fail "the server did not log four sessions"; }
for id in 1 2 3 4; do assert_session_computed "$srv_LOG" "$id" $((N - 1)); done
[ "$(grep -c 'session [0-9]* (unix:.*): connected' "$srv_LOG")" = 2 ] || fail "expected two unix sessions"
[ "$(grep -c 'session [0-9]* (tcp:.*): connected' "$srv_LOG")" = 2 ] || fail "expected two tcp sessions"

# How many sessions were live at the same time, from the order of the log lines.
live=0 most=0
while read -r line; do
    case $line in
        *": connected, worker pid "*) live=$((live + 1)) ;;
        *": disconnected after "*) live=$((live - 1)) ;;
    esac
    [ "$live" -gt "$most" ] && most=$live
done <"$srv_LOG"
note "at most $most sessions were live at once"
[ "$most" -ge 2 ] || fail "the guests never overlapped; this test did not test concurrency"
echo PASS
