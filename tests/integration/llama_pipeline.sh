# llama_pipeline_{unix,shm}: a model split across two servers (REMOTE0 and
# REMOTE1, layer split). Both devices offer async compute and events, so llama.cpp
# runs its scheduler with pipeline parallelism (several copies of the inputs, and
# events between the devices); the tokens must still equal the local CPU's, and
# both servers must have computed.
# usage: llama_pipeline.sh unix|shm
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/llama_helpers.sh"
transport=${1:?usage: llama_pipeline.sh unix|shm}

start_server first
start_server second
case $transport in
    unix) endpoints="$first_UNIX,$second_UNIX" ;;
    shm) endpoints="shm:${first_UNIX#unix:},shm:${second_UNIX#unix:}" ;;
    *) fail "unknown transport '$transport'" ;;
esac
N=32
path=$(model small f16)
run_local local "$path" "$N"
run_guest_ok remote "$endpoints" "$path" "$N"
grep -q 'pipeline parallelism enabled' "$WORK/remote.err" ||
    fail "llama.cpp did not enable pipeline parallelism: $(grep -E 'pipeline|assigned to device' "$WORK/remote.err" | head -5)"
grep -q 'assigned to device REMOTE1' "$WORK/remote.err" || fail "no layer went to REMOTE1"
assert_offloaded remote
assert_same_tokens local remote
for server in first second; do
    log_var=${server}_LOG
    assert_session_computed "${!log_var}" 1 $((N - 1))
done
note "same $N tokens as the CPU through two servers with pipeline parallelism: $(head -c 80 "$WORK/remote.out")..."
echo PASS
