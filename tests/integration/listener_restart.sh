# listener_restart_{shm,unix,tcp,tls} and listener_killed: llama-server, its layers
# on the remote device, is generating when the server's listener goes away; the
# session lives in its own worker, so the generation finishes with the very tokens
# of the same request undisturbed.
#  restart (SIGUSR2): the listener execs itself anew (same pid), hands over its
#      sockets and the status board, and takes over the live session: it says so,
#      counts it (/metrics), lists it in `status`, and serves a new guest (llama-simple, same tokens as the
#      CPU). tls also checks SIGHUP: a key file that does not parse keeps the old
#      keys; a new key file applies to the next guest, and the old key is refused.
#  killed (kill -9 of the listener alone): the generation still finishes, and a new
#      server on the same socket serves the next guest.
# usage: listener_restart.sh shm|unix|tcp|tls restart|killed
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/llama_helpers.sh"

transport=${1:?usage: listener_restart.sh shm|unix|tcp|tls restart|killed}
mode=${2:?usage: listener_restart.sh shm|unix|tcp|tls restart|killed}
tiny=$(model tiny)
N_PREDICT=128
run_local tiny-local "$tiny" 16

server_args=()
if [ "$transport" = tls ]; then
    psktool -u guest -p "$WORK/keys.psk" >/dev/null
    server_args=(--tls-psk "$WORK/keys.psk")
    export GGML_REMOTE_TLS_PSK_FILE=$WORK/keys.psk
fi
start_server srv "${server_args[@]}" --metrics tcp://127.0.0.1:0
case $transport in
    shm) endpoint=shm:${srv_UNIX#unix:} ;;
    unix) endpoint=$srv_UNIX ;;
    tcp) endpoint=$srv_TCP ;;
    tls) endpoint=tls://${srv_TCP#tcp://} ;;
    *) fail "unknown transport '$transport'" ;;
esac
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
GGML_BACKEND_PATH=$PLUGIN GGML_REMOTE_SERVERS=$endpoint llama-server -m "$tiny" --host 127.0.0.1 --port "$port" \
    -np 1 -c 512 -t 2 -ngl 99 --no-warmup >"$WORK/llama-server.log" 2>&1 &
SERVER_PIDS+=($!)
for _ in $(seq 200); do
    python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=1).read()' \
        "http://127.0.0.1:$port/health" 2>/dev/null && break
    kill -0 "${SERVER_PIDS[-1]}" 2>/dev/null || { tail -20 "$WORK/llama-server.log" >&2; fail "llama-server exited"; }
    sleep 0.1
done
# llama-server logs little: its session on the server is the sign it uses REMOTE0
# (its computes there are checked below).
connected=$(wait_for_line "$srv_LOG" "session 1 \\(.*\\): connected, worker pid [0-9]+" 10) ||
    { cat "$srv_LOG" >&2; fail "llama-server opened no session"; }
worker=$(sed -n 's/.*worker pid \([0-9]*\).*/\1/p' <<<"$connected")
[ -n "$worker" ] || { cat "$srv_LOG" >&2; fail "llama-server's session did not start"; }

# complete NAME [SIGNAL PID]: one streamed completion; with SIGNAL, sent to PID once
# 16 tokens came back (mid-generation). The text goes to $WORK/NAME.out.
complete() {
    timeout 120 python3 - "$port" "$N_PREDICT" "${2:-}" "${3:-0}" >"$WORK/$1.out" <<'PY'
import json, os, signal, sys, urllib.request
port, n, sig, pid = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
body = json.dumps({"prompt": "Hello world", "n_predict": n, "temperature": 0, "top_k": 1, "seed": 1,
                   "cache_prompt": False, "stream": True, "ignore_eos": True}).encode()
request = urllib.request.Request(f"http://127.0.0.1:{port}/completion", data=body,
                                 headers={"Content-Type": "application/json"})
pieces, sent = [], False
for line in urllib.request.urlopen(request, timeout=100):
    if not line.startswith(b"data: "): continue
    event = json.loads(line[6:])
    pieces.append(event.get("content", ""))
    if sig and not sent and len(pieces) == 16:
        os.kill(pid, getattr(signal, sig)); sent = True
    if event.get("stop"): break
if sig and not sent: sys.exit("the generation ended before the signal")
print(json.dumps(pieces))
PY
}

complete undisturbed || fail "the undisturbed completion failed"
[ "$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))))' "$WORK/undisturbed.out")" -ge 120 ] ||
    fail "the undisturbed completion was too short to be interrupted: $(cat "$WORK/undisturbed.out")"

if [ "$mode" = restart ]; then
    complete across-restart SIGUSR2 "$srv_PID" || fail "the completion across the restart failed"
    took=$(wait_for_line "$srv_LOG" "took over 1 live session\\(s\\) from the previous listener: 1\$" 10) ||
        { cat "$srv_LOG" >&2; fail "the new listener did not take over llama-server's session"; }
    note "listener: $took"
    kill -0 "$srv_PID" 2>/dev/null || fail "the listener is gone"
    # The session taken over counts (the gauge is the count --max-sessions checks);
    # the new listener opened --metrics anew (port 0: another port).
    metrics=$(grep -oE 'metrics on tcp://127\.0\.0\.1:[0-9]+' "$srv_LOG" | tail -n 1 | grep -oE '[0-9]+$')
    live=$(python3 -c 'import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())' \
        "http://127.0.0.1:$metrics/metrics" | sed -n 's/^ggml_remote_sessions_live \([0-9]*\)$/\1/p')
    [ "$live" = 1 ] || fail "the new listener counts $live live sessions, not the one it took over"
else
    complete across-killed SIGKILL "$srv_PID" || fail "the completion across the listener's kill -9 failed"
fi
assert_same_tokens undisturbed "across-$mode"
kill -0 "$worker" 2>/dev/null || fail "llama-server's worker $worker ended"
note "$N_PREDICT tokens across the listener's $mode match the undisturbed run"

if [ "$mode" = killed ]; then
    # The old socket file is left behind; a new server takes the path over.
    wait_pid_exit "$srv_PID" 5 || fail "the listener survived kill -9"
    start_server srv2 --listen "$srv_UNIX"
    run_guest_ok after "$srv2_UNIX" "$tiny" 16
    assert_offloaded after
    assert_same_tokens tiny-local after
    complete after-kill || fail "llama-server failed after the listener's kill"
    assert_same_tokens undisturbed after-kill
    echo PASS
    exit 0
fi

# The new listener counts and lists the session it took over, and serves new guests.
"$SERVER_BIN" status --connect "$srv_UNIX" --json >"$WORK/status.json" || fail "status failed after the restart"
python3 - "$WORK/status.json" "$N_PREDICT" <<'PY' || { cat "$WORK/status.json" >&2; fail "status does not list the session taken over, with its computes"; }
import json, sys
sessions = {s["id"]: s for s in json.load(open(sys.argv[1]))["sessions"]}
sys.exit(0 if 1 in sessions and sessions[1]["graph_computes"] >= 2 * int(sys.argv[2]) else 1)
PY
run_guest_ok after "$endpoint" "$tiny" 16
assert_offloaded after
assert_same_tokens tiny-local after
wait_for_line "$srv_LOG" "session 3 \\(.*\\): connected" 1 >/dev/null ||
    { cat "$srv_LOG" >&2; fail "the new listener did not number its sessions on (session 3 expected)"; }
complete after-restart || fail "llama-server failed after the restart"
assert_same_tokens undisturbed after-restart

if [ "$transport" = tls ]; then
    # SIGHUP with a broken key file: logged, the old keys stay.
    cp "$WORK/keys.psk" "$WORK/good.psk"
    echo "guest:not-hex" >"$WORK/keys.psk"
    kill -HUP "$srv_PID"
    wait_for_line "$srv_LOG" "SIGHUP: key file .*; the keys read before stay" 10 >/dev/null ||
        { cat "$srv_LOG" >&2; fail "SIGHUP did not say it kept the old keys"; }
    GGML_REMOTE_TLS_PSK_FILE=$WORK/good.psk run_guest_ok old-key "$endpoint" "$tiny" 16
    assert_offloaded old-key
    # A new key: the next guest needs it, the old one is refused.
    psktool -u guest -p "$WORK/new.psk" >/dev/null
    cp "$WORK/new.psk" "$WORK/keys.psk"
    kill -HUP "$srv_PID"
    wait_for_line "$srv_LOG" "SIGHUP: re-read .*: 1 key\\(s\\)" 10 >/dev/null ||
        { cat "$srv_LOG" >&2; fail "SIGHUP did not re-read the key file"; }
    GGML_REMOTE_TLS_PSK_FILE=$WORK/new.psk run_guest_ok new-key "$endpoint" "$tiny" 16
    assert_offloaded new-key
    GGML_REMOTE_TLS_PSK_FILE=$WORK/good.psk GGML_REMOTE_CONNECT_TIMEOUT_MS=3000 run_guest_ok stale-key "$endpoint" "$tiny" 16
    assert_not_offloaded stale-key
    note "SIGHUP: a broken key file kept the old key; a new one replaced it for new sessions"
fi
echo PASS
