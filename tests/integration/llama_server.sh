# llama_server: Debian's llama-server, with its layers on the remote device, serves
# two completion requests at once over HTTP on loopback, and each gets the text the
# same request gets alone, and the text a local (CPU) llama-server gives.
source "$(dirname "$0")/lib.sh"

start_server srv
path=$(model small f16)
port_of() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# start_llama_server NAME PORT [ENV...]: starts llama-server with two slots.
start_llama_server() {
    local name=$1 port=$2
    shift 2
    env "$@" llama-server -m "$path" --host 127.0.0.1 --port "$port" -np 2 -c 1024 -t 2 -ngl 99 --no-warmup \
        >"$WORK/$name.log" 2>&1 &
    SERVER_PIDS+=($!)
    for _ in $(seq 200); do
        python3 - "$port" <<'PY' 2>/dev/null && return 0
import sys, urllib.request
urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/health", timeout=1).read()
PY
        kill -0 "${SERVER_PIDS[-1]}" 2>/dev/null || { tail -20 "$WORK/$name.log" >&2; fail "$name exited at start-up"; }
        sleep 0.1
    done
    tail -20 "$WORK/$name.log" >&2
    fail "$name did not become healthy"
}

# complete PORT MODE: MODE alone|together; prints one JSON line per prompt.
complete() {
    timeout 120 python3 - "$1" "$2" <<'PY'
import json, sys, threading, urllib.request
port, mode = sys.argv[1], sys.argv[2]
prompts = ["Hello world", "The quick brown fox"]
results = {}
def ask(prompt):
    body = json.dumps({"prompt": prompt, "n_predict": 24, "temperature": 0, "top_k": 1, "seed": 1,
                       "cache_prompt": False}).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}/completion", data=body,
                                     headers={"Content-Type": "application/json"})
    results[prompt] = json.loads(urllib.request.urlopen(request, timeout=100).read())["content"]
if mode == "together":
    threads = [threading.Thread(target=ask, args=(p,)) for p in prompts]
    for t in threads: t.start()
    for t in threads: t.join()
else:
    for p in prompts: ask(p)
for p in prompts:
    print(json.dumps({"prompt": p, "content": results.get(p)}))
PY
}

local_port=$(port_of)
start_llama_server local-server "$local_port"
complete "$local_port" alone >"$WORK/local.jsonl" || fail "the local llama-server did not answer"

remote_port=$(port_of)
start_llama_server remote-server "$remote_port" GGML_BACKEND_PATH="$PLUGIN" GGML_REMOTE_SERVERS="$srv_UNIX"
complete "$remote_port" alone >"$WORK/remote-alone.jsonl" || fail "the remote llama-server did not answer"
complete "$remote_port" together >"$WORK/remote-together.jsonl" || fail "concurrent requests failed"

grep -q '"content": null' "$WORK/remote-together.jsonl" && fail "a concurrent request got no answer"
[ "$(grep -c '"content": "' "$WORK/local.jsonl")" = 2 ] || fail "local answers missing: $(cat "$WORK/local.jsonl")"
cmp -s "$WORK/local.jsonl" "$WORK/remote-alone.jsonl" ||
    fail "remote answers differ from local: $(cat "$WORK/local.jsonl") vs $(cat "$WORK/remote-alone.jsonl")"
cmp -s "$WORK/remote-alone.jsonl" "$WORK/remote-together.jsonl" ||
    fail "answers to concurrent requests differ: $(cat "$WORK/remote-together.jsonl")"
# The work ran on the server: llama-server's live session there computed graphs,
# at least one per generated token of the four completions.
computes=$("$SERVER_BIN" status --connect "$srv_UNIX" --json |
    python3 -c 'import json,sys; print(sum(s["graph_computes"] for s in json.load(sys.stdin)["sessions"]))')
[ "${computes:-0}" -ge 48 ] || fail "the server ran only ${computes:-0} graph computes for llama-server"
note "two concurrent completions through REMOTE0 match local: $(head -c 120 "$WORK/remote-together.jsonl")"
echo PASS
