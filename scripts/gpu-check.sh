#!/usr/bin/env bash
# gpu-check: the whole ggml-remote check on a machine with a GPU, in one go.
#   builds the project (make build: the Debian sid sysroot, then the tree), lists the
#   host devices (ggml-remote-server --list-devices), runs a test-backend-ops subset
#   on REMOTE0 served by the GPU, compares llama-simple's tokens local on the GPU
#   with the same run through the server over unix, shm and tcp, and runs
#   llama-bench local against remote (shm, tcp). Everything is written as JSON under
#   GPU_CHECK_OUT (default build/gpu-check/), with summary.json and summary.txt.
#
# The GPU: Vulkan on the vendor's driver. The sysroot has ggml's Vulkan backend and
#   the loader, not the vendor's driver, which must match the host's kernel module:
#   the script copies the host's NVIDIA Vulkan ICD (nvidia_icd.json from
#   /usr/share/vulkan/icd.d or /etc/vulkan/icd.d) and the libnvidia-*/libGLX_nvidia
#   libraries it needs into GPU_CHECK_OUT/driver/ (inside the repository, so the
#   chroot sees it at the same path), points the ICD's library_path there and runs
#   everything with VK_DRIVER_FILES and LD_LIBRARY_PATH set to it (/dev is bound
#   into the chroot already). Without a vendor ICD it stops, unless
#   GPU_CHECK_ALLOW_LAVAPIPE=1, which uses Mesa's lavapipe (a CPU) and says so.
# CUDA: Debian sid packages ggml's CUDA backend for the same ggml 0.27 ABI
#   (libggml0-backend-cuda 0.27.0-1, in contrib; it needs libcublas12 and
#   libcudart12 from non-free and the host driver's libcuda.so.1), so no vendoring
#   would be needed. This script does not install it (about 1 GB, and a lent machine
#   may not reach the archive); with it installed in the sysroot, GPU_CHECK_DEVICE=
#   CUDA0 checks it (the host's libcuda.so.1 is staged beside the Vulkan driver).
#
# Needs: root (the sysroot's chroot), and Debian's archive the first time (make
#   build makes the sysroot; GGML_REMOTE_SYSROOT may name one made elsewhere). The
#   worker's sandbox lets the server read LD_LIBRARY_PATH and VK_DRIVER_FILES, so the
#   staged driver loads inside it. About 1.5 min here on lavapipe (2 busy cores).
# Environment: GPU_CHECK_OUT, GPU_CHECK_DEVICE (default: the first non-CPU device),
#   GPU_CHECK_ALLOW_LAVAPIPE=1, GPU_CHECK_SERVER_ARGS (e.g. --no-sandbox),
#   GPU_CHECK_TOKENS (32), GPU_CHECK_BENCH_PRESET (small; tiny on lavapipe).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=$(realpath -m "${GPU_CHECK_OUT:-$repo/build/gpu-check}")
PROMPT="Hello world"

note() { echo "gpu-check: $*" >&2; }
die() { note "$*"; exit 1; }

# ---- on the machine itself -----------------------------------------------------------

# The host's NVIDIA Vulkan ICD file, or nothing.
find_vendor_icd() {
    local dir
    for dir in /usr/share/vulkan/icd.d /etc/vulkan/icd.d; do
        compgen -G "$dir/nvidia*.json" | head -n1 && return 0
    done
    return 0
}

# Copies the host's NVIDIA user-space driver into OUT/driver and writes an ICD
# file that names it by absolute path. Prints the ICD file's path, or nothing.
stage_vendor_driver() {
    local icd library dir
    icd=$(find_vendor_icd)
    dir=$OUT/driver
    mkdir -p "$dir"
    # CUDA's driver library too, for a CUDA backend installed in the sysroot.
    cp -L /usr/lib/x86_64-linux-gnu/libcuda.so.1 "$dir/" 2>/dev/null || true
    [ -n "$icd" ] || return 0
    library=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["ICD"]["library_path"])' "$icd")
    library=$(ldconfig -p | awk -v lib="$(basename "$library")" '$1 == lib { print $NF; exit }')
    [ -n "$library" ] || { note "the ICD $icd names a library ldconfig does not know"; return 0; }
    cp -L "$library" "$dir/"
    cp -L "$(dirname "$library")"/libnvidia-*.so.* "$dir/" 2>/dev/null || true
    python3 - "$icd" "$dir/$(basename "$library")" "$dir/nvidia_icd.json" <<'EOF'
import json, sys
icd = json.load(open(sys.argv[1]))
icd["ICD"]["library_path"] = sys.argv[2]
json.dump(icd, open(sys.argv[3], "w"), indent=2)
EOF
    echo "$dir/nvidia_icd.json"
}

host_phase() {
    mkdir -p "$OUT"
    rm -f "$OUT"/*.json "$OUT"/*.txt "$OUT"/*.log
    note "building (make build)"
    (cd "$repo" && nice make build) >"$OUT/build.log" 2>&1 || die "make build failed: see $OUT/build.log"
    local icd
    icd=$(stage_vendor_driver)
    [ -n "$icd" ] && note "vendor Vulkan driver staged: $icd"
    exec "$repo/scripts/in-sysroot" env GPU_CHECK_OUT="$OUT" GPU_CHECK_ICD="$icd" \
        bash "$repo/scripts/gpu-check.sh" --inside
}

# ---- inside the sysroot --------------------------------------------------------------

# Sets DRIVER (nvidia|lavapipe|other) and the environment every run shares
# (HOST_ENV: what sees the GPU; GUEST_ENV: what sees only the server).
choose_driver() {
    HOST_ENV=(LD_LIBRARY_PATH="$OUT/driver${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
    # A guest must not find the GPU itself: llama.cpp would split layers onto it.
    GUEST_ENV=(VK_LOADER_DRIVERS_DISABLE='*' CUDA_VISIBLE_DEVICES=)
    if [ -n "${GPU_CHECK_ICD:-}" ]; then
        DRIVER=nvidia
        HOST_ENV+=(VK_DRIVER_FILES="$GPU_CHECK_ICD" VK_ICD_FILENAMES="$GPU_CHECK_ICD")
    elif [ "${GPU_CHECK_ALLOW_LAVAPIPE:-}" = 1 ]; then
        DRIVER=lavapipe
        note "no vendor Vulkan driver: using lavapipe (Mesa's Vulkan on the CPU), figures are not a GPU's"
        HOST_ENV+=(GGML_VK_VISIBLE_DEVICES=0)
    else
        die "no vendor Vulkan driver (nvidia_icd.json) on this host; GPU_CHECK_ALLOW_LAVAPIPE=1 runs on lavapipe"
    fi
}

server_bin() { echo "$repo/build/bin/ggml-remote-server"; }

# Writes devices.json from --list-devices and sets DEVICE (GPU_CHECK_DEVICE, or
# the first device that is not the CPU).
list_devices() {
    env "${HOST_ENV[@]}" "$(server_bin)" --list-devices >"$OUT/devices.txt" 2>"$OUT/devices.log" ||
        die "--list-devices failed: see $OUT/devices.log"
    python3 - "$OUT/devices.txt" >"$OUT/devices.json" <<'EOF'
import json, re, sys
devices = []
for line in open(sys.argv[1]):
    m = re.match(r"\s+(\S+): (.*) \((\d+) MiB, (\d+) MiB free\)$", line)
    if m:
        devices.append({"name": m[1], "description": m[2], "memory_mib": int(m[3]), "free_mib": int(m[4])})
json.dump(devices, sys.stdout, indent=2)
EOF
    DEVICE=${GPU_CHECK_DEVICE:-$(python3 -c 'import json,sys
print(next((d["name"] for d in json.load(open(sys.argv[1])) if d["name"] != "CPU"), ""))' "$OUT/devices.json")}
    [ -n "$DEVICE" ] || die "the server lists no device besides the CPU: see $OUT/devices.txt"
    note "device: $(grep " $DEVICE: " "$OUT/devices.txt" | sed 's/^ *//')"
}

# Starts the server on DEVICE: unix socket and a loopback TCP port (UNIX_EP, TCP_EP).
start_server() {
    local sock=$WORK/srv.sock log=$OUT/server.log port=""
    # shellcheck disable=SC2086 # GPU_CHECK_SERVER_ARGS is a list of flags
    env "${HOST_ENV[@]}" "$(server_bin)" -d "$DEVICE" --listen "unix:$sock" --listen tcp://127.0.0.1:0 \
        ${GPU_CHECK_SERVER_ARGS:-} >"$log" 2>&1 &
    SERVER_PID=$!
    for _ in $(seq 100); do
        port=$(sed -n 's|.*listening on tcp://127.0.0.1:\([0-9]*\).*|\1|p' "$log" | head -n1)
        [ -n "$port" ] && [ -S "$sock" ] && break
        kill -0 "$SERVER_PID" 2>/dev/null || die "the server exited at start-up: see $log"
        sleep 0.1
    done
    [ -n "$port" ] || die "the server did not start listening: see $log"
    UNIX_EP=unix:$sock SHM_EP=shm:$sock TCP_EP=tcp://127.0.0.1:$port
}

# as_guest ENDPOINT CMD...: CMD with the plugin, seeing only the server's devices.
as_guest() {
    local endpoint=$1; shift
    env "${GUEST_ENV[@]}" GGML_BACKEND_PATH="$repo/build/lib/libggml-remote.so" GGML_REMOTE_SERVERS="$endpoint" "$@"
}
as_local() { env "${HOST_ENV[@]}" "$@"; }

model() {
    local path=$WORK/$1-f16.gguf
    [ -s "$path" ] || "$repo/build/bin/ggml-remote-synthetic-model" --preset "$1" --type f16 -o "$path" >/dev/null
    echo "$path"
}

# One test-backend-ops run on REMOTE0: "LABEL|OPS|PARAMS REGEX".
CONFORMANCE_RUNS=(
    'mul-mat|MUL_MAT|type_a=(f32|f16|q8_0|q4_0|q4_K),type_b=f32,m=16,n=(1|16),k=256,bs=\[1,1\],nr=\[1,1\]'
    'get-rows|GET_ROWS|^type=(f32|f16|q8_0),n=256,m=5,r=4,be1=(1|7),'
    'set-rows|SET_ROWS|type_dst=(f32|f16|q8_0),type_idx=i64'
    'cpy|CPY|type_src=(f32|f16),type_dst=(f32|f16|q8_0)'
    'soft-max|SOFT_MAX|ne=\[(16|32|64),'
    'norms|RMS_NORM,NORM|'
    'rope|ROPE|ne_a=\[128,32,2,1\]'
    'flash-attn|FLASH_ATTN_EXT|^hsk=64,hsv=64,nh=4,nr23=\[1,1\],kv=512,nb=(1|8),mask=1,sinks=0,max_bias=0.000000,logit_softcap=0.000000,prec=f32,type_K=f16'
    'glu|SWIGLU,GEGLU|'
    'binary|ADD,MUL|^type=f32,ne=\[(1|10|16|128),'
)

# Writes conformance.json: per run, the cases passed of all on REMOTE0.
run_conformance() {
    local entry label ops params log rows=()
    for entry in "${CONFORMANCE_RUNS[@]}"; do
        IFS='|' read -r label ops params <<<"$entry"
        log=$OUT/conformance-$label.log
        as_guest "$UNIX_EP" timeout 600 /usr/libexec/x86_64-linux-gnu/ggml/test-backend-ops test -b REMOTE0 \
            -o "$ops" ${params:+-p "$params"} >"$log" 2>&1 || true
        sed -i 's/\x1b\[[0-9;]*m//g' "$log"
        rows+=("$label $(sed -n 's|^ *\([0-9]*\)/\([0-9]*\) tests passed$|\1 \2|p' "$log" | tail -n1)")
        note "conformance $label: ${rows[-1]#* }"
    done
    printf '%s\n' "${rows[@]}" | python3 -c 'import json, sys
runs = []
for line in sys.stdin:
    f = line.split()
    runs.append({"run": f[0], "passed": int(f[1]) if len(f) > 2 else 0, "total": int(f[2]) if len(f) > 2 else 0})
json.dump(runs, sys.stdout, indent=2)' >"$OUT/conformance.json"
}

# Writes tokens.json: llama-simple's text local on DEVICE and through each transport.
run_tokens() {
    local tiny n=${GPU_CHECK_TOKENS:-32} name endpoint
    tiny=$(model tiny)
    as_local timeout 300 llama-simple -m "$tiny" -n "$n" -ngl 99 "$PROMPT" >"$OUT/tokens-local.txt" \
        2>"$OUT/tokens-local.log" || note "the local run failed: see $OUT/tokens-local.log"
    for name in unix shm tcp; do
        case $name in unix) endpoint=$UNIX_EP ;; shm) endpoint=$SHM_EP ;; tcp) endpoint=$TCP_EP ;; esac
        as_guest "$endpoint" timeout 300 llama-simple -m "$tiny" -n "$n" -ngl 99 "$PROMPT" \
            >"$OUT/tokens-$name.txt" 2>"$OUT/tokens-$name.log" || note "the $name run failed"
    done
    python3 - "$OUT" "$n" >"$OUT/tokens.json" <<'EOF'
import json, pathlib, sys
out, n = pathlib.Path(sys.argv[1]), int(sys.argv[2])
local = (out / "tokens-local.txt").read_text()
result = {"tokens": n, "local_chars": len(local), "transports": {}}
for name in ("unix", "shm", "tcp"):
    text = (out / f"tokens-{name}.txt").read_text()
    offloaded = "assigned to device REMOTE0" in (out / f"tokens-{name}.log").read_text()
    result["transports"][name] = {"same_as_local": bool(local) and text == local, "offloaded": offloaded}
json.dump(result, sys.stdout, indent=2)
EOF
}

# bench NAME DEVICE-FLAG CMD-PREFIX...: llama-bench as JSON into bench-NAME.json.
bench() {
    local name=$1 dev=$2; shift 2
    "$@" timeout 600 llama-bench -m "$BENCH_MODEL" -ngl 99 -dev "$dev" -p "$BENCH_PROMPT" -n "$BENCH_GEN" \
        -r 3 -o json >"$OUT/bench-$name.json" 2>"$OUT/bench-$name.log" || note "llama-bench $name failed"
}

run_bench() {
    local preset=${GPU_CHECK_BENCH_PRESET:-small}
    BENCH_PROMPT=256 BENCH_GEN=64
    if [ "$DRIVER" = lavapipe ]; then preset=${GPU_CHECK_BENCH_PRESET:-tiny} BENCH_PROMPT=32 BENCH_GEN=16; fi
    BENCH_MODEL=$(model "$preset")
    bench local "$DEVICE" as_local
    bench shm REMOTE0 as_guest "$SHM_EP"
    bench tcp REMOTE0 as_guest "$TCP_EP"
}

# summary.json and summary.txt from the other files.
write_summary() {
    python3 - "$OUT" "$DEVICE" "$DRIVER" >"$OUT/summary.json" <<'EOF'
import json, pathlib, sys
out, device, driver = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3]
load = lambda name: json.loads((out / name).read_text() or "null") if (out / name).exists() else None
def speeds(name):
    rows = load(f"bench-{name}.json") or []
    return {("pp" if r["n_prompt"] else "tg") + str(r["n_prompt"] or r["n_gen"]): r["avg_ts"] for r in rows}
bench = {name: speeds(name) for name in ("local", "shm", "tcp")}
ratios = {t: {k: round(v / bench["local"][k], 3) for k, v in bench[t].items() if bench["local"].get(k)}
          for t in ("shm", "tcp")}
conformance = load("conformance.json") or []
summary = {"device": device, "driver": driver,
           "devices": load("devices.json"),
           "conformance": {"passed": sum(r["passed"] for r in conformance),
                           "total": sum(r["total"] for r in conformance)},
           "tokens": load("tokens.json"), "bench_tokens_per_s": bench, "bench_ratio_to_local": ratios}
json.dump(summary, sys.stdout, indent=2)
EOF
    python3 - "$OUT/summary.json" >"$OUT/summary.txt" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
print(f"device {s['device']} ({s['driver']})")
print(f"conformance on REMOTE0: {s['conformance']['passed']}/{s['conformance']['total']} passed")
for name, t in (s["tokens"] or {}).get("transports", {}).items():
    print(f"tokens {name}: {'same as local' if t['same_as_local'] else 'DIFFERENT'}"
          f"{'' if t['offloaded'] else ' (NOT offloaded)'}")
for test, local in s["bench_tokens_per_s"]["local"].items():
    row = [f"{test}: local {local:.1f} t/s"]
    for t in ("shm", "tcp"):
        if test in s["bench_tokens_per_s"][t]:
            row.append(f"{t} {s['bench_tokens_per_s'][t][test]:.1f} ({s['bench_ratio_to_local'][t][test]:.2f}x)")
    print(", ".join(row))
EOF
    cat "$OUT/summary.txt"
}

inside_phase() {
    WORK=$(mktemp -d /tmp/gpu-check.XXXXXX)
    trap 'kill "${SERVER_PID:-}" 2>/dev/null || true; rm -rf "$WORK"' EXIT
    choose_driver
    list_devices
    start_server
    run_conformance
    run_tokens
    run_bench
    write_summary
    note "everything is in $OUT"
}

if [ "${1:-}" = --inside ]; then inside_phase; else host_phase; fi
