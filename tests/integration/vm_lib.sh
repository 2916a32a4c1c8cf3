# Helpers for the tests that run a guest inside a QEMU virtual machine (sourced
# after lib.sh). The VM is scripts/vm/run's: Debian's kernel, the sysroot's /usr
# and /etc over 9p, QEMU's user network (the host's loopback is 10.0.2.2).
VM_RUN=${GGML_REMOTE_SOURCE:?run through ctest}/scripts/vm/run
VM_TIMEOUT=${VM_TIMEOUT:-300}  # seconds one VM may run, boot included

# vm_require: skips the test where QEMU cannot run at all (no QEMU, no kernel).
vm_require() {
    command -v qemu-system-x86_64 >/dev/null || skip "no qemu-system-x86_64 (Debian package qemu-system-x86)"
    local kernel
    kernel=$(ls /boot/vmlinuz-* 2>/dev/null | head -n 1 || true)
    [ -n "$kernel" ] || skip "no kernel in /boot (Debian package linux-image-amd64)"
    [ -r "$kernel" ] || skip "cannot read $kernel (the VM needs it)"
    command -v busybox >/dev/null || skip "no busybox for the VM's initramfs (Debian package busybox-static)"
}

# vm_run NAME [scripts/vm/run OPTIONS] [--qemu QEMU ARGS] -- COMMAND...: runs COMMAND
# in a fresh VM that sees $WORK read-only and its job folder $WORK/NAME.vm
# read-write. Output in $WORK/NAME.out and $WORK/NAME.err; returns COMMAND's status
# (scripts/vm/run's: 124 out of time, 125 the VM failed). Notes the boot time.
vm_run() {
    local name=$1 rc=0
    shift
    "$VM_RUN" --build "$BUILD" --share "$WORK" --job "$WORK/$name.vm" --timeout "$VM_TIMEOUT" "$@" \
        >"$WORK/$name.out" 2>"$WORK/$name.err" || rc=$?
    [ ! -f "$WORK/$name.vm/timing" ] || note "$name: $(cat "$WORK/$name.vm/timing")"
    return "$rc"
}

# vm_run_ok NAME ...: vm_run that must succeed.
vm_run_ok() {
    local name=$1 rc=0
    vm_run "$@" || rc=$?
    if [ "$rc" != 0 ]; then
        tail -n 30 "$WORK/$name.err" >&2
        fail "$name: the command in the VM exited with $rc"
    fi
}

# vm_ivshmem_args PATH SIZE: sets VM_IVSHMEM_ARGS to the QEMU arguments that map the
# host memory file PATH (SIZE bytes, or e.g. 64M) into the VM as an ivshmem-plain
# PCI device (1af4:1110; the guest maps its BAR2 through sysfs, resource2):
#   vm_ivshmem_args /dev/shm/x 64M; vm_run NAME --qemu "${VM_IVSHMEM_ARGS[@]}" -- CMD...
vm_ivshmem_args() {
    VM_IVSHMEM_ARGS=(-object "memory-backend-file,id=ivshmem0,share=on,mem-path=$1,size=$2"
        -device ivshmem-plain,memdev=ivshmem0)
}

# vm_vsock_backend UDS_PATH: starts vhost-device-vsock (Debian's package of that
# name; VHOST_DEVICE_VSOCK names another binary) for one VM of CID 3. It hands the
# guest's connection to vsock port P to the host's unix socket UDS_PATH_P, as
# Firecracker and Cloud Hypervisor do. Sets VM_VSOCK_SOCKET (for vm_run's
# --vsock) and VM_VSOCK_PID; skips the test where the backend is missing.
vm_vsock_backend() {
    local backend=${VHOST_DEVICE_VSOCK:-$(command -v vhost-device-vsock || true)}
    [ -n "$backend" ] && [ -x "$backend" ] ||
        skip "no vhost-device-vsock (Debian package vhost-device-vsock; or set VHOST_DEVICE_VSOCK)"
    VM_VSOCK_SOCKET=$WORK/vhost-vsock.sock
    "$backend" --guest-cid 3 --socket "$VM_VSOCK_SOCKET" --uds-path "$1" >"$WORK/vhost-vsock.log" 2>&1 &
    VM_VSOCK_PID=$!
    SERVER_PIDS+=("$VM_VSOCK_PID")
    wait_for_socket "$VM_VSOCK_SOCKET" "$VM_VSOCK_PID" "$WORK/vhost-vsock.log" vhost-device-vsock
}
