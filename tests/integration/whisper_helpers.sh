# Helpers for the whisper_* integration tests; sourced after lib.sh and
# llama_helpers.sh (whose server-session helpers they use). Every run of an
# application is bounded in time and in address space, so that a guest that runs
# away fails its test instead of hanging it or starving the machine.

WHISPER_MODEL_TOOL=$BUILD/bin/ggml-remote-synthetic-whisper
WHISPER_TIMEOUT=${WHISPER_TIMEOUT:-120}         # seconds any one whisper-cli or whisper-bench may take
WHISPER_MAX_VM_KIB=${WHISPER_MAX_VM_KIB:-4194304}  # 4 GiB of address space (tiny needs < 3)
# 53 s of English speech, shipped with whisper.cpp-tools: two 30 s windows.
WAV=/usr/share/sounds/debian/samples/en-Wikipedia-Ignore_All_Rules.wav

[ -s "$WAV" ] || fail "$WAV is missing (it comes with the whisper.cpp-tools package)"

# whisper_model PRESET [TYPE] -> prints the path of a synthetic whisper model, writing it once.
whisper_model() {
    local preset=$1 type=${2:-f16}
    local path=$MODELS/whisper-$preset-$type.bin
    mkdir -p "$MODELS"
    if [ ! -s "$path" ]; then
        "$WHISPER_MODEL_TOOL" --preset "$preset" --type "$type" -o "$path.tmp.$$" >/dev/null ||
            fail "could not write the synthetic whisper model $path"
        mv "$path.tmp.$$" "$path"
    fi
    echo "$path"
}

# bounded CMD...: runs CMD under `timeout` with a cap on its address space.
bounded() {
    (
        ulimit -v "$WHISPER_MAX_VM_KIB"
        exec timeout "$WHISPER_TIMEOUT" "$@"
    )
}

# whisper_cli NAME SERVERS MODEL [ARGS...]: greedy, deterministic transcription
# of $WAV with one thread; with the plugin and GGML_REMOTE_SERVERS=SERVERS, or
# without the plugin when SERVERS is empty. The transcript goes to
# $WORK/NAME.txt, the log to $WORK/NAME.err. Returns whisper-cli's exit code.
# A guest sees no local Vulkan device (whisper would take it before REMOTE0).
whisper_cli() {
    local name=$1 servers=$2 model=$3
    shift 3
    local environment=(env -u GGML_BACKEND_PATH -u GGML_REMOTE_SERVERS)
    [ -z "$servers" ] ||
        environment=(env -u GGML_VK_VISIBLE_DEVICES "GGML_BACKEND_PATH=$PLUGIN" "GGML_REMOTE_SERVERS=$servers")
    bounded "${environment[@]}" whisper-cli -m "$model" -f "$WAV" -t 1 -bs 1 -nf -nt -otxt -of "$WORK/$name" "$@" \
        >"$WORK/$name.out" 2>"$WORK/$name.err"
}

# run_whisper_local NAME MODEL [ARGS...]: the reference: stock whisper-cli
# without the plugin, on the local CPU; must succeed and transcribe.
run_whisper_local() {
    local name=$1 model=$2 rc=0
    shift 2
    whisper_cli "$name" "" "$model" "$@" || rc=$?
    check_exit "$name" whisper-cli "$rc"
    grep -q 'whisper_backend_init_gpu: no GPU found' "$WORK/$name.err" ||
        fail "$name: the local reference found a GPU device; it must run on the CPU"
    assert_transcribed "$name"
}

# run_whisper_local_vulkan NAME MODEL [ARGS...]: the reference on a GPU: stock
# whisper-cli without the plugin, on the local Vulkan0 (GGML_VK_VISIBLE_DEVICES=0
# shows a CPU-type device such as lavapipe too); must succeed, transcribe, and
# have put the weights on Vulkan0.
run_whisper_local_vulkan() {
    local name=$1 model=$2 rc=0
    shift 2
    GGML_VK_VISIBLE_DEVICES=0 whisper_cli "$name" "" "$model" "$@" || rc=$?
    check_exit "$name" whisper-cli "$rc"
    grep -q 'whisper_backend_init_gpu: using Vulkan0 backend' "$WORK/$name.err" ||
        { grep 'whisper_backend_init_gpu' "$WORK/$name.err" >&2; fail "$name: whisper did not use the local Vulkan0"; }
    grep -qE 'whisper_model_load: +Vulkan0 total size' "$WORK/$name.err" ||
        fail "$name: the weights are not on the local Vulkan0"
    assert_transcribed "$name"
}

# run_whisper_guest NAME SERVERS MODEL [ARGS...]: whisper-cli with the plugin;
# must succeed and transcribe.
run_whisper_guest() {
    local name=$1 rc=0
    whisper_cli "$@" || rc=$?
    check_exit "$name" whisper-cli "$rc"
    assert_transcribed "$name"
}

# check_exit NAME PROGRAM RC: fails, with the end of the log, unless RC is 0.
check_exit() {
    local name=$1 program=$2 rc=$3
    [ "$rc" = 0 ] && return 0
    tail -n 25 "$WORK/$name.err" >&2
    case $rc in
        124) fail "$name: $program did not finish within $WHISPER_TIMEOUT s" ;;
        134) fail "$name: $program aborted (exit 134; out of its $WHISPER_MAX_VM_KIB KiB address space?)" ;;
        *) fail "$name: $program exited with $rc" ;;
    esac
}

# assert_transcribed NAME: the transcript has at least 20 letters.
assert_transcribed() {
    local txt=$WORK/$1.txt letters
    [ -f "$txt" ] || fail "$1: whisper-cli wrote no transcript"
    letters=$(tr -cd 'A-Za-z' <"$txt" | wc -c)
    [ "$letters" -ge 20 ] || fail "$1: the transcript is (nearly) empty: '$(cat "$txt")'"
}

# assert_same_transcript EXPECTED ACTUAL: two runs wrote the very same transcript.
assert_same_transcript() {
    if ! cmp -s "$WORK/$1.txt" "$WORK/$2.txt"; then
        echo "--- $1:" >&2
        cat "$WORK/$1.txt" >&2
        echo "--- $2:" >&2
        cat "$WORK/$2.txt" >&2
        fail "$2 transcribed differently than $1"
    fi
}

# assert_same_compute_buffers EXPECTED ACTUAL: whisper allocated compute buffers of
# the same sizes in both runs (its scheduler split, ordered and allocated the
# graphs alike).
assert_same_compute_buffers() {
    local expected actual
    expected=$(grep 'compute buffer (' "$WORK/$1.err")
    actual=$(grep 'compute buffer (' "$WORK/$2.err")
    [ -n "$expected" ] || fail "$1: whisper logged no compute buffer sizes"
    [ "$expected" = "$actual" ] || fail "$2 allocated other compute buffers than $1:" \
        "$(diff <(echo "$expected") <(echo "$actual") | grep '^[<>]' | tr '\n' ' ')"
}

# assert_used_remote NAME: whisper chose REMOTE0 as its GPU backend and loaded the
# weights into it, and the plugin reported no trouble.
assert_used_remote() {
    local err=$WORK/$1.err
    grep -q 'whisper_backend_init_gpu: using REMOTE0 backend' "$err" ||
        { grep -E 'ggml-remote|whisper_backend_init_gpu' "$err" >&2; fail "$1: whisper did not use REMOTE0"; }
    grep -qE 'whisper_model_load: +REMOTE0 total size' "$err" ||
        { grep -E 'whisper_model_load: .* total size' "$err" >&2; fail "$1: the weights are not on REMOTE0"; }
    [ -z "$(plugin_lines "$1")" ] || fail "$1: the plugin reported trouble: $(plugin_lines "$1")"
}

# whisper_runs NAME KIND: the number of runs whisper's timings report for KIND
# (encode, decode, batchd, prompt).
whisper_runs() {
    sed -n "s/^whisper_print_timings: *$2 time = .* \([0-9][0-9]*\) runs.*/\1/p" "$WORK/$1.err"
}

# endpoint_for TRANSPORT NAME: the endpoint of server NAME (see start_server) for
# unix, shm (the same socket) or tcp.
endpoint_for() {
    local unix_var=${2}_UNIX tcp_var=${2}_TCP
    case $1 in
        unix) echo "${!unix_var}" ;;
        shm) echo "shm:${!unix_var#unix:}" ;;
        tcp) echo "${!tcp_var}" ;;
        *) fail "unknown transport '$1' (expected unix, shm or tcp)" ;;
    esac
}
