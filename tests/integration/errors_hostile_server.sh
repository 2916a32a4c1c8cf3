# errors_hostile_server: a guest does not trust its server. Between llama-simple
# (with the plugin) and a real server stands one that lies
# (ggml-remote-hostile-server); for each lie, llama-simple must end in bounded
# time with a ggml error and the guest's reason in its log: no abort, no
# exception, no endless log, no hang.
#  - alloc-short: a BufferAlloc reply smaller than asked (was: an abort in ggml-alloc);
#  - huge-length: a reply that announces 2^62 bytes (was: std::bad_alloc);
#  - devices: a handshake that claims 2^31 devices (was: 139 MB of log a minute);
#  - alignment: a buffer alignment of 2^63;
#  - get-short: a tensor read answered with half its bytes;
#  - stall: no reply after the first graph compute (was: a hang for ever), with
#    GGML_REMOTE_REPLY_TIMEOUT_MS=2000: the session is lost, the guest reconnects,
#    and the compute in flight fails.
# usage: errors_hostile_server.sh PATH-TO-ggml-remote-hostile-server
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/llama_helpers.sh"

HOSTILE=${1:?usage: errors_hostile_server.sh HOSTILE_SERVER}
LIMIT_S=60        # a run that takes longer hangs
LOG_LIMIT_KB=2048 # a run that logs more logs without end

tiny=$(model tiny)
start_server srv
failures=()

# attack NAME EXPECTED-REGEX [VAR=VALUE...]: llama-simple through a server that
# tells lie NAME; its log must match EXPECTED-REGEX.
attack() {
    local name=$1 expected=$2 rc=0 started ms
    shift 2
    local path=$WORK/hostile-$name.sock err=$WORK/$name.err
    "$HOSTILE" "$path" "${srv_UNIX#unix:}" "$name" 2>"$WORK/hostile-$name.log" &
    SERVER_PIDS+=($!)
    for _ in $(seq 100); do [ -S "$path" ] && break; sleep 0.1; done
    started=$(now_ms)
    # The log goes to a file of at most LOG_LIMIT_KB: past that, SIGXFSZ.
    (ulimit -f "$LOG_LIMIT_KB"
     exec env "$@" GGML_BACKEND_PATH="$PLUGIN" GGML_REMOTE_SERVERS="unix:$path" timeout "$LIMIT_S" \
         llama-simple -m "$tiny" -n 16 -ngl 99 "$PROMPT" >"$WORK/$name.out" 2>"$err") || rc=$?
    ms=$(($(now_ms) - started))
    note "$name: exit $rc after $ms ms, $(wc -c <"$err") bytes of log"
    local problem=""
    if [ "$rc" = 124 ]; then problem="hung (killed after $LIMIT_S s)"
    elif [ "$rc" = 153 ]; then problem="logged more than $LOG_LIMIT_KB KiB"
    elif [ "$rc" -ge 128 ]; then problem="died of signal $((rc - 128))"
    elif grep -qE 'terminate called|bad_alloc|GGML_ASSERT|Aborted' "$err"; then problem="aborted or threw"
    elif ! grep -qE -- "$expected" "$err"; then problem="no line matching /$expected/ in its log"
    fi
    if [ -n "$problem" ]; then
        failures+=("$name: $problem")
        echo "--- $name: the end of llama-simple's log:" >&2
        tail -c 1500 "$err" >&2
        echo >&2
    fi
}

attack alloc-short 'buffer_alloc gives a buffer of [0-9]+ bytes for [0-9]+ asked'
attack huge-length 'reply to device_info: message of 4611686018427387904 bytes exceeds the limit'
attack devices 'claims 2147483648 devices'
attack alignment 'buffer alignment of 9223372036854775808'
attack get-short 'get_tensor has [0-9]+ bytes for [0-9]+ asked'
attack stall 'silent for 2000 ms' GGML_REMOTE_REPLY_TIMEOUT_MS=2000

# The real server behind the liar never suffered.
kill -0 "$srv_PID" 2>/dev/null || failures+=("the real server exited")
finish "$srv_LOG"
