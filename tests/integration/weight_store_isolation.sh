# weight_store_isolation (issue 25, class 3): code running inside a session worker
# (the worker_probe preload) has no access to --weight-store's directory: it cannot
# read another tenant's entry, open it for writing (to truncate it under a worker
# that maps it), or plant a file beside it or in the directory itself. Entries reach
# workers only from the store's owner in the listener, as read-only descriptors.
# Probed: a unix guest's worker, and a key-less TLS connection's worker (probed
# before its handshake, when it could still claim any identity).
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/llama_helpers.sh"

CLIENT=${1:?usage: weight_store_isolation.sh HANDSHAKE_CLIENT PROBE_LIBRARY}
PROBE=${2:?usage: weight_store_isolation.sh HANDSHAKE_CLIENT PROBE_LIBRARY}
STORE=$WORK/store

psktool -u guest -p "$WORK/keys.psk" >/dev/null
tenant=$STORE/t-0123456789abcdef01234567
entry=$tenant/0123456789abcdef0123456789abcdef
mkdir -p "$tenant"
echo "another tenant's weights" >"$entry"
GGML_REMOTE_PROBE_FILES="$entry" GGML_REMOTE_PROBE_WRITE="$entry:$tenant/planted:$STORE/planted" \
    LD_PRELOAD=$PROBE start_server srv --tls-psk "$WORK/keys.psk" --weight-store "$STORE"
grep -q 'session workers: .*files NOT confined' "$srv_LOG" && skip "this kernel has no Landlock"

failures=()
worker_pid() { sed -n "s/.*session $1 (.*): connected, worker pid \([0-9]*\).*/\1/p" "$srv_LOG"; }
# expect_refused PID: each attempt on the store in worker PID was made and refused.
expect_refused() {
    local pid=$1 what
    wait_for_line "$srv_LOG" "worker-probe\\[$pid\\]: done" 10 >/dev/null || {
        failures+=("worker $pid: the probe did not run")
        return
    }
    grep "worker-probe\\[$pid\\]: \(read\|create\)" "$srv_LOG" | sed 's/^.*worker-probe/-- worker-probe/'
    for what in "read $entry" "create $entry" "create $tenant/planted" "create $STORE/planted"; do
        grep -qF "worker-probe[$pid]: $what: refused (" "$srv_LOG" ||
            failures+=("worker $pid: $what: $(grep -F "worker-probe[$pid]: $what:" "$srv_LOG" || echo 'not attempted')")
    done
}

# A unix guest: probed on its worker's first read, then served.
"$CLIENT" "$srv_UNIX" >"$WORK/unix.txt" 2>&1 || true
grep -q '^accepted: ' "$WORK/unix.txt" || failures+=("the probed session was not served: $(cat "$WORK/unix.txt")")
expect_refused "$(worker_pid 1)"

# A key-less TLS connection: its worker holds the store's channel before the handshake.
port=${srv_TCP##*:}
perl -MIO::Socket::INET -e '$s = IO::Socket::INET->new("127.0.0.1:" . shift) or die; print $s "\x16\x03\x01\x00\x04junk"; sleep 3' "$port" &
SERVER_PIDS+=($!)
wait_for_line "$srv_LOG" "session 2 \\(.*\\): connected, worker pid" 10 >/dev/null || fail "the key-less client got no worker"
expect_refused "$(worker_pid 2)"

for planted in "$tenant/planted" "$STORE/planted"; do
    [ ! -e "$planted" ] || failures+=("a worker created $planted")
done
[ "$(cat "$entry")" = "another tenant's weights" ] || failures+=("the entry changed: $(cat "$entry")")
finish "$srv_LOG"
