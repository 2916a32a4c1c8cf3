# vm_boot: scripts/vm/run boots the test VM and runs one command in it, which sees
# what the tests need: Debian's kernel from the sysroot; a read-only root with
# writable /tmp; the job folder read-write at the host's path; the host's loopback
# at 10.0.2.2 over QEMU's user network; the PCI devices given as extra QEMU
# arguments (an ivshmem-plain device over a host memory file, whose BAR2 the
# guest writes through sysfs and the host reads back). The command's stdout,
# stderr and exit status come back apart. One boot, timed.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/llama_helpers.sh"  # wait_for_line
source "$(dirname "$0")/vm_lib.sh"
vm_require

# A listener on the host's loopback that greets one visitor.
python3 -c '
import socket, sys
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(1)
print(s.getsockname()[1], flush=True)
s.settimeout(600)
c, _ = s.accept(); c.sendall(b"hello from the host\n"); c.close()
' >"$WORK/listener.port" &
SERVER_PIDS+=("$!")
wait_for_line "$WORK/listener.port" '^[0-9]+$' 10 >/dev/null || fail "the host listener did not start"
port=$(cat "$WORK/listener.port")

region=/dev/shm/ggml-remote-vm-boot-$$
truncate -s 1M "$region"
trap 'rm -f "$region"; stop_guests_then_cleanup' EXIT

cat >"$WORK/inside.sh" <<'INSIDE'
port=$1
echo "kernel $(uname -r)"
echo "to stderr" >&2
touch /usr/vm-boot-probe 2>/dev/null && echo "root writable"
touch /tmp/probe && echo "tmp writable"
echo "written in the VM" >"$VM_JOB/from-guest"
ip -4 addr show dev eth0 | sed -n 's/.*inet \([0-9.]*\).*/eth0 \1/p'
read -r greeting </dev/tcp/10.0.2.2/"$port" && echo "host says: $greeting"
for dev in /sys/bus/pci/devices/*; do
    [ "$(cat "$dev/vendor"):$(cat "$dev/device")" = 0x1af4:0x1110 ] || continue
    echo 1 >"$dev/enable"
    python3 -c 'import mmap, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_SYNC)
m = mmap.mmap(fd, 4096)
m[:13] = b"ivshmem works"
m.flush()' "$dev/resource2" && echo "ivshmem at $(basename "$dev")"
done
exit 7
INSIDE

rc=0
vm_ivshmem_args "$region" 1M
vm_run boot --qemu "${VM_IVSHMEM_ARGS[@]}" -- bash "$WORK/inside.sh" "$port" || rc=$?
out=$WORK/boot.out
failures=()
[ "$rc" = 7 ] || failures+=("the VM returned $rc, not the command's 7: $(tail -n 20 "$WORK/boot.err")")
kernel=$(basename "$(ls /boot/vmlinuz-* | sort -V | tail -n 1)")
grep -qx "kernel ${kernel#vmlinuz-}" "$out" || failures+=("not the sysroot's kernel ${kernel#vmlinuz-}")
grep -qx "to stderr" "$WORK/boot.err" || failures+=("the command's stderr did not come back")
! grep -q "to stderr" "$out" || failures+=("the command's stderr came out on stdout")
! grep -q "root writable" "$out" || failures+=("the VM could write the sysroot's /usr")
grep -qx "tmp writable" "$out" || failures+=("/tmp is not writable in the VM")
[ "$(cat "$WORK/boot.vm/from-guest" 2>/dev/null)" = "written in the VM" ] ||
    failures+=("the job folder's file written in the VM is not on the host")
grep -qx "eth0 10.0.2.15" "$out" || failures+=("eth0 is not 10.0.2.15")
grep -qx "host says: hello from the host" "$out" || failures+=("the VM did not reach the host's loopback at 10.0.2.2")
grep -q "^ivshmem at " "$out" || failures+=("the VM did not find or map the ivshmem device from the extra QEMU arguments")
[ "$(head -c 13 "$region")" = "ivshmem works" ] || failures+=("the host file does not hold what the VM wrote to BAR2")
boot=$(cat "$WORK/boot.vm/boot-seconds" 2>/dev/null || echo 999)
[ "${boot%.*}" -lt 60 ] || failures+=("the command started only after $boot s of guest uptime")
if [ "${#failures[@]}" -gt 0 ]; then
    echo "--- stdout:" >&2; cat "$out" >&2
    echo "--- console:" >&2; tail -n 20 "$WORK/boot.vm/console.log" >&2
    printf 'FAIL: %s\n' "${failures[@]}" >&2
    fail "${#failures[@]} expectation(s) not met"
fi
echo PASS
