# reconnect_tcp: kill -9 of llama-server's worker mid-generation over TCP. The
# plugin reconnects and reads the weights again from the model file it mapped
# (the time it takes for the mid model is printed); the KV cache was only on the
# host, so the compute that needs it fails with an error naming that buffer, and
# /health stays ok. A new request that starts fresh (cache_prompt: false) gets the
# tokens an undisturbed one got.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/llama_helpers.sh"

start_server srv --cores 1
path=$(model mid f16)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
GGML_BACKEND_PATH=$PLUGIN GGML_REMOTE_SERVERS=$srv_TCP llama-server -m "$path" --host 127.0.0.1 --port "$port" \
    -np 1 -c 512 -t 1 -ngl 99 --no-warmup >"$WORK/llama-server.log" 2>&1 &
llama_pid=$!
SERVER_PIDS+=("$llama_pid")

# request N_PREDICT [TIMEOUT]: one fresh completion; prints its content, or ERROR: and the message.
request() {
    python3 - "$port" "$1" "${2:-120}" <<'PY'
import json, sys, urllib.request, urllib.error
port, n, timeout = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
body = json.dumps({"prompt": "Hello world", "n_predict": n, "temperature": 0, "top_k": 1, "seed": 1,
                   "cache_prompt": False}).encode()
req = urllib.request.Request(f"http://127.0.0.1:{port}/completion", data=body,
                             headers={"Content-Type": "application/json"})
try:
    print(json.loads(urllib.request.urlopen(req, timeout=timeout).read())["content"])
except urllib.error.HTTPError as e:
    print("ERROR: " + e.read().decode(errors="replace"))
PY
}
healthy() { python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$port/health', timeout=2).read()" 2>/dev/null; }

for _ in $(seq 600); do healthy && break; kill -0 "$llama_pid" || { tail -20 "$WORK/llama-server.log" >&2; fail "llama-server exited"; }; sleep 0.1; done
healthy || fail "llama-server did not become healthy"
connected=$(grep -E 'session [0-9]+ \(.*\): connected, worker pid [0-9]+' "$srv_LOG" | tail -n1)
worker=$(sed -n 's/.*worker pid \([0-9]*\).*/\1/p' <<<"$connected")
[ -n "$worker" ] || fail "no worker pid in the server's log"

request 16 >"$WORK/reference.txt"
grep -q '^ERROR' "$WORK/reference.txt" && fail "the reference request failed: $(cat "$WORK/reference.txt")"

# A long generation, killed mid-way once tokens come.
computes_now() { "$SERVER_BIN" status --connect "$srv_UNIX" --json |
    python3 -c 'import json,sys; print(sum(s["graph_computes"] for s in json.load(sys.stdin)["sessions"]))'; }
before=$(computes_now)
request 400 >"$WORK/interrupted.txt" &
interrupted=$!
for _ in $(seq 600); do [ "$(computes_now)" -ge $((before + 8)) ] && break; sleep 0.05; done
note "killing worker $worker mid-generation"
kill -9 "$worker"
wait "$interrupted" || true
note "the interrupted request: $(head -c 300 "$WORK/interrupted.txt")"
grep -q '^ERROR' "$WORK/interrupted.txt" || fail "the interrupted request did not fail"
lost_error=$(grep -m1 "whose contents were lost with the connection to $srv_TCP" "$WORK/llama-server.log") ||
    { grep 'ggml-remote' "$WORK/llama-server.log" >&2; fail "no error naming the lost buffer"; }
[[ $lost_error == *"buffer of"* ]] || fail "the error does not name the buffer: $lost_error"
note "plugin: $lost_error"
healthy || fail "/health no longer answers"

line=$(grep -m1 'ggml-remote: reconnected to' "$WORK/llama-server.log") ||
    { grep 'ggml-remote' "$WORK/llama-server.log" >&2; fail "the plugin did not say it reconnected"; }
note "plugin: $line"
[[ $line == *"contents lost"* ]] || fail "the KV cache should be reported lost: $line"

request 16 >"$WORK/fresh.txt"
cmp -s "$WORK/reference.txt" "$WORK/fresh.txt" ||
    fail "a fresh request after the reconnection differs: '$(cat "$WORK/fresh.txt")' vs '$(cat "$WORK/reference.txt")'"
note "a fresh request after the reconnection got the reference's tokens: $(head -c 80 "$WORK/fresh.txt")"
echo PASS
