# ggml-remote-rtt refuses a device number or round-trip count that is not a whole
# number in range (atoi once took "x" for device 0) with exit 2 and a line naming
# the argument, before it connects anywhere; a good one goes on to the connection.
source "$(dirname "$0")/lib.sh"
RTT=$BUILD/bin/ggml-remote-rtt
nowhere=unix:$WORK/no-server.sock

# refused WHAT ARGS...: the rtt exits 2 and names WHAT and the value.
refused() {
    local what=$1 rc=0
    shift
    "$RTT" "$nowhere" "$@" >"$WORK/out" 2>&1 || rc=$?
    [ "$rc" = 2 ] || fail "ggml-remote-rtt $* exited with $rc, not 2: $(cat "$WORK/out")"
    grep -qF -- "$what must be a whole number" "$WORK/out" || fail "ggml-remote-rtt $*: no clear error: $(cat "$WORK/out")"
}

for bad in x 1x -1 "" 99999999999999999999 1024; do refused --device --device "$bad"; done
for bad in ten 5.5 99999999999; do refused ROUND_TRIPS "$bad"; done

rc=0
"$RTT" "$nowhere" 0 --device 1 >"$WORK/out" 2>&1 || rc=$?
[ "$rc" = 1 ] && grep -q "no-server.sock" "$WORK/out" ||
    fail "a good --device should get as far as connecting (exit 1, naming the socket): rc $rc: $(cat "$WORK/out")"
echo PASS
