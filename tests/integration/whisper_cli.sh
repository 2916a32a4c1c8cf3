# whisper_cli_{unix,shm,tcp}, whisper_cli_unix_no_flash_attn: whisper-cli
# transcribes a shipped WAV (53 s, two 30 s windows) through a remote device
# exactly as it does on the local CPU: the very same transcript. The synthetic
# model's transcript is noise that any difference in any layer, or in the thread
# count the server computes with, changes. And the work really happened on the
# server: whisper chose REMOTE0 (a GPU-type device, which whisper-cli uses
# unless -ng) and put the weights there, and the server's log shows that
# session, over the given transport, ran at least one graph compute per decoder
# step.
# usage: whisper_cli.sh unix|shm|tcp [WHISPER-CLI ARGS...]
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/llama_helpers.sh"
source "$(dirname "$0")/whisper_helpers.sh"

transport=${1:?usage: whisper_cli.sh unix|shm|tcp [WHISPER-CLI ARGS...]}
shift
model=$(whisper_model tiny f16)
start_server srv
endpoint=$(endpoint_for "$transport" srv)

run_whisper_local local "$model" "$@"

session=$(($(sessions_connected "$srv_LOG") + 1))
run_whisper_guest remote "$endpoint" "$model" "$@"
assert_used_remote remote
assert_same_transcript local remote
# Each window: the mel convolutions, the encoder and the cross-attention
# keys, then one graph per decoder step.
decodes=$(whisper_runs remote decode)
if [ -z "$decodes" ] || [ "$decodes" -eq 0 ]; then fail "remote: no decoder steps in whisper's timings"; fi
assert_session_computed "$srv_LOG" "$session" $((decodes + 3))
assert_session_transport "$srv_LOG" "$session" "$transport"
note "over $transport: the same transcript as the CPU ($decodes decoder steps): $(head -c 80 "$WORK/remote.txt")..."
echo PASS
