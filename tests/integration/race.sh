# race_{shm,ivshmem}: the double fetch over shared memory. A guest's CPU buffers are
# memory it can write during a compute; race_client.cpp rewrites, from a racer
# thread, the row ids, expert ids, sequence ids and sort values of GET_ROWS,
# GET_ROWS_BACK, SET_ROWS, MUL_MAT_ID, ADD_ID, SSM_SCAN and ARGSORT, and the ids a
# TOP_K of the graph computes, while the worker computes. It requires results that
# only in-range indexes give (or a refusal), no write outside the result, and a
# session that still works; then it scribbles over the guest-to-host ring (frames
# after the guest published them, the written count) while it computes. Here: no
# worker died of a signal, whatever ended its session, and the listener lives.
# RACE_SECONDS: seconds of racing for the transport (default 4).
# usage: race.sh shm|ivshmem RACE_CLIENT
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/llama_helpers.sh"

mode=${1:?usage: race.sh shm|ivshmem RACE_CLIENT}
CLIENT=${2:?usage: race.sh shm|ivshmem RACE_CLIENT}
seconds=${RACE_SECONDS:-4}
case $mode in
    shm)
        start_server srv --device CPU
        endpoint=shm:${srv_UNIX#unix:}
        ring=shm ;;
    ivshmem)
        REGION=$WORK/race.region
        start_server srv --device CPU --listen "ivshmem:$REGION,size=64M"
        wait_for_line "$srv_LOG" "serving one VM at a time on $REGION" 10 >/dev/null ||
            fail "no region: $(cat "$srv_LOG")"
        endpoint=ivshmem:file:$REGION
        ring=$REGION ;;
    *) fail "unknown transport $mode" ;;
esac

failures=()
rc=0
GGML_REMOTE_RECONNECT=0 remote "$endpoint" timeout $((seconds * 3 + 120)) "$CLIENT" "$seconds" --ring "$ring" \
    >"$WORK/race.out" 2>"$WORK/race.err" || rc=$?
sed 's/^/   /' "$WORK/race.out"
[ "$rc" = 0 ] || failures+=("race_client exited with $rc: $(grep FAIL "$WORK/race.out" || tail -3 "$WORK/race.err")")
grep -q '^PASS' "$WORK/race.out" || failures+=("race_client did not finish")
kill -0 "$srv_PID" 2>/dev/null || failures+=("the server is gone")
finish "$srv_LOG"
