# services_sandbox (issue 40, class 5): the weight store's owner, the model library
# and the peer broker run in a process of their own (ggml-remote-services), not on
# the listener's threads. Code running there (the worker_probe preload, which plays
# an attacker who took it over through a bug in their message handling) finds a
# seccomp sandbox, cannot read the key file or other files, cannot plant files
# outside the store, and cannot touch the listener. The listener supervises it: a
# services process that is killed is started again, and the restarted one serves
# the store's entries; one that stops answering costs a spawn a bounded wait, is
# killed, and is started again; none of it stops the listener serving guests.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/llama_helpers.sh"

CLIENT=${1:?usage: services_sandbox.sh HANDSHAKE_CLIENT PROBE_LIBRARY}
PROBE=${2:?usage: services_sandbox.sh HANDSHAKE_CLIENT PROBE_LIBRARY}
STORE=$WORK/store
LIBRARY=$WORK/models
mkdir -p "$LIBRARY"
psktool -u guest -p "$WORK/keys.psk" >/dev/null
echo "a file of the server's user" >"$WORK/secret"
export GGML_REMOTE_CACHE_DIR=$WORK/cache
path=$(model small f16)
failures=()

GGML_REMOTE_PROBE_SERVICES=1 GGML_REMOTE_PROBE_FILES="$WORK/keys.psk:$WORK/secret" \
    GGML_REMOTE_PROBE_WRITE="$WORK/planted:$LIBRARY/planted.gguf" \
    LD_PRELOAD=$PROBE start_server srv --tls-psk "$WORK/keys.psk" --weight-store "$STORE" --models "$LIBRARY"

# services_pid N: the pid of the Nth services process the listener reported ready,
# waiting up to 20 s for it; nothing if none came.
services_pid() {
    local pid="" i
    for i in $(seq 400); do
        pid=$(grep -E "services process \(pid [0-9]+\): .*sandboxed" "$srv_LOG" | sed -n "$1s/.*(pid \([0-9]*\)).*/\1/p")
        [ -n "$pid" ] && break
        sleep 0.05
    done
    echo "$pid"
}
# gone PID: waits up to 10 s for process PID to end and be reaped.
gone() {
    local i
    for i in $(seq 200); do
        kill -0 "$1" 2>/dev/null || return 0
        sleep 0.05
    done
    return 1
}
first=$(services_pid 1)
[ -n "$first" ] || fail "the listener reported no services process"
[ "$(readlink "/proc/$first/exe")" = "$(readlink -f "$BUILD/bin/ggml-remote-services")" ] ||
    failures+=("pid $first is not ggml-remote-services: $(readlink "/proc/$first/exe")")
status_of() { awk -v key="$2:" '$1 == key { print $2 }' "/proc/$1/status"; }
[ "$(status_of "$first" Seccomp)" = 2 ] || failures+=("the services process has no seccomp filter")
[ "$(status_of "$first" NoNewPrivs)" = 1 ] || failures+=("the services process may gain privileges")
[ "$(status_of "$first" PPid)" = "$srv_PID" ] || failures+=("the services process is not the listener's child")

# What the attacker in the services process tried, and what it got.
wait_for_line "$srv_LOG" "worker-probe\\[$first\\]: done" 10 >/dev/null || fail "the probe did not run in the services process"
grep "worker-probe\\[$first\\]" "$srv_LOG" | sed 's/^.*worker-probe/-- worker-probe/'
for what in "ptrace(listener)" "kill(listener, 0)" "read $WORK/keys.psk" "read $WORK/secret" \
    "create $WORK/planted" "create $LIBRARY/planted.gguf"; do
    grep -qF "worker-probe[$first]: $what: refused (" "$srv_LOG" ||
        failures+=("services: $what: $(grep -F "worker-probe[$first]: $what:" "$srv_LOG" || echo 'not attempted')")
done
if grep -F "worker-probe[$first]" "$srv_LOG" | grep -q ALLOWED; then
    failures+=("the services process was allowed: $(grep -F "worker-probe[$first]" "$srv_LOG" | grep ALLOWED)")
fi

# The store works through it: a guest's weights are kept, and found by the next
# guest after the services process was killed and started again.
run_local local "$path" 8
GUEST="tls://${srv_TCP#tcp://}?psk-file=$WORK/keys.psk"
session=$(($(sessions_connected "$srv_LOG") + 1))
run_guest_ok before "$GUEST" "$path" 8
assert_same_tokens local before
# The guest's weights are kept once its worker handed them over and the owner named
# them: its worker gone, entries there, none being written.
entries() { find "$STORE" -mindepth 2 -type f ! -name '.*' | wc -l; }
writing() { find "$STORE" -mindepth 2 -name '.new-*' | wc -l; }
for _ in $(seq 600); do
    [ -z "$(workers)" ] && [ "$(entries)" -gt 0 ] && [ "$(writing)" = 0 ] && break
    sleep 0.05
done
[ "$(entries)" -gt 0 ] || failures+=("the first guest's weights were not kept")
note "$(entries) entries kept before the services process is killed"
kill -KILL "$first"
wait_for_line "$srv_LOG" "services process \\(pid $first\\) died from signal 9" 10 >/dev/null ||
    failures+=("the listener did not report the services process's death")
second=$(services_pid 2)
[ -n "$second" ] && [ "$second" != "$first" ] || fail "the services process was not started again"
kill -0 "$srv_PID" || fail "the listener ended with its services process"
session=$(($(sessions_connected "$srv_LOG") + 1))
run_guest_ok after "$GUEST" "$path" 8
assert_same_tokens local after
found=$(session_end "$srv_LOG" "$session" | sed -n 's/.*weight store: \([0-9]*\) found.*/\1/p')
[ "${found:-0}" -gt 0 ] || failures+=("the restarted services process served none of the kept weights: $(session_end "$srv_LOG" "$session")")

# A services process that stops answering: the next guest waits a bounded time,
# is served without a store, and the stuck process is replaced.
kill -STOP "$second"
"$CLIENT" "$srv_UNIX" >"$WORK/stalled.txt" 2>&1 || true
grep -q '^accepted: ' "$WORK/stalled.txt" || failures+=("a guest was not served while the services process stalled: $(cat "$WORK/stalled.txt")")
grep -q "services process (pid $second) did not answer" "$srv_LOG" ||
    failures+=("the listener did not give up on the stalled services process")
third=$(services_pid 3)
[ -n "$third" ] || failures+=("no services process was started after the stalled one")
gone "$second" || failures+=("the stalled services process $second still runs")

# The listener's end: the services process ends with it.
kill -TERM "$srv_PID"
wait "$srv_PID" 2>/dev/null || true
[ -z "$third" ] || gone "$third" || failures+=("the services process outlived the listener")
finish "$srv_LOG"
