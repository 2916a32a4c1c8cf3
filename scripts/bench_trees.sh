#!/usr/bin/env bash
# bench_trees.sh BASE_BUILD NEW_BUILD: two builds of the project (before and after a
# change) side by side, in paired rounds: each round runs llama-bench through each
# build's own server and plugin, over shm and over TCP, the two builds back to back
# in an order that alternates from round to round, and prints pp and tg of both and
# their ratio (new / base). A refactor should leave the ratios at 1 within the spread.
#   ROUNDS=6  MODELS="tiny small"  PP=128  TG=64
set -euo pipefail
base=$(cd "$1" && pwd)
new=$(cd "$2" && pwd)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=$new
# shellcheck source=bench_lib.sh
source "$here/bench_lib.sh"
work=$(mktemp -d /tmp/ggml-remote-trees.XXXXXX)
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"' EXIT

start_server() {  # start_server NAME BUILD: its server on unix:$work/NAME.sock and a TCP port
    local port
    port=$(free_port)
    "$2/bin/ggml-remote-server" --listen "unix:$work/$1.sock" --listen "tcp://127.0.0.1:$port" --threads 2 \
        >"$work/$1.log" 2>&1 &
    pids+=($!)
    wait_for test -S "$work/$1.sock"
    echo "$port"
}
declare -A port
port[base]=$(start_server base "$base")
port[new]=$(start_server new "$new")
declare -A tree=([base]=$base [new]=$new)

figures() {  # figures TREE TRANSPORT MODEL: "pp tg" of one llama-bench run
    local servers="shm:$work/$1.sock"
    [ "$2" = tcp ] && servers="tcp://127.0.0.1:${port[$1]}"
    GGML_BACKEND_PATH="${tree[$1]}/lib/libggml-remote.so" GGML_REMOTE_SERVERS="$servers" \
        llama-bench -m "$3" -p "${PP:-128}" -n "${TG:-64}" -r 2 -t 2 -ngl 99 -o json 2>/dev/null |
        python3 -c 'import json,sys; r=json.load(sys.stdin); print(" ".join("%.1f" % x["avg_ts"] for x in r))'
}

echo "model transport round: base pp tg | new pp tg | new/base pp tg"
for preset in ${MODELS:-tiny small}; do
    model=$(ensure_model "$preset")
    for round in $(seq "${ROUNDS:-6}"); do
        for transport in shm tcp; do
            order=(base new)
            [ $((round % 2)) = 0 ] && order=(new base)
            declare -A got=()
            for which in "${order[@]}"; do got[$which]=$(figures "$which" "$transport" "$model"); done
            python3 - "$preset" "$transport" "$round" "${got[base]}" "${got[new]}" <<'PY'
import sys
preset, transport, rnd, base, new = sys.argv[1:]
b, n = [float(x) for x in base.split()], [float(x) for x in new.split()]
print(f"{preset} {transport} {rnd}: {b[0]:.1f} {b[1]:.1f} | {n[0]:.1f} {n[1]:.1f} | {n[0]/b[0]:.3f} {n[1]/b[1]:.3f}")
PY
        done
    done
done | tee "$work/rows"
python3 - "$work/rows" <<'PY'
import statistics, sys, collections
ratios = collections.defaultdict(lambda: ([], []))
for line in open(sys.argv[1]):
    if "|" not in line: continue
    key = " ".join(line.split()[:2])
    pp, tg = (float(x) for x in line.split("|")[2].split())
    ratios[key][0].append(pp); ratios[key][1].append(tg)
print("\nnew/base, median [min-max] of the rounds")
for key, (pp, tg) in ratios.items():
    print(f"{key:12s} pp {statistics.median(pp):.3f} [{min(pp):.3f}-{max(pp):.3f}]"
          f"  tg {statistics.median(tg):.3f} [{min(tg):.3f}-{max(tg):.3f}]")
PY
