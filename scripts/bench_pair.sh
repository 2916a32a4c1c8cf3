#!/usr/bin/env bash
# bench_pair.sh [BUILD]: one guest against the local ceiling, in paired rounds: each
# round runs llama-bench locally and then through one server over shm, and prints
# the two tg figures and their ratio (a round's pair shares the machine's state).
#   ROUNDS=5  N=32 (tokens generated)  MODEL=small  GUEST_ENV= (variables for the guest)
#   SERVER_ARGS= (options for the server)
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=bench_lib.sh
source "$here/bench_lib.sh"
model=$build/models/${MODEL:-small}-f16.gguf
[ -s "$model" ] || "$build/bin/ggml-remote-synthetic-model" --preset "${MODEL:-small}" --type f16 -o "$model" >/dev/null
work=$(mktemp -d /tmp/ggml-remote-pair.XXXXXX)
# shellcheck disable=SC2086
"$build/bin/ggml-remote-server" --listen "unix:$work/r.sock" --threads 2 ${SERVER_ARGS:-} >"$work/server.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null || true; rm -rf "$work"' EXIT
wait_for test -S "$work/r.sock"
tg() { python3 -c 'import json,sys; print(" ".join("%.1f" % r["avg_ts"] for r in json.load(sys.stdin) if r["n_gen"] > 0))'; }
bench=(llama-bench -m "$model" -p 128 -n "${N:-32}" -r 1 -t 2 -o json)
for round in $(seq "${ROUNDS:-5}"); do
    local_tg=$("${bench[@]}" 2>/dev/null | tg)
    # shellcheck disable=SC2086
    shm_tg=$(env ${GUEST_ENV:-} GGML_BACKEND_PATH="$build/lib/libggml-remote.so" GGML_REMOTE_SERVERS="shm:$work/r.sock" \
        "${bench[@]}" -ngl 99 2>/dev/null | tg)
    python3 -c "print('round $round: local $local_tg shm $shm_tg ratio %.3f' % ($shm_tg / $local_tg))"
done
