# vm_vsock_{llama,loopback}: guests over vsock inside the test VM; llama-simple
# gives the same greedy tokens of the tiny model as the host's local run, every
# layer on REMOTE0, and the server's session ran the graph computes.
# llama: the guest uses GGML_REMOTE_SERVERS=vsock://2:PORT. QEMU's
#   vhost-user-vsock-pci device is served by vhost-device-vsock, which hands the
#   connection to port PORT to the host's unix socket UDS_PATH_PORT: the host's
#   server listens there with no vsock code of its own, as for Firecracker or
#   Cloud Hypervisor. The session came from vhost-device-vsock's process.
# loopback: the server's own AF_VSOCK listener. Inside the VM a server listens
#   on vsock://ANY:PORT and the guest connects to vsock://1:PORT (the kernel's
#   loopback transport): the session's peer is a vsock address, counted by CID.
# usage: vm_vsock.sh llama|loopback
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/llama_helpers.sh"
source "$(dirname "$0")/vm_lib.sh"
mode=${1:?usage: vm_vsock.sh llama|loopback}
case $mode in llama | loopback) ;; *) fail "unknown mode '$mode'" ;; esac
vm_require

PORT=50053
path=$(model tiny f16)

if [ "$mode" = llama ]; then
    N=32
    uds=$WORK/vm.vsock
    start_server srv --listen "unix:${uds}_$PORT"
    vm_vsock_backend "$uds"
    run_local local "$path" "$N"
    session=$(($(sessions_connected "$srv_LOG") + 1))
    vm_run_ok vm --vsock "$VM_VSOCK_SOCKET" -- env GGML_BACKEND_PATH="$PLUGIN" \
        GGML_REMOTE_SERVERS="vsock://2:$PORT" llama-simple -m "$path" -n "$N" -ngl 99 "$PROMPT"
    log=$srv_LOG
    grep -q "session $session (unix:${uds}_$PORT pid $VM_VSOCK_PID " "$log" ||
        fail "session $session did not come from vhost-device-vsock (pid $VM_VSOCK_PID): $(grep "session $session " "$log")"
else
    # Computed by the VM's own emulated CPU: fewer tokens.
    N=8
    run_local local "$path" "$N"
    session=1
    cat >"$WORK/in-vm.sh" <<EOF
"$SERVER_BIN" --listen vsock://ANY:$PORT --threads 1 >server.log 2>&1 &
for i in \$(seq 300); do grep -q 'listening on vsock://ANY:$PORT' server.log && break; sleep 0.1; done
GGML_BACKEND_PATH="$PLUGIN" GGML_REMOTE_SERVERS=vsock://1:$PORT llama-simple -m "$path" -n $N -ngl 99 "$PROMPT"
status=\$?
# The worker logs the session's end after the guest has gone.
for i in \$(seq 100); do grep -q 'disconnected after' server.log && break; sleep 0.1; done
kill %1
wait
exit \$status
EOF
    vm_run_ok vm -- bash "$WORK/in-vm.sh"
    log=$WORK/vm.vm/server.log
    grep -q "session $session (vsock://1:[0-9]*)" "$log" ||
        fail "session $session did not come over vsock: $(cat "$log")"
fi
assert_generated vm
assert_offloaded vm
assert_same_tokens local vm
[ -z "$(plugin_lines vm)" ] || fail "in the VM, the plugin reported trouble: $(plugin_lines vm)"
assert_session_computed "$log" "$session" $((N - 1))
note "$mode: in the VM over vsock: same $N tokens as the host's CPU: $(head -c 80 "$WORK/vm.out")..."
echo PASS
