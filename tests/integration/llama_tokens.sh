# llama_tokens_{unix,tcp,shm,tls}: llama.cpp generates the same 32 greedy tokens
# through a remote device as it does on the local CPU, over the given transport, and
# the work really happened on the server: every layer was assigned to REMOTE0, and
# the server's log shows that session ran graph computes (the token-embedding lookup
# included, so the guest's CPU computes nothing). Over shm, the model's
# weights are not sent at all: the server maps the guest's model file. Over tls, the
# server runs with --tls-psk and the guest holds the key psktool made. A generated
# token costs one round trip (GGML_REMOTE_STATS). A Q4_0 model's weights are repacked
# on the server, as llama.cpp repacks them locally, a mixture of experts' too (the
# moe model: its expert products are MUL_MAT_ID).
# usage: llama_tokens.sh unix|tcp|shm|tls
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/llama_helpers.sh"

transport=${1:?usage: llama_tokens.sh unix|tcp|shm|tls}
case $transport in unix | tcp | shm | tls) ;; *) fail "unknown transport '$transport'" ;; esac

if [ "$transport" = tls ]; then
    psktool -u guest -p "$WORK/keys.psk" >/dev/null
    export GGML_REMOTE_TLS_PSK_FILE=$WORK/keys.psk
    start_server srv --tls-psk "$WORK/keys.psk"
else
    start_server srv
fi
case $transport in
    unix) endpoint=$srv_UNIX ;;
    tcp) endpoint=$srv_TCP ;;
    shm) endpoint=shm:${srv_UNIX#unix:} ;;
    tls) endpoint=tls://${srv_TCP#tcp://} ;;
esac
N=32

for spec in "tiny f16" "tiny q8_0" "small f16" "small q4_0" "moe f16" "moe q4_0"; do
    read -r preset type <<<"$spec"
    path=$(model "$preset" "$type")
    name=$preset-$type
    run_local "$name-local" "$path" "$N"

    session=$(($(sessions_connected "$srv_LOG") + 1))
    run_guest_ok "$name-remote" "$endpoint" "$path" "$N"
    assert_offloaded "$name-remote"
    # The token-embedding lookup too runs on the server, over the guest's mapped
    # model file: the guest's CPU has no part of the graph.
    grep -q "graph: nodes = [0-9]*, splits = 1," "$WORK/$name-remote.err" ||
        fail "$name-remote: the graph was split between the guest's CPU and the server: $(grep -m1 'splits =' "$WORK/$name-remote.err")"
    assert_same_tokens "$name-local" "$name-remote"
    [ -z "$(plugin_lines "$name-remote")" ] ||
        fail "$name-remote: the plugin reported trouble: $(plugin_lines "$name-remote")"
    # One graph compute per decoded batch at least: the prompt and every new token.
    assert_session_computed "$srv_LOG" "$session" $((N - 1))
    assert_session_transport "$srv_LOG" "$session" "$transport"
    if [ "$transport" = tls ]; then assert_session_tls13 "$srv_LOG" "$session"; fi
    if [ "$transport" = shm ]; then
        # Weights mapped, not copied: the session received far less than the model's size
        # (for models big enough that their weights would dominate the graphs).
        received_mib=$(grep "session $session (.*disconnected" "$srv_LOG" | sed -n 's/.*, \([0-9.]*\) \(MiB\|KiB\|B\) in,.*/\1 \2/p')
        model_mib=$(($(stat -c %s "$path") >> 20))
        read -r amount unit <<<"$received_mib"
        [ -n "$amount" ] || fail "$name: no byte count in the server log"
        if [ "$model_mib" -ge 16 ] && [ "$unit" = MiB ] && [ "$(printf '%.0f' "$amount")" -ge $((model_mib / 2 + 1)) ]; then
            fail "$name over shm: the server received $amount MiB for a $model_mib MiB model: weights were copied"
        fi
        # And the server mapped the model file itself rather than receiving a copy.
        GGML_REMOTE_STATS=1 remote "$endpoint" llama-simple -m "$path" -n 2 -ngl 99 "Hello world" \
            >/dev/null 2>"$WORK/$name-stats.err" || fail "$name: the run with GGML_REMOTE_STATS failed"
        mapped=$(sed -n 's/.* \([0-9]*\) file bytes mapped.*/\1/p' "$WORK/$name-stats.err")
        [ -n "$mapped" ] || fail "$name: no statistics line: $(tail -3 "$WORK/$name-stats.err")"
        [ "$mapped" -ge $(($(stat -c %s "$path") / 2)) ] ||
            fail "$name over shm: only $mapped bytes of the model were mapped by the server"
        note "$name over shm: the server mapped $mapped bytes of the model file"
    fi
    if [ "$type" = q4_0 ]; then
        # Locally llama.cpp keeps Q4_0 weights in ggml-cpu's repacked layout; through
        # the server too (the same tokens above), where the CPU has one (AVX2 and up).
        if grep -q -w avx2 /proc/cpuinfo; then
            line=$(grep "session $session (.*disconnected" "$srv_LOG")
            repacked=$(sed -n 's/.*, \([0-9]*\) weights repacked.*/\1/p' <<<"$line")
            [ -n "$repacked" ] || fail "$name over $transport: the server repacked no weights: $line"
            # The moe preset's two blocks: four attention weights (MUL_MAT) and three
            # expert tensors (MUL_MAT_ID) each.
            [ "$preset" != moe ] || [ "$repacked" -ge 14 ] ||
                fail "$name over $transport: $repacked weights repacked, not the 14 of attention and experts"
        fi
    fi
    if [ "$name" = tiny-f16 ]; then
        # A generated token is one round trip: its inputs, the graph named by its
        # slot, the wait for the result (over shm, the compute and the wait travel
        # together, and the thread count is not sent again).
        read -r commands round_trips sent <<<"$(traffic_per_token "$name" "$endpoint" "$path")"
        [ "$round_trips" = 1 ] || fail "$name over $transport: $round_trips round trips per token, not 1"
        if [ "$transport" = shm ]; then
            [ "$commands" = 2 ] || fail "$name over shm: $commands commands per token, not 2 (compute and wait)"
            [ "$sent" -le 256 ] || fail "$name over shm: $sent bytes sent per token"
        fi
        note "$name over $transport: per token $commands commands, $round_trips round trip, $sent bytes sent"
    fi
    note "$name over $transport: same $N tokens as the CPU: $(head -c 80 "$WORK/$name-remote.out")..."
done

if [ "$transport" = shm ] && grep -q -w avx2 /proc/cpuinfo; then
    # Without a mapped model file (--load-mode none, once --no-mmap) the guest reads its weights into shared
    # memory itself; they are repacked all the same, and the tokens stay the same.
    path=$(model small q4_0)
    greedy=(llama-completion -m "$path" -n "$N" --temp 0 -no-cnv -t 2 --load-mode none -v -p "$PROMPT")
    # greedy_run NAME NGL [ENV...]: the run with -ngl NGL, through env with ENV.
    greedy_run() {
        local name=$1 ngl=$2
        shift 2
        env "$@" timeout "$GUEST_TIMEOUT" "${greedy[@]}" -ngl "$ngl" >"$WORK/$name.out" 2>"$WORK/$name.err"
    }
    until_logged "$WORK/no-mmap-local.err" "$COMPLETION_END" greedy_run no-mmap-local 0 -u GGML_BACKEND_PATH \
        -u GGML_REMOTE_SERVERS || fail "local llama-completion --no-mmap failed"
    session=$(($(sessions_connected "$srv_LOG") + 1))
    until_logged "$WORK/no-mmap-remote.err" "$COMPLETION_END" greedy_run no-mmap-remote 99 \
        GGML_BACKEND_PATH="$PLUGIN" GGML_REMOTE_SERVERS="$endpoint" ||
        fail "llama-completion --no-mmap over shm failed: $(tail -3 "$WORK/no-mmap-remote.err")"
    assert_offloaded no-mmap-remote
    assert_same_tokens no-mmap-local no-mmap-remote
    line=$(session_end "$srv_LOG" "$session")
    [[ $line =~ ", "[0-9]+" weights repacked" ]] ||
        fail "small-q4_0 --no-mmap over shm: the server repacked no weights: $line"
    note "small-q4_0 --no-mmap over shm: weights in shared memory repacked, same $N tokens as the CPU"
fi
echo PASS
