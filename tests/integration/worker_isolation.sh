# worker_isolation: code running inside a sandboxed session worker (the worker_probe
# preload, see worker_probe.cpp) cannot reach the listener, a sibling worker, the
# services process, the key file or the guests' files. Each attempt must be refused:
#   the listener's and a sibling's /proc/PID/mem (read-write) and environment,
#   ptrace, kill, their CPU affinity and priority;
#   reading the --tls-psk key file and a file in the test's directory;
#   creating a file there;
#   finding the key file's key in a TLS worker's memory once its guest is authenticated.
# A TLS connection that sends no key is probed too: its worker is sandboxed before it
# reads the first byte, so GnuTLS parses unauthenticated bytes inside the sandbox.
# The probed sessions still work afterwards.
# Where the test runs as root, a server with --worker-user nobody runs its workers
# with nobody's real, effective and saved IDs, and they still serve.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/llama_helpers.sh"

CLIENT=${1:?usage: worker_isolation.sh HANDSHAKE_CLIENT PROBE_LIBRARY}
PROBE=${2:?usage: worker_isolation.sh HANDSHAKE_CLIENT PROBE_LIBRARY}

psktool -u guest -p "$WORK/keys.psk" >/dev/null
echo "another guest's data" >"$WORK/guest-data.txt"
GGML_REMOTE_PROBE_FILES="$WORK/keys.psk:$WORK/guest-data.txt:/etc/passwd" GGML_REMOTE_PROBE_KEY_FILE="$WORK/keys.psk" \
    GGML_REMOTE_PROBE_WRITE="$WORK/probe-wrote-this" LD_PRELOAD=$PROBE start_server srv --tls-psk "$WORK/keys.psk"

failures=()
# Files are confined by Landlock; a kernel without it is a documented gap, not a failure.
confined=yes
if grep -q 'session workers: .*files NOT confined' "$srv_LOG"; then
    confined=no
    note "this kernel has no Landlock: the file attempts are reported, not asserted"
fi

# probe_lines PID: what the probe in worker PID reported, once it is done.
probe_lines() {
    wait_for_line "$srv_LOG" "worker-probe\\[$1\\]: done" 10 >/dev/null || return 1
    grep "worker-probe\\[$1\\]: " "$srv_LOG"
}

# expect_refused PID WHAT...: each WHAT (a fixed string) was attempted in worker PID and refused.
expect_refused() {
    local pid=$1 lines what
    shift
    lines=$(probe_lines "$pid") || { failures+=("worker $pid: the probe did not run (not sandboxed?)"); return; }
    for what in "$@"; do
        grep -qF -- "worker-probe[$pid]: $what" <<<"$lines" || { failures+=("worker $pid: '$what' was not attempted"); continue; }
        grep -F -- "worker-probe[$pid]: $what" <<<"$lines" | grep -q ': refused (' ||
            failures+=("worker $pid: $(grep -F -- "worker-probe[$pid]: $what" <<<"$lines" | head -n 1)")
    done
}

worker_pid() { sed -n "s/.*session $1 (.*): connected, worker pid \([0-9]*\).*/\1/p" "$srv_LOG"; }

# The sibling: a session that stays open.
timeout 60 "$CLIENT" "$srv_UNIX" --hold 30 >"$WORK/sibling.txt" 2>&1 &
SERVER_PIDS+=($!)
wait_for_line "$WORK/sibling.txt" '^accepted: ' 20 >/dev/null || { cat "$WORK/sibling.txt" "$srv_LOG" >&2; fail "the sibling session was not accepted"; }
sibling=$(worker_pid 1)
[ -n "$sibling" ] || fail "no worker pid for the sibling session"

# The attacker's session: the probe runs on its worker's first read, then it serves.
"$CLIENT" "$srv_UNIX" >"$WORK/attacker.txt" 2>&1 || true
grep -q '^accepted: ' "$WORK/attacker.txt" || failures+=("the probed session was not served: $(cat "$WORK/attacker.txt")")
attacker=$(worker_pid 2)
[ -n "$attacker" ] || fail "no worker pid for the probed session"
probe_lines "$attacker" | sed 's/^/-- /'
# Its siblings: the other session's worker and the services process.
services=$(services_of "$srv_PID")
[ -n "$services" ] || fail "the server has no services process"
grep -q "worker-probe\\[$attacker\\]: done (2 sibling(s))" "$srv_LOG" ||
    failures+=("the probe did not find the sibling worker and the services process")

for who in listener "sibling $sibling" "sibling $services"; do
    pid=$srv_PID
    [ "$who" = listener ] || pid=${who#sibling }
    expect_refused "$attacker" "open $who memory read-write /proc/$pid/mem" "open $who environment /proc/$pid/environ" \
        "ptrace($who)" "kill($who, 0)" "sched_setaffinity($who)" "setpriority($who)"
done
if [ "$confined" = yes ]; then
    expect_refused "$attacker" "read $WORK/keys.psk" "read $WORK/guest-data.txt" "read /etc/passwd" \
        "create $WORK/probe-wrote-this"
    [ ! -e "$WORK/probe-wrote-this" ] || failures+=("the probe created $WORK/probe-wrote-this")
fi

# A key-less TLS client: its worker is sandboxed before the handshake's first byte.
port=${srv_TCP##*:}
perl -MIO::Socket::INET -e '$s = IO::Socket::INET->new("127.0.0.1:" . shift) or die; print $s "\x16\x03\x01\x00\x04junk"; sleep 3' "$port" &
SERVER_PIDS+=($!)
wait_for_line "$srv_LOG" "session 3 \\(.*\\): connected, worker pid" 10 >/dev/null || fail "the key-less client got no worker"
keyless=$(worker_pid 3)
expect_refused "$keyless" "open listener memory read-write /proc/$srv_PID/mem"
[ "$confined" = no ] || expect_refused "$keyless" "read $WORK/keys.psk"
note "key-less TLS worker $keyless: probed before its handshake"

# A guest with the key: once it is authenticated (the backends load then), its worker
# holds the key file's keys nowhere in its memory.
"$CLIENT" "$srv_TCP" --psk "$WORK/keys.psk" >"$WORK/keyed.txt" 2>&1 || true
grep -q '^accepted: ' "$WORK/keyed.txt" || failures+=("the guest with the key was not served: $(cat "$WORK/keyed.txt")")
keyed=$(worker_pid 4)
if [ -n "$keyed" ]; then
    wait_for_line "$srv_LOG" "worker-probe\\[$keyed\\]: key in memory" 10 >/dev/null || true
    expect_refused "$keyed" "key in memory after authentication"
    note "$(grep "worker-probe\\[$keyed\\]: key in memory" "$srv_LOG")"
else
    failures+=("no worker pid for the guest with the key")
fi

# --worker-user: a root server's workers as an unprivileged user.
if [ "$(id -u)" = 0 ] && nobody=$(id -u nobody 2>/dev/null); then
    start_server asuser --worker-user nobody
    grep -q "session workers: .*, as nobody (uid $nobody)" "$asuser_LOG" || failures+=("--worker-user is not in the start-up line")
    timeout 60 "$CLIENT" "$asuser_UNIX" --hold 5 >"$WORK/asuser.txt" 2>&1 &
    SERVER_PIDS+=($!)
    if wait_for_line "$WORK/asuser.txt" '^accepted: ' 20 >/dev/null; then
        worker=$(sed -n 's/.*session 1 (.*): connected, worker pid \([0-9]*\).*/\1/p' "$asuser_LOG")
        ids=$(sed -n 's/^Uid:\t//p' "/proc/$worker/status" | tr '\t' ' ')
        [ "$ids" = "$nobody $nobody $nobody $nobody" ] || failures+=("--worker-user nobody: worker $worker has Uid: $ids")
        note "--worker-user nobody: worker $worker serves with Uid: $ids"
    else
        failures+=("--worker-user nobody: the session was not accepted: $(cat "$WORK/asuser.txt")")
    fi
else
    note "skipped --worker-user (not root, or no user nobody)"
fi

file_attempts='^$'
[ "$confined" = yes ] || file_attempts='worker-probe\[[0-9]*\]: (read|create) '
if allowed=$(grep 'worker-probe\[[0-9]*\]: .*: ALLOWED' "$srv_LOG" | grep -vE "$file_attempts"); then
    failures+=("allowed: $allowed")
fi
finish "$srv_LOG"
