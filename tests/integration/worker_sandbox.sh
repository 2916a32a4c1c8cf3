# worker_sandbox: a real session worker serves its guest from inside the sandbox.
#  - /proc/<worker>/status: NoNewPrivs 1, Seccomp 2 (filter), one seccomp filter
#    more than the listener has; core dumps off (RLIMIT_CORE 0);
#  - its descriptors are stdin on /dev/null, stdout and stderr, the guest's socket
#    and the status board: not the listening sockets, not a descriptor the
#    server's parent leaked to it (the listener holds that one close-on-exec);
#  - llama.cpp generates the CPU's tokens through it (the CPU backend's threads);
#  - with --no-sandbox the worker has the listener's seccomp state, and the same
#    minimal descriptors.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/llama_helpers.sh"

CLIENT=${1:?usage: worker_sandbox.sh HANDSHAKE_CLIENT}

# A descriptor the server's parent forgot to close: the workers must not get it.
exec 9>"$WORK/leaked"
start_server srv
start_server open --no-sandbox
exec 9>&-
grep -q 'session workers: seccomp sandbox' "$srv_LOG" || fail "the server does not say its workers are sandboxed"
grep -q 'session workers: NOT sandboxed (--no-sandbox)' "$open_LOG" || fail "--no-sandbox is not logged"

field() { sed -n "s/^$2:\t//p" "/proc/$1/status"; }

# hold_session NAME ENDPOINT LOG: a handshaken session that stays open; prints its worker pid.
hold_session() {
    local name=$1 endpoint=$2 log=$3 line
    local session=$(($(sessions_connected "$log") + 1))
    timeout 60 "$CLIENT" "$endpoint" --hold 30 >"$WORK/$name.txt" 2>&1 &
    SERVER_PIDS+=($!)
    wait_for_line "$WORK/$name.txt" '^accepted: ' 20 >/dev/null || { cat "$WORK/$name.txt" "$log" >&2; fail "$name: not accepted"; }
    line=$(wait_for_line "$log" "session $session \\(.*\\): connected, worker pid [0-9]+" 5) || fail "$name: no worker"
    sed -n 's/.*worker pid \([0-9]*\).*/\1/p' <<<"$line"
}

# object FILE: the device and inode a descriptor refers to.
object() { stat -L -c '%d:%i' "$1" 2>/dev/null || true; }
# assert_minimal_descriptors PID LOG LISTENER: stdin /dev/null, stdout/stderr the log,
# one socket and the status board, and nothing else the listener holds. A descriptor
# the worker's own backends opened (lavapipe's device memory: a memfd) is not the
# listener's, so it came from no one else.
assert_minimal_descriptors() {
    local pid=$1 log=$2 listener=$3 fd target others=() listeners=" "
    for fd in "/proc/$listener/fd/"*; do listeners+="$(object "$fd") "; done
    for fd in $(ls "/proc/$pid/fd"); do
        target=$(readlink "/proc/$pid/fd/$fd")
        case $fd:$target in
            0:/dev/null | 1:"$log" | 2:"$log") ;;
            *:socket:* | *:/memfd:ggml-remote-status*) others+=("$target") ;;
            *) [[ $listeners != *" $(object "/proc/$pid/fd/$fd") "* ]] || others+=("$target") ;;
        esac
    done
    local listing
    listing=$(printf '%s\n' "${others[@]}" | sed 's/\[[0-9]*\]//; s/ (deleted)//' | sort | tr '\n' ' ')
    [ "$listing" = "/memfd:ggml-remote-status socket: " ] || {
        ls -l "/proc/$pid/fd" >&2
        fail "worker $pid holds more than its socket and the status board: $listing"
    }
    note "worker $pid descriptors: 0 /dev/null, 1 and 2 the log, $listing"
}

worker=$(hold_session held "$srv_UNIX" "$srv_LOG")
[ "$(field "$worker" NoNewPrivs)" = 1 ] || fail "worker $worker: NoNewPrivs $(field "$worker" NoNewPrivs)"
[ "$(field "$worker" Seccomp)" = 2 ] || fail "worker $worker: Seccomp $(field "$worker" Seccomp), not 2 (filter)"
filters=$(field "$worker" Seccomp_filters) listener_filters=$(field "$srv_PID" Seccomp_filters)
[ "$filters" = $((listener_filters + 1)) ] || fail "worker $worker has $filters seccomp filters, the listener $listener_filters"
grep -qE '^Max core file size +0 +0 ' "/proc/$worker/limits" || fail "worker $worker may dump core"
note "worker $worker: NoNewPrivs 1, Seccomp 2, $filters filter(s) (listener: $listener_filters), no core dumps"
assert_minimal_descriptors "$worker" "$srv_LOG" "$srv_PID"
flags=$(sed -n 's/^flags:\t//p' "/proc/$srv_PID/fdinfo/9")
(((8#$flags & 8#2000000) != 0)) || fail "the listener holds the leaked descriptor 9 without close-on-exec (flags $flags)"

tiny=$(model tiny)
N=32
run_local local "$tiny" "$N"
run_guest_ok sandboxed "$srv_UNIX" "$tiny" "$N"
assert_offloaded sandboxed
assert_same_tokens local sandboxed
session=$(sessions_connected "$srv_LOG")
assert_session_computed "$srv_LOG" "$session" $((N - 1))

worker=$(hold_session held-open "$open_UNIX" "$open_LOG")
[ "$(field "$worker" Seccomp_filters)" = "$(field "$open_PID" Seccomp_filters)" ] ||
    fail "--no-sandbox: the worker has a seccomp filter of its own"
[ "$(field "$worker" NoNewPrivs)" = "$(field "$open_PID" NoNewPrivs)" ] || fail "--no-sandbox: NoNewPrivs changed"
assert_minimal_descriptors "$worker" "$open_LOG" "$open_PID"
note "--no-sandbox: the worker keeps the listener's seccomp state"
echo PASS
