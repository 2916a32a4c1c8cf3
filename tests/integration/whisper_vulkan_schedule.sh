# whisper_vulkan_schedule: whisper's scheduler lays out its graphs through
# REMOTE-on-Vulkan0 exactly as on the local Vulkan0: the same compute buffer sizes.
# ggml-vulkan reorders every graph before ggml allocates it (graph_optimize), and
# the order decides memory reuse, fusion and so the results (at whisper's full
# audio context the transcript differed while the guest kept its own order: the
# cross-attention buffer was 3.89 MB instead of 13.11 MB). The sizes are known
# once whisper has initialised, before any compute: the input here is no audio,
# so whisper-cli stops right after that, in seconds even where each session
# compiles its Vulkan pipelines afresh (whisper_cli_vulkan transcribes).
# Skipped (exit 77) only where no Vulkan device shows up at all.
# usage: whisper_vulkan_schedule.sh
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/llama_helpers.sh"
source "$(dirname "$0")/whisper_helpers.sh"
source "$(dirname "$0")/vulkan_lib.sh"

require_vulkan0
model=$(whisper_model tiny f16)
echo "not audio" >"$WORK/not-audio.wav"
start_vulkan_server srv -d Vulkan0

# init_only NAME ENV...: whisper-cli up to its failure to read the input; its log
# goes to $WORK/NAME.err and must show whisper's compute buffers.
init_only() {
    local name=$1
    shift
    bounded env -u GGML_BACKEND_PATH -u GGML_REMOTE_SERVERS -u GGML_VK_VISIBLE_DEVICES "$@" \
        whisper-cli -m "$model" -f "$WORK/not-audio.wav" -t 1 >"$WORK/$name.out" 2>"$WORK/$name.err" &&
        fail "$name: whisper-cli transcribed a file that is no audio"
    grep -q 'failed to read audio file' "$WORK/$name.err" ||
        { tail -n 20 "$WORK/$name.err" >&2; fail "$name: whisper-cli did not get as far as reading the input"; }
}

init_only local GGML_VK_VISIBLE_DEVICES=0
grep -q 'whisper_backend_init_gpu: using Vulkan0 backend' "$WORK/local.err" || fail "local: whisper did not use Vulkan0"
init_only remote "GGML_BACKEND_PATH=$PLUGIN" "GGML_REMOTE_SERVERS=$(endpoint_for shm srv)"
assert_used_remote remote
assert_same_compute_buffers local remote
note "the same compute buffers as local Vulkan0: $(grep -o 'compute buffer (cross) *= *[0-9.]* MB' "$WORK/remote.err")"
echo PASS
