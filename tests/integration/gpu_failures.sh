# gpu_failures: a GPU's failures reach the guest as errors, never as hangs. A server
# serves only Vulkan0 (lavapipe here: GGML_VK_VISIBLE_DEVICES=0). Skipped (77)
# without a Vulkan device.
#  - Over unix, shm and tcp, a guest (gpu_failures_client.cpp) asks for a buffer past
#    the device's memory (refused), computes a node Vulkan0 cannot compute (an f16
#    SCALE, on which ggml-vulkan aborts the process): ggml_backend_graph_compute
#    fails and the server logs a line naming the session; then a + b computes right
#    on the same session. No worker dies.
#  - A worker that aborts mid-generation (SIGABRT, what GGML_ABORT in a backend
#    does) ends its guest with one "lost the connection" line within 5 s, and the
#    server names the session and the signal.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/llama_helpers.sh"
source "$(dirname "$0")/vulkan_lib.sh"
CLIENT=${1:?usage: gpu_failures.sh GPU_FAILURES_CLIENT}
EXIT_LIMIT_S=5
ulimit -c 0  # the aborted worker leaves no core file behind

require_vulkan0
start_vulkan_server srv -d Vulkan0
unset GGML_VK_VISIBLE_DEVICES  # the guests see no local Vulkan device: only REMOTE0
failures=()

# client NAME ENDPOINT: the client as a guest of srv; checks its steps and the
# server's line for its session.
client() {
    local name=$1 endpoint=$2 session rc=0
    session=$(($(sessions_connected "$srv_LOG") + 1))
    GGML_BACKEND_PATH="$PLUGIN" GGML_REMOTE_SERVERS="$endpoint" timeout 60 "$CLIENT" >"$WORK/$name.out" 2>"$WORK/$name.err" || rc=$?
    note "$name: $(tr '\n' ' ' <"$WORK/$name.out")"
    if [ "$rc" != 0 ]; then
        failures+=("$name exited with $rc: $(grep FAIL "$WORK/$name.out" || tail -n 3 "$WORK/$name.err")")
        return
    fi
    [ "$(grep -c '^ok: ' "$WORK/$name.out")" = 3 ] || failures+=("$name: not all three steps passed")
    local line
    line=$(wait_for_line "$srv_LOG" "session $session \(.*\): failed graph compute: host device Vulkan0 cannot compute node 'scaled'" 10) ||
        { failures+=("$name: the server logged no failed compute for session $session"); return; }
    note "server: ${line#* ggml-remote-server: }"
}

client unix "$srv_UNIX"
client shm "shm:${srv_UNIX#unix:}"
client tcp "$srv_TCP"
if grep -q 'worker died' "$srv_LOG"; then failures+=("a worker died: $(grep 'worker died' "$srv_LOG")"); fi

# A backend that aborts takes its worker down: the guest must end, not wait.
GUEST_TIMEOUT=120
session=$(($(sessions_connected "$srv_LOG") + 1))
start_guest victim "$srv_UNIX" "$(model tiny)" 2000
victim=$GUEST_PID
connected=$(wait_for_line "$srv_LOG" "session $session \\(.*\\): connected, worker pid [0-9]+" 30) ||
    fail "the victim never connected"
worker=$(sed -n 's/.*worker pid \([0-9]*\).*/\1/p' <<<"$connected")
wait_generating victim "$victim"
kill -ABRT "$worker"
if ! wait_pid_exit "$victim" "$EXIT_LIMIT_S"; then
    failures+=("the victim was still running $EXIT_LIMIT_S s after its worker aborted (hung)")
    kill "$victim" 2>/dev/null || true
fi
wait "$victim" || true
lost=$(grep -c '^ggml-remote: lost the connection' "$WORK/victim.err" || true)
[ "$lost" = 1 ] || failures+=("the victim said it lost the connection $lost times, not once")
line=$(wait_for_line "$srv_LOG" "session $session \(.*\): worker died from signal 6" 10) ||
    failures+=("the server did not log the aborted worker of session $session")
note "server: ${line#* ggml-remote-server: }"
sed -i '/worker died from signal 6/d' "$srv_LOG"  # expected here; finish() looks for others
finish "$srv_LOG"
