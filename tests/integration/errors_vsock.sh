# errors_vsock: vsock endpoints fail clearly where they cannot work.
# Guest: GGML_REMOTE_SERVERS=vsock://ANY:PORT (the listening wildcard) and a
# vsock endpoint with a host name give one line that says why; the application
# runs on, on the CPU, with the local tokens. Server: a malformed vsock --listen
# exits at once naming the form; a vsock CID that is not this machine's exits
# with the kernel's reason and a hint (no vsock transport here, or a CID to
# replace by ANY); vsock://ANY:PORT either listens (a machine with vsock) or
# exits saying that this machine has no vsock transport. None of this connects
# anywhere: no vsock peer is needed.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/llama_helpers.sh"

tiny=$(model tiny)
N=16
run_local local "$tiny" "$N"

guest_case() {
    local name=$1 servers=$2 rc=0
    shift 2
    run_guest "$name" "$servers" "$tiny" "$N" || rc=$?
    [ "$rc" = 0 ] || { tail -n 20 "$WORK/$name.err" >&2; fail "GGML_REMOTE_SERVERS=$servers: exited with $rc"; }
    assert_one_plugin_line "$name" "$@"
    assert_not_offloaded "$name"
    assert_same_tokens local "$name"
}
guest_case guest-any vsock://ANY:5000 "vsock://ANY:5000" "ANY is for listening" "CID 2"
guest_case guest-host-name vsock://host:5000 "'vsock://host:5000'" "CID must be a number" "vsock://CID:PORT"

expect_server_refusal listen-port-too-big "invalid endpoint 'vsock://ANY:4294967295'" "port must be a number" -- \
    --listen vsock://ANY:4294967295
expect_server_refusal listen-signed-cid "invalid endpoint 'vsock://-1:5000'" "CID must be a number" -- \
    --listen vsock://-1:5000
# CID 4294967294 is nobody's: a VM's own CID is small, a host's is 2.
expect_server_refusal listen-foreign-cid "listen vsock://4294967294:[0-9]+: " \
    "not this machine's: listen on vsock://ANY:PORT|no vsock transport here" -- \
    --listen "vsock://4294967294:$((40000 + RANDOM % 20000))"

# vsock://ANY: a listener on a machine with vsock; a clear refusal elsewhere.
port=$((40000 + RANDOM % 20000))
"$SERVER_BIN" --listen "vsock://ANY:$port" >"$WORK/any.log" 2>&1 &
SERVER_PIDS+=($!)
line=$(wait_for_line "$WORK/any.log" "listening on vsock://ANY:$port|listen vsock://ANY:$port: " 10) ||
    { cat "$WORK/any.log" >&2; fail "--listen vsock://ANY:$port: neither listening nor an error in 10 s"; }
if [[ $line == *"listen vsock://"* ]]; then
    grep -qE "no vsock transport here|Address already in use" "$WORK/any.log" ||
        { cat "$WORK/any.log" >&2; fail "--listen vsock://ANY:$port failed without saying why"; }
    wait "${SERVER_PIDS[-1]}" && fail "--listen vsock://ANY:$port failed but exited 0"
fi
note "--listen vsock://ANY:$port: $line"
echo PASS
