# llama_tokens_{unix,tcp}: llama.cpp generates the same 32 greedy tokens through a
# remote device as it does on the local CPU, over the given transport, and the
# work really happened on the server: every layer was assigned to REMOTE0, and the
# server's log shows that session ran graph computes.
# usage: llama_tokens.sh unix|tcp
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/llama_helpers.sh"

transport=${1:?usage: llama_tokens.sh unix|tcp}
case $transport in unix | tcp) ;; *) fail "unknown transport '$transport'" ;; esac

start_server srv
if [ "$transport" = unix ]; then endpoint=$srv_UNIX; else endpoint=$srv_TCP; fi
N=32

for spec in "tiny f16" "tiny q8_0" "small f16"; do
    read -r preset type <<<"$spec"
    path=$(model "$preset" "$type")
    name=$preset-$type
    run_local "$name-local" "$path" "$N"

    session=$(($(sessions_connected "$srv_LOG") + 1))
    run_guest_ok "$name-remote" "$endpoint" "$path" "$N"
    assert_offloaded "$name-remote"
    assert_same_tokens "$name-local" "$name-remote"
    [ -z "$(plugin_lines "$name-remote")" ] ||
        fail "$name-remote: the plugin reported trouble: $(plugin_lines "$name-remote")"
    # One graph compute per decoded batch at least: the prompt and every new token.
    assert_session_computed "$srv_LOG" "$session" $((N - 1))
    grep -q "session $session ($transport" "$srv_LOG" ||
        fail "session $session did not come over $transport: $(grep "session $session " "$srv_LOG")"
    note "$name over $transport: same $N tokens as the CPU: $(head -c 80 "$WORK/$name-remote.out")..."
done
echo PASS
