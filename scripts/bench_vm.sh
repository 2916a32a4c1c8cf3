#!/usr/bin/env bash
# make bench-vm: llama.cpp in the test VM (scripts/vm/run), side by side with the
# host: llama-bench's pp and tg and one model load (llama-completion -v), on
#   local      the host's own CPU, no VM (the reference of "x local")
#   vm-cpu     the VM's own CPU
#   vm-tcp     from the VM through our server over QEMU's user network
#   vm-vsock   from the VM through our server over virtio-vsock (vsock://2:PORT):
#              QEMU's vhost-user-vsock-pci, served by vhost-device-vsock, which
#              hands the connection to the server's unix socket UDS_PATH_PORT
#              (skipped, with a line, where vhost-device-vsock is missing)
#   vm-ivshmem from the VM through ivshmem: the server's region (BENCH_VM_REGION_SIZE,
#              default 1G) mapped into the VM as an ivshmem-plain PCI device
#   vm-rpc     from the VM through ggml-rpc-server on the host
# Each round boots one VM that runs every VM variant, in an order rotated from
# round to round. Prints a table and writes BUILD/bench-vm/results.json.
#   BENCH_VM_MODELS="small mid"  BENCH_VM_REPS=3  BENCH_VM_RUNS=1  BENCH_VM_PP=32  BENCH_VM_TG=16
#   BENCH_VM_VARIANTS="vm-cpu vm-tcp vm-vsock vm-ivshmem vm-rpc" (the VM's; vm-cpu takes most of the time)
#   VHOST_DEVICE_VSOCK=PATH (default: vhost-device-vsock on PATH)
#   VM_CPUS=2 (the VM's vCPUs and every variant's threads)  VM_MEMORY=3G
# Under TCG (no KVM) the VM's own CPU is many times slower than the host's: the
# defaults keep a round of the mid model to minutes.
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
models=${BENCH_VM_MODELS:-small mid}
reps=${BENCH_VM_REPS:-3}
runs=${BENCH_VM_RUNS:-1}
pp=${BENCH_VM_PP:-32}
tg=${BENCH_VM_TG:-16}
export VM_CPUS=${VM_CPUS:-2} VM_MEMORY=${VM_MEMORY:-3G}
threads=$VM_CPUS
rpc_server=/usr/libexec/x86_64-linux-gnu/llama/bin/ggml-rpc-server
out=$build/bench-vm
mkdir -p "$out" "$build/models"
raw=$out/raw.jsonl
: >"$raw"
# In /tmp, which the VM sees read-only (--share), with its job folders inside.
work=$(mktemp -d /tmp/ggml-remote-bench-vm.XXXXXX)
# The ivshmem region: a memory file (sparse) that holds the mid model's weights too.
region=/dev/shm/ggml-remote-bench-vm.$$
region_size=${BENCH_VM_REGION_SIZE:-1G}
# vsock: the guest's port, and the unix socket vhost-device-vsock forwards it to.
vsock_port=50053
vsock_uds=$work/vm.vsock
vsock_backend=${VHOST_DEVICE_VSOCK:-$(command -v vhost-device-vsock || true)}
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work" "$region"
}
trap cleanup EXIT
# shellcheck source=bench_lib.sh
source "$here/bench_lib.sh"  # free_port, wait_for, ensure_model, cache_as_read, run_load, load_seconds

port=$(free_port)
"$build/bin/ggml-remote-server" --listen "tcp://127.0.0.1:$port" --listen "ivshmem:$region,size=$region_size" \
    --listen "unix:${vsock_uds}_$vsock_port" --threads "$threads" >"$work/remote.log" 2>&1 &
pids+=($!)
rpc_port=$(free_port)
"$rpc_server" -H 127.0.0.1 -p "$rpc_port" -t "$threads" >"$work/rpc.log" 2>&1 &
pids+=($!)
wait_for tcp_open "$port"
wait_for tcp_open "$rpc_port"
wait_for test -s "$region"

# The VM's side of a round: MODEL, then the variants in this round's order. Each
# leaves VARIANT.json (llama-bench) and VARIANT-load.log (llama-completion -v) in
# the job folder. QEMU's user network takes 10.0.2.2 to the host's loopback.
cat >"$work/in-vm.sh" <<EOF
model=\$1; shift
for variant in "\$@"; do
    case \$variant in
        vm-cpu) runner=(env); offload=() ;;
        vm-tcp) runner=(env GGML_BACKEND_PATH=$build/lib/libggml-remote.so GGML_REMOTE_SERVERS=tcp://10.0.2.2:$port)
                offload=(-ngl 99) ;;
        vm-vsock) runner=(env GGML_BACKEND_PATH=$build/lib/libggml-remote.so GGML_REMOTE_SERVERS=vsock://2:$vsock_port)
                offload=(-ngl 99) ;;
        vm-ivshmem) runner=(env GGML_BACKEND_PATH=$build/lib/libggml-remote.so GGML_REMOTE_SERVERS=ivshmem:)
                offload=(-ngl 99) ;;
        vm-rpc) runner=(env); offload=(--rpc 10.0.2.2:$rpc_port -ngl 99) ;;
    esac
    "\${runner[@]}" llama-bench -m "\$model" -p $pp -n $tg -r $runs -t $threads -o json "\${offload[@]}" \\
        >"\$VM_JOB/\$variant.json" 2>"\$VM_JOB/\$variant.err" || echo "llama-bench failed: \$variant" >&2
    "\${runner[@]}" llama-completion -m "\$model" -n 1 -p Hi -no-cnv --no-warmup -t 1 -v "\${offload[@]}" \\
        </dev/null >/dev/null 2>"\$VM_JOB/\$variant-load.log" || echo "llama-completion failed: \$variant" >&2
done
EOF

# local_round MODEL NAME REP: the host's own figures, no VM.
local_round() {
    echo "bench-vm: $2 local (round $3 of $reps)" >&2
    if llama-bench -m "$1" -p "$pp" -n "$tg" -r "$runs" -t "$threads" -o json >"$work/local.json" 2>"$work/local.err"; then
        python3 "$here/bench_report.py" record "$2" local "$3" "$(run_load "$1" env)" vm <"$work/local.json" >>"$raw"
    else
        echo "bench-vm: local llama-bench failed:" >&2; tail -5 "$work/local.err" >&2
    fi
}

# vm_round MODEL NAME REP: one VM runs every VM variant.
read -r -a vm_variants <<<"${BENCH_VM_VARIANTS:-vm-cpu vm-tcp vm-vsock vm-ivshmem vm-rpc}"
if [[ " ${vm_variants[*]} " == *" vm-vsock "* ]] && [ ! -x "$vsock_backend" ]; then
    echo "bench-vm: no vhost-device-vsock (Debian package vhost-device-vsock): vm-vsock is not measured" >&2
    read -r -a vm_variants <<<"$(printf '%s\n' "${vm_variants[@]}" | grep -vx vm-vsock | paste -sd ' ')"
fi

# vsock_backend_start JOB: a vhost-device-vsock for this round's VM (CID 3); sets
# vsock_args to scripts/vm/run's option for it. Nothing without vm-vsock.
vsock_args=()
vsock_pid=""
vsock_backend_start() {
    vsock_args=()
    [[ " ${vm_variants[*]} " == *" vm-vsock "* ]] || return 0
    "$vsock_backend" --guest-cid 3 --socket "$1.vhost.sock" --uds-path "$vsock_uds" >"$1.vhost.log" 2>&1 &
    vsock_pid=$!
    pids+=("$vsock_pid")
    wait_for test -S "$1.vhost.sock"
    vsock_args=(--vsock "$1.vhost.sock")
}

vm_round() {
    local shift_by=$((($3 - 1) % ${#vm_variants[@]})) job=$work/job-$2-$3 variant
    local order=("${vm_variants[@]:shift_by}" "${vm_variants[@]:0:shift_by}")
    echo "bench-vm: $2 ${order[*]} in one VM (round $3 of $reps)" >&2
    vsock_backend_start "$job"
    "$here/vm/run" --build "$build" --share "$work" --job "$job" --timeout 3000 "${vsock_args[@]}" --qemu \
        -object "memory-backend-file,id=ivshmem0,share=on,mem-path=$region,size=$region_size" \
        -device ivshmem-plain,memdev=ivshmem0 -- \
        bash "$work/in-vm.sh" "$1" "${order[@]}" >&2 || echo "bench-vm: the VM run failed" >&2
    [ -z "$vsock_pid" ] || { kill "$vsock_pid" 2>/dev/null || true; wait "$vsock_pid" 2>/dev/null || true; vsock_pid=""; }
    [ ! -f "$job/timing" ] || echo "bench-vm: $(cat "$job/timing")" >&2
    for variant in "${order[@]}"; do
        [ -s "$job/$variant.json" ] || { echo "bench-vm: no figures for $variant" >&2; continue; }
        python3 "$here/bench_report.py" record "$2" "$variant" "$3" "$(load_seconds "$job/$variant-load.log")" vm \
            <"$job/$variant.json" >>"$raw"
    done
}

for name in $models; do
    model=$(ensure_model "$name")
    cache_as_read "$model"
    for rep in $(seq "$reps"); do
        local_round "$model" "$name" "$rep"
        vm_round "$model" "$name" "$rep"
    done
done
python3 "$here/bench_report.py" report "$out/results.json" <"$raw"
