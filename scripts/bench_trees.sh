#!/usr/bin/env bash
# bench_trees.sh BASE_BUILD NEW_BUILD: two builds of the project (before and after a
# change) side by side, in paired rounds: each round runs llama-bench through each
# build's own server and plugin, over shm and over TCP, the two builds back to back
# in an order that alternates from round to round, and prints pp and tg of both and
# their ratio (new / base). A refactor should leave the ratios at 1 within the spread.
# LOAD=1 adds the wall time of a one-token llama-simple before each llama-bench (the
# model's load through the server, weights crossing the transport).
#   ROUNDS=6  MODELS="tiny small"  (small-q4km, mid-q8: llama-quantize'd)  PP=128  TG=64  LOAD=0
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

figures() {  # figures TREE TRANSPORT MODEL: "pp tg" of one llama-bench run ("pp tg load" with LOAD=1)
    local servers="shm:$work/$1.sock" load=
    [ "$2" = tcp ] && servers="tcp://127.0.0.1:${port[$1]}"
    local plugin=(env GGML_BACKEND_PATH="${tree[$1]}/lib/libggml-remote.so" GGML_REMOTE_SERVERS="$servers")
    if [ "${LOAD:-0}" = 1 ]; then
        local start=$(date +%s%N)
        "${plugin[@]}" llama-simple -m "$3" -n 1 -ngl 99 "Hello" >/dev/null 2>&1
        load=$(python3 -c "print('%.3f' % (($(date +%s%N) - $start) / 1e9))")
    fi
    "${plugin[@]}" llama-bench -m "$3" -p "${PP:-128}" -n "${TG:-64}" -r 2 -t 2 -ngl 99 -o json 2>/dev/null |
        python3 -c 'import json,sys; r=json.load(sys.stdin); print(" ".join("%.1f" % x["avg_ts"] for x in r))' |
        sed "s/\$/ $load/"
}

echo "model transport round: base pp tg [load s] | new pp tg [load s] | new/base pp tg [load]"
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
show = lambda values: " ".join(f"{x:.1f}" if x >= 10 else f"{x:.3f}" for x in values)
print(f"{preset} {transport} {rnd}: {show(b)} | {show(n)} | " + " ".join(f"{y / x:.3f}" for x, y in zip(b, n)))
PY
        done
    done
done | tee "$work/rows"
python3 - "$work/rows" <<'PY'
import statistics, sys, collections
ratios = collections.defaultdict(lambda: collections.defaultdict(list))
for line in open(sys.argv[1]):
    if "|" not in line: continue
    key = " ".join(line.split()[:2])
    for name, value in zip(["pp", "tg", "load"], line.split("|")[2].split()):
        ratios[key][name].append(float(value))
print("\nnew/base, median [min-max] of the rounds")
for key, figures in ratios.items():
    print(f"{key:16s}" + "".join(f"  {name} {statistics.median(v):.3f} [{min(v):.3f}-{max(v):.3f}]"
                                for name, v in figures.items()))
PY
