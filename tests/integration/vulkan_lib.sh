# Helpers for the tests that serve ggml's Vulkan backend (sourced after lib.sh).
# ggml hides CPU-type Vulkan devices (lavapipe) unless GGML_VK_VISIBLE_DEVICES
# names them: the server gets the variable, a guest never does, so that a guest
# sees Vulkan only through the server.

# require_vulkan0: sets VULKAN0_DESCRIPTION to the description of the host's Vulkan0
# as a server started with GGML_VK_VISIBLE_DEVICES=0 serves it (which also shows a
# CPU-type device such as Mesa's lavapipe), or skips the test when there is none.
require_vulkan0() {
    VULKAN0_DESCRIPTION=$(GGML_VK_VISIBLE_DEVICES=0 host_device_description Vulkan0)
    [ -n "$VULKAN0_DESCRIPTION" ] || skip "no Vulkan device on this host (ggml-remote-server --list-devices" \
        "with GGML_VK_VISIBLE_DEVICES=0 lists no Vulkan0; install libggml0-backend-vulkan and a driver, e.g." \
        "mesa-vulkan-drivers)"
}

# Where the Vulkan tests' servers keep their sessions' compiled shaders (--shader-cache):
# in the build tree, so that only the first session of a test run, or of a build tree,
# compiles each pipeline.
VULKAN_SHADER_CACHE=$BUILD/vulkan-shader-cache

# start_vulkan_server NAME [SERVER ARGS...]: start_server with the Vulkan device visible
# and the tests' shader cache (a --shader-cache in ARGS comes later and wins).
start_vulkan_server() {
    local name=$1
    shift
    GGML_VK_VISIBLE_DEVICES=0 start_server "$name" --shader-cache "$VULKAN_SHADER_CACHE" "$@"
}

# run_local_vulkan NAME MODEL N [ARGS...]: the reference on the local Vulkan0
# (every layer offloaded unless ARGS says otherwise).
run_local_vulkan() {
    local name=$1 model=$2 n=$3
    shift 3
    env -u GGML_BACKEND_PATH -u GGML_REMOTE_SERVERS GGML_VK_VISIBLE_DEVICES=0 timeout "$GUEST_TIMEOUT" \
        llama-simple -m "$model" -n "$n" -ngl 99 "$@" "$PROMPT" >"$WORK/$name.out" 2>"$WORK/$name.err" ||
        { tail -n 20 "$WORK/$name.err" >&2; fail "local run $name on Vulkan0 failed"; }
    grep -q 'assigned to device Vulkan0' "$WORK/$name.err" || fail "$name: no layer ran on the local Vulkan0"
    assert_generated "$name"
}

# assert_remote_device NAME SUFFIX PATTERN: the guest's REMOTE<SUFFIX> (0: the first
# server's first device, 0.1 its second) is the server's device whose description
# matches PATTERN (llvmpipe: lavapipe's Vulkan device).
assert_remote_device() {
    grep -q "using device REMOTE$2 ($3" "$WORK/$1.err" ||
        fail "$1: REMOTE$2 is not the server's $3: $(grep -m2 'using device' "$WORK/$1.err")"
}

# warm_whisper_shader_cache SERVERS MODEL [ARGS...]: once per build tree (and model),
# one whisper-cli run through SERVERS that fills this tenant's --shader-cache, bounded
# by WHISPER_WARM_TIMEOUT rather than WHISPER_TIMEOUT. Why: lavapipe compiles three
# of ggml-vulkan's pipelines for whisper in 18-20 s each on an idle 2-core machine
# and up to 110 s each on a busy one (Mesa 26.2 with LLVM 22), so a cold cache alone
# can exceed a run's bound; the runs a test checks then find them compiled.
# (A sandboxed worker is not slower otherwise: docs/SECURITY.md, "Shader cache".)
WHISPER_WARM_TIMEOUT=${WHISPER_WARM_TIMEOUT:-600}
warm_whisper_shader_cache() {
    local servers=$1 model=$2
    shift 2
    local stamp
    stamp="$VULKAN_SHADER_CACHE/warm-whisper-$(basename "$model").stamp"
    [ -e "$stamp" ] && return 0
    local started=$SECONDS
    WHISPER_TIMEOUT=$WHISPER_WARM_TIMEOUT run_whisper_guest warm-cache "$servers" "$model" "$@"
    note "warmed the shader cache for $(basename "$model") in $((SECONDS - started)) s"
    touch "$stamp"
}
