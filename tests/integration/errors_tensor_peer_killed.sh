# errors_tensor_peer_killed: llama.cpp generates with -sm tensor over two servers
# whose workers sum partial results among themselves (shm: a memory file; tcp: a
# TCP link between the servers); the second server's worker is killed mid-token
# (kill -9). The first server's worker sees its peer's process end (shm: its lock
# in the file; tcp: the link closes), not waiting out its 30 s for a peer, fails
# the step, and the guest's next compute fails, naming the lost server: llama.cpp
# stops with an error well within the limit. Both servers go on: a new guest on
# each alone generates the CPU's tokens.
# usage: errors_tensor_peer_killed.sh shm|tcp
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/llama_helpers.sh"
transport=${1:-shm}

EXIT_LIMIT_S=10
export GGML_REMOTE_CONNECT_TIMEOUT_MS=2000
GUEST_TIMEOUT=300
path=$(model small f16)
tiny=$(model tiny)
run_local tiny-local "$tiny" 16

start_server first
case $transport in
    shm)
        start_server second
        servers="shm:${first_UNIX#unix:},shm:${second_UNIX#unix:}"
        ;;
    tcp)
        start_server second --tensor-peer "$first_TCP"
        servers="$first_TCP,$second_TCP"
        ;;
    *) fail "unknown transport '$transport'" ;;
esac
GGML_BACKEND_PATH=$PLUGIN GGML_REMOTE_SERVERS="$servers" GGML_REMOTE_STATS=1 \
    timeout "$GUEST_TIMEOUT" llama-completion -m "$path" -n 4000 --temp 0 -s 1 -no-cnv --no-warmup -t 1 \
    -ngl 99 -sm tensor -p "$PROMPT" </dev/null >"$WORK/victim.out" 2>"$WORK/victim.err" &
victim=$!
GUEST_PIDS+=("$victim")
connected=$(wait_for_line "$second_LOG" "session 1 \\(.*\\): connected, worker pid [0-9]+" 30) ||
    { cat "$second_LOG" >&2; fail "the guest never connected to the second server"; }
worker=$(sed -n 's/.*worker pid \([0-9]*\).*/\1/p' <<<"$connected")
wait_generating victim "$victim"
kill -0 "$victim" 2>/dev/null || fail "the guest ended before the kill"

kill -9 "$worker"
killed_at=$(now_ms)
wait_pid_exit "$victim" "$EXIT_LIMIT_S" ||
    { tail -n 20 "$WORK/victim.err" >&2; fail "the guest still runs $EXIT_LIMIT_S s after its peer's worker died"; }
took=$(($(now_ms) - killed_at))
rc=0
wait "$victim" || rc=$?
[ "$rc" != 0 ] || fail "the guest exited with 0 though a server of its group died mid-generation"
# Whichever the guest hears first: its own connection to the lost server, or the
# first server's failed step, which names the lost rank.
failure=$(grep -m1 -E 'a server of its tensor-parallel group failed|comm_all_reduce: peer rank 1, step [0-9]+: ' \
    "$WORK/victim.err") ||
    { tail -n 20 "$WORK/victim.err" >&2; fail "the guest's compute did not fail naming the lost server"; }
# The servers summed (not ggml through this process) before the kill.
grep -q 'all-reduces between servers' "$WORK/victim.err" ||
    { tail -n 5 "$WORK/victim.err" >&2; fail "the servers formed no group over $transport"; }
note "the guest exited with $rc ${took} ms after the kill: ${failure#* E }"

# Both servers go on.
for server in first second; do
    unix_var=${server}_UNIX
    run_guest_ok "after-$server" "shm:${!unix_var#unix:}" "$tiny" 16
    assert_same_tokens tiny-local "after-$server"
done
note "both servers serve new guests with the CPU's tokens"
echo PASS
