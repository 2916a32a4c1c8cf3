# memory_limits: a guest cannot make its worker hold memory outside the session's
# limits (ggml-remote-memory-client plays the guest):
#  - a frame header announcing 256 MiB, followed by 100 bytes, raises the worker's
#    resident memory by less than 16 MiB (over unix and TCP): the frame's memory
#    grows with the bytes that came, not with the header;
#  - BackendInit is refused at the default cap (16 per session) with the flag
#    named, and `status` shows the session's backends against that cap;
#  - a memory file of 1 GiB, all holes, passed as a model is refused by a server
#    with --mapped-file-quota 64M, unmapped;
#  - under --memory-quota 64M, a GetTensor2d that repeats one 4 KiB row into a
#    reply of 256 MiB (stride 0), left unread by its guest, raises the worker's
#    resident memory by less than 16 MiB (over unix and TCP): a reply is sent as
#    it is read, a bounded piece at a time, never held whole;
#  - so does a SetTensor of 256 MiB for a 4 KiB buffer, sent but for its last
#    byte: tensor data is taken as it comes, never gathered into its frame.
source "$(dirname "$0")/lib.sh"
CLIENT=${1:?usage: memory_limits.sh MEMORY_CLIENT}

GROWTH_LIMIT_KB=16384
HUGE_FRAME=$((256 << 20))
start_server srv --mapped-file-quota 64M

# rss_kb PID: resident memory of a process.
rss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"; }
# wait_for NAME REGEX: waits up to 10 s until the client's output has a matching line.
wait_for() {
    local i
    for i in $(seq 200); do
        grep -qE -- "$2" "$WORK/$1.out" && return 0
        sleep 0.05
    done
    cat "$WORK/$1.out" >&2
    fail "$1: no line matching /$2/ within 10 s"
}
# start_client NAME ENDPOINT ATTACK VALUE [LOG]: the client, waiting for the word on
# fd 3; sets WORKER to its session's worker (found in LOG, the server srv's by default).
start_client() {
    local name=$1 log=${5:-$srv_LOG} sessions
    sessions=$(grep -c ': connected, worker pid ' "$log" || true)
    mkfifo "$WORK/$name.in"
    "$CLIENT" "$2" "$3" "$4" <"$WORK/$name.in" >"$WORK/$name.out" 2>&1 &
    exec 3>"$WORK/$name.in"
    wait_for "$name" '^handshaken'
    WORKER=$(grep ': connected, worker pid ' "$log" | sed -n "$((sessions + 1))s/.*worker pid \([0-9]*\).*/\1/p")
    [ -n "$WORKER" ] || { cat "$log" >&2; fail "$name: no worker in the server's log"; }
}
# stop_client: closes the client's stdin; it hangs up and exits.
stop_client() {
    exec 3>&-
    wait "$!" || true
}

for endpoint in "$srv_UNIX" "$srv_TCP"; do
    name=huge-${endpoint%%:*}
    start_client "$name" "$endpoint" huge-frame "$HUGE_FRAME"
    before_kb=$(rss_kb "$WORKER")
    echo go >&3
    wait_for "$name" '^sent: a frame header'
    sleep 1  # time to take the 100 bytes, and to allocate if it were going to
    after_kb=$(rss_kb "$WORKER")
    note "$name: worker $WORKER at $before_kb KiB, $after_kb KiB after a header for $((HUGE_FRAME >> 20)) MiB"
    [ $((after_kb - before_kb)) -lt "$GROWTH_LIMIT_KB" ] ||
        fail "$name: the worker grew by $((after_kb - before_kb)) KiB on a header and 100 bytes"
    stop_client
done

start_client flood "$srv_UNIX" backends 100
echo go >&3
wait_for flood '^result: '
result=$(grep '^result: ' "$WORK/flood.out")
note "flood: $result"
[[ $result == "result: 16 backends created, then code=limit_exceeded "*"(--max-backends)"* ]] ||
    fail "BackendInit was not refused at the cap of 16: $result"
json=$("$SERVER_BIN" status --connect "$srv_UNIX" --json)
grep -q '"backends": 16, "mapped_file_bytes": 0, "memory_quota": 0, "max_buffers": 65536, "max_backends": 16, "mapped_file_quota": 67108864' <<<"$json" ||
    fail "status does not show the session's 16 backends against its limits: $json"
"$SERVER_BIN" status --connect "$srv_UNIX" | grep -q 'limits: .* backends 16 of 16, mapped files 0.0 of 64.0 MiB' ||
    fail "the status table does not show the limits: $("$SERVER_BIN" status --connect "$srv_UNIX")"
stop_client

start_client sparse "$srv_UNIX" sparse-file $((1 << 30))
echo go >&3
wait_for sparse '^result: '
result=$(grep '^result: ' "$WORK/sparse.out")
note "sparse model: $result"
[[ $result == "result: code=limit_exceeded "*"--mapped-file-quota"* ]] ||
    fail "a 1 GiB file was not refused by --mapped-file-quota 64M: $result"
stop_client

start_server quota --memory-quota 64M
for attack in reply-2d set-tensor; do
    for endpoint in "$quota_UNIX" "$quota_TCP"; do
        name=$attack-${endpoint%%:*}
        start_client "$name" "$endpoint" "$attack" "$HUGE_FRAME" "$quota_LOG"
        before_kb=$(rss_kb "$WORKER")
        echo go >&3
        wait_for "$name" '^sent: a '
        sleep 1  # time to fill a socket's buffer, and to hold the whole frame if it were going to
        after_kb=$(rss_kb "$WORKER")
        note "$name: worker $WORKER at $before_kb KiB, $after_kb KiB with a frame of $((HUGE_FRAME >> 20)) MiB in flight"
        [ $((after_kb - before_kb)) -lt "$GROWTH_LIMIT_KB" ] ||
            fail "$name: under --memory-quota 64M the worker grew by $((after_kb - before_kb)) KiB for one frame"
        stop_client
    done
done

kill -0 "$srv_PID" || fail "the server is gone"
kill -0 "$quota_PID" || fail "the server with --memory-quota is gone"
! grep -q 'worker died' "$srv_LOG" "$quota_LOG" || { cat "$srv_LOG" "$quota_LOG" >&2; fail "a worker died"; }
echo PASS
