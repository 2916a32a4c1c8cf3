# vulkan_llama: llama.cpp through a server that serves ggml's Vulkan backend (lavapipe
# here, a GPU where there is one) generates the same tokens as llama.cpp on the local
# Vulkan0:
#  - a server serving only Vulkan0, over unix, shm and tcp: every layer on REMOTE0,
#    which is the server's Vulkan device, and the session computed every token;
#  - a server serving Vulkan0 and the CPU: REMOTE0 and REMOTE0.1 (two devices of the
#    first server), llama.cpp splits the layers across them (the layers on REMOTE0,
#    the output layer on REMOTE0.1), and the
#    tokens equal the same split run locally (-ngl 2: both layers on Vulkan0, the
#    output layer on the CPU);
#  - --memory-quota covers Vulkan buffers: a guest whose model does not fit gets a
#    failed allocation that names the quota, and the server goes on.
# Skipped where no Vulkan device exists. Each run costs seconds of Vulkan start-up
# (pipelines), so one small model and few tokens.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/llama_helpers.sh"
source "$(dirname "$0")/vulkan_lib.sh"
require_vulkan0
unset GGML_VK_VISIBLE_DEVICES  # guests see Vulkan only through the server
N=16
path=$(model tiny f16)

start_vulkan_server gpu -d Vulkan0
grep -q 'serving Vulkan0: ' "$gpu_LOG" || fail "the server does not serve Vulkan0: $(head -3 "$gpu_LOG")"
run_local_vulkan local "$path" "$N"
for transport in unix shm tcp; do
    case $transport in
        unix) endpoint=$gpu_UNIX ;;
        shm) endpoint=shm:${gpu_UNIX#unix:} ;;
        tcp) endpoint=$gpu_TCP ;;
    esac
    session=$(($(sessions_connected "$gpu_LOG") + 1))
    run_guest_ok "$transport" "$endpoint" "$path" "$N"
    assert_remote_device "$transport" 0 llvmpipe
    assert_offloaded "$transport"
    assert_same_tokens local "$transport"
    assert_session_computed "$gpu_LOG" "$session" $((N - 1))
    note "over $transport: same $N tokens as the local Vulkan0"
done

# Two devices behind one server, the layers split across them.
start_vulkan_server both
run_local_vulkan split-local "$path" "$N" -ngl 2
run_guest_ok split-remote "$both_UNIX" "$path" "$N"
assert_remote_device split-remote 0 llvmpipe
assert_remote_device split-remote 0.1 "$(sed -n 's/.*serving CPU: \(.*\)/\1/p' "$both_LOG" | head -n1)"
grep -q 'assigned to device REMOTE0,' "$WORK/split-remote.err" &&
    grep -q 'assigned to device REMOTE0\.1,' "$WORK/split-remote.err" ||
    fail "the layers were not split across REMOTE0 and REMOTE0.1: $(grep 'assigned to device' "$WORK/split-remote.err")"
assert_same_tokens split-local split-remote
note "REMOTE0 (Vulkan0) and REMOTE0.1 (CPU) of one server: same $N tokens as the same split locally"

# The session's memory quota counts device buffers as it counts CPU ones.
start_vulkan_server quota -d Vulkan0 --memory-quota 100K
rc=0
run_guest over-quota "$quota_UNIX" "$path" 4 || rc=$?
[ "$rc" != 0 ] || fail "a model larger than --memory-quota 100K was loaded on Vulkan0"
grep -q "exceed the session's memory quota of 102400 bytes" "$WORK/over-quota.err" ||
    fail "the failed allocation does not name the quota: $(grep -m3 'REMOTE0' "$WORK/over-quota.err")"
kill -0 "$quota_PID" || fail "the server ended after a refused allocation"
note "a Vulkan0 model over --memory-quota: $(grep -m1 -o 'cannot allocate.*' "$WORK/over-quota.err")"
echo PASS
