# whisper_cli_vulkan: whisper-cli through a server that serves only the host's
# Vulkan0 (over shm, where a GPU buffer's data is staged through the shared ring)
# transcribes exactly as whisper-cli does on the local Vulkan0: same backend, same
# transcript. And the work really happened there: the server served Vulkan0 alone,
# whisper chose REMOTE0 and put the weights on it, and that session ran at least
# one graph compute per decoder step.
# And whisper allocated the same compute buffers as locally (ggml-vulkan's graph
# order reached the guest's scheduler; whisper_vulkan_schedule checks that alone).
# One short window keeps it quick: the tiny synthetic model on the first 8 s of
# the WAV, with an audio context of 256 frames (of 1500). The full context gives
# the same transcript too (checked by hand), but takes minutes here: a sandboxed
# worker compiles its Vulkan pipelines afresh (README, "Serving a GPU").
# The first run in a build tree fills the tests' shader cache first, in a step of
# its own with a longer bound (warm_whisper_shader_cache): lavapipe needs minutes
# for three of whisper's pipelines on a busy machine.
# Skipped (exit 77) only where no Vulkan device shows up at all.
# usage: whisper_cli_vulkan.sh
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/llama_helpers.sh"
source "$(dirname "$0")/whisper_helpers.sh"
source "$(dirname "$0")/vulkan_lib.sh"

require_vulkan0
model=$(whisper_model tiny f16)
short=(-d 8000 -ac 256)
start_vulkan_server srv -d Vulkan0
# shellcheck disable=SC2154 # start_server sets srv_LOG
served=$(sed -n 's/.*ggml-remote-server: serving //p' "$srv_LOG")
[ "$served" = "Vulkan0: $VULKAN0_DESCRIPTION" ] || fail "the server should serve Vulkan0 alone, it serves: $served"

warm_whisper_shader_cache "$(endpoint_for shm srv)" "$model" "${short[@]}"

run_whisper_local_vulkan local "$model" "${short[@]}"

session=$(($(sessions_connected "$srv_LOG") + 1))
run_whisper_guest remote "$(endpoint_for shm srv)" "$model" "${short[@]}"
assert_used_remote remote
assert_same_transcript local remote
assert_same_compute_buffers local remote
decodes=$(whisper_runs remote decode)
if [ -z "$decodes" ] || [ "$decodes" -eq 0 ]; then fail "remote: no decoder steps in whisper's timings"; fi
assert_session_computed "$srv_LOG" "$session" $((decodes + 3))
assert_session_transport "$srv_LOG" "$session" shm
note "on Vulkan0 ($VULKAN0_DESCRIPTION) over shm: the same transcript as local Vulkan0" \
    "($decodes decoder steps): $(head -c 80 "$WORK/remote.txt")..."
echo PASS
