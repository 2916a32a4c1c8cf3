#!/usr/bin/env bash
# make demo: writes a small synthetic llama model, starts ggml-remote-server on a
# unix socket, and runs llama.cpp on it locally and through the server.
set -euo pipefail
build=${1:-build}
build=$(cd "$build" && pwd)
work=$(mktemp -d /tmp/ggml-remote-demo.XXXXXX)
server_pid=
cleanup() {
    [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT

model=$build/models/small-f16.gguf
if [ ! -s "$model" ]; then
    mkdir -p "$build/models"
    echo "writing a synthetic 30M-parameter llama model to $model"
    "$build/bin/ggml-remote-synthetic-model" --preset small --type f16 -o "$model.tmp" >/dev/null
    mv "$model.tmp" "$model"
fi

socket=$work/ggml-remote.sock
"$build/bin/ggml-remote-server" --listen "unix:$socket" >"$work/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 50); do [ -S "$socket" ] && break; sleep 0.1; done
[ -S "$socket" ] || { cat "$work/server.log"; echo "demo: the server did not start" >&2; exit 1; }

prompt="Hello world"
tokens=32
run() {  # run NAME [ENV...] -- llama-simple args
    local name=$1; shift
    env "$@" llama-simple -m "$model" -n "$tokens" -ngl 99 "$prompt" >"$work/$name.out" 2>"$work/$name.err"
}
run local
run remote GGML_BACKEND_PATH="$build/lib/libggml-remote.so" GGML_REMOTE_SERVERS="unix:$socket"

field() {  # field NAME REGEX: first match of a sed capture in NAME's log
    sed -n "$2" "$work/$1.err" | head -n1
}
device() { grep -q "assigned to device REMOTE0" "$work/$1.err" && echo "REMOTE0 (server)" || echo "CPU (this process)"; }

echo
echo "model: $model"
echo "llama-simple -m MODEL -n $tokens -ngl 99 \"$prompt\""
echo
printf '%-22s %-26s %-26s\n' "" "local" "remote (unix socket)"
printf '%-22s %-26s %-26s\n' "device" "$(device local)" "$(device remote)"
printf '%-22s %-26s %-26s\n' "load time (ms)" "$(field local 's/.*load time = *\([0-9.]*\) ms.*/\1/p')" \
    "$(field remote 's/.*load time = *\([0-9.]*\) ms.*/\1/p')"
printf '%-22s %-26s %-26s\n' "prompt eval (tok/s)" "$(field local 's/.*prompt eval time.*, *\([0-9.]*\) tokens per second.*/\1/p')" \
    "$(field remote 's/.*prompt eval time.*, *\([0-9.]*\) tokens per second.*/\1/p')"
printf '%-22s %-26s %-26s\n' "generation (tok/s)" "$(field local 's/^main: decoded.*speed: *\([0-9.]*\) t\/s.*/\1/p')" \
    "$(field remote 's/^main: decoded.*speed: *\([0-9.]*\) t\/s.*/\1/p')"
echo
echo "local output:  $(cat "$work/local.out")"
echo "remote output: $(cat "$work/remote.out")"
echo
if cmp -s "$work/local.out" "$work/remote.out"; then
    echo "the outputs are identical"
else
    echo "the outputs DIFFER" >&2
    exit 1
fi
echo
echo "server log:"
sed 's/^/  /' "$work/server.log"
