# whisper_bench_{shm,unix}: whisper-bench's model benchmark (the encoder, 256
# single-token decoder steps, batched decoding and prompt processing) runs
# through a remote device and exits 0, and it ran there: whisper chose REMOTE0
# and put the weights there, and the server's log shows that session ran at
# least one graph compute per single-token step. The model is the synthetic
# "micro" whisper (2 layers, width 128), which keeps the fixed benchmark short.
# usage: whisper_bench.sh unix|shm|tcp
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/llama_helpers.sh"
source "$(dirname "$0")/whisper_helpers.sh"

transport=${1:?usage: whisper_bench.sh unix|shm|tcp}
model=$(whisper_model micro f16)
start_server srv
endpoint=$(endpoint_for "$transport" srv)

session=$(($(sessions_connected "$srv_LOG") + 1))
rc=0
bounded env "GGML_BACKEND_PATH=$PLUGIN" "GGML_REMOTE_SERVERS=$endpoint" whisper-bench -m "$model" -t 1 \
    >"$WORK/bench.out" 2>"$WORK/bench.err" || rc=$?
check_exit bench whisper-bench "$rc"
assert_used_remote bench
grep -q '^whisper_print_timings: *total time' "$WORK/bench.err" || fail "bench: whisper-bench printed no timings"
decodes=$(whisper_runs bench decode)
[ "$decodes" = 256 ] || fail "bench: expected 256 decoder steps in whisper's timings, got '$decodes'"
assert_session_computed "$srv_LOG" "$session" "$decodes"
assert_session_transport "$srv_LOG" "$session" "$transport"
note "whisper-bench over $transport: $(grep -E '^whisper_print_timings: *(encode|decode|total) time' "$WORK/bench.err" |
    sed 's/whisper_print_timings: *//' | tr -s ' ' | paste -sd ';')"
echo PASS
