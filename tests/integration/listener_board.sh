# listener_board_{decoys,zero}: a taken-over session worker (the worker_probe
# preload, see worker_probe.cpp) forges the status board, which every worker maps
# writable, and the listener is then replaced (SIGUSR2). What the new listener
# adopts, counts and ends comes only from the pidfds and the ledger the old one
# handed over (src/host/listener/adopted_sessions.h, session_ledger.h), never from the board:
#  decoys: the worker marks two slots live for decoy processes (another user's,
#      whose command lines name those slots, as a worker's do). The new listener
#      takes over the one real session only, serves guests up to --max-sessions,
#      and at stop leaves the decoys running.
#  zero: the worker writes 0 as the board's slot count. The new listener still
#      counts the live session: a second guest is refused at --max-sessions 1.
# usage: listener_board.sh decoys|zero HANDSHAKE_CLIENT PROBE_LIBRARY
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/llama_helpers.sh"

mode=${1:?usage: listener_board.sh decoys|zero HANDSHAKE_CLIENT PROBE_LIBRARY}
CLIENT=${2:?usage: listener_board.sh decoys|zero HANDSHAKE_CLIENT PROBE_LIBRARY}
PROBE=${3:?usage: listener_board.sh decoys|zero HANDSHAKE_CLIENT PROBE_LIBRARY}

# hold NAME SECONDS: a guest that opens a session and keeps it open.
hold() {
    timeout $(($2 + 10)) "$CLIENT" "$srv_UNIX" --hold "$2" >"$WORK/$1.txt" 2>&1 &
    SERVER_PIDS+=($!)
}
# answered NAME: waits for NAME's answer; 0 when it was accepted.
answered() {
    wait_for_line "$WORK/$1.txt" '^(accepted|reply|message): ' 20 >/dev/null ||
        { cat "$WORK/$1.txt" "$srv_LOG" >&2; fail "$1 got no answer"; }
    sleep 0.2
    grep -q '^accepted: ' "$WORK/$1.txt"
}
# replace_listener: SIGUSR2, then the new listener's line on what it took over.
replace_listener() {
    kill -USR2 "$srv_PID"
    wait_for_line "$srv_LOG" "SIGUSR2: replacing the listener" 10 >/dev/null || fail "no SIGUSR2 replacement"
    wait_for_line "$srv_LOG" "(took over [0-9]+ live session|took over the previous listener's status board)" 10 \
        >/dev/null || { cat "$srv_LOG" >&2; fail "the new listener did not start"; }
    sleep 0.5
    grep -E "took over [0-9]+ live session" "$srv_LOG" | tail -n 1 || true
}
forged() {
    wait_for_line "$srv_LOG" "worker-probe\\[[0-9]+\\]: forged the status board: " 10 ||
        { cat "$srv_LOG" >&2; fail "the probe did not forge the board"; }
}

case $mode in
decoys)
    # Two processes of another user whose command lines look like workers' of slots 30 and 31.
    decoys=()
    for slot in 30 31; do
        setpriv --reuid=65534 --regid=65534 --clear-groups \
            python3 -c 'import time; time.sleep(600)' --worker-fd 9 --status-slot "$slot" >/dev/null 2>&1 &
        decoys+=($!)
        SERVER_PIDS+=($!)
    done
    sleep 0.2
    GGML_REMOTE_PROBE_BOARD="decoys:${decoys[0]}:30,${decoys[1]}:31" LD_PRELOAD=$PROBE \
        start_server srv --max-sessions 3
    hold first 60
    answered first || fail "the first guest was refused: $(cat "$WORK/first.txt")"
    line=$(forged)
    note "$line"
    took=$(replace_listener)
    note "new listener: $took"
    failures=()
    [[ $took == *"took over 1 live session(s)"* ]] || failures+=("the new listener took over decoys the board named: '$took'")
    # Two more real guests fit under --max-sessions 3 (with the first); a fourth does not.
    hold second 60
    answered second || failures+=("a real guest was refused at --max-sessions 3 with one session live: $(cat "$WORK/second.txt")")
    hold third 60
    answered third || failures+=("the third real guest was refused: $(cat "$WORK/third.txt")")
    hold fourth 5
    ! answered fourth || failures+=("a fourth guest got past --max-sessions 3")
    # The server stops: it ends its sessions, never the decoys.
    kill -TERM "$srv_PID"
    wait_pid_exit "$srv_PID" 15 || fail "the server did not stop"
    for pid in "${decoys[@]}"; do
        kill -0 "$pid" 2>/dev/null || failures+=("the listener ended decoy $pid, which was never its worker")
    done
    [ "${#failures[@]}" = 0 ] || { printf 'FAIL: %s\n' "${failures[@]}" >&2; fail "the forged board was believed"; }
    note "the decoys were neither adopted, counted, nor ended"
    ;;
zero)
    GGML_REMOTE_PROBE_BOARD=zero LD_PRELOAD=$PROBE start_server srv --max-sessions 1
    hold first 60
    answered first || fail "the first guest was refused: $(cat "$WORK/first.txt")"
    line=$(forged)
    note "$line"
    took=$(replace_listener)
    note "new listener: $took"
    failures=()
    [[ $took == *"took over 1 live session(s)"* ]] || failures+=("the new listener did not count the live session: '$took'")
    hold second 5
    ! answered second || failures+=("a second guest got past --max-sessions 1 after a forged slot count of 0")
    [ "${#failures[@]}" = 0 ] || { printf 'FAIL: %s\n' "${failures[@]}" >&2; fail "the forged board was believed"; }
    note "the second guest: $(grep -E '^message: ' "$WORK/second.txt")"
    ;;
*) fail "unknown mode '$mode'" ;;
esac
echo PASS
