# errors_foreign_clients: clients of another protocol on a plain TCP endpoint.
#   tls:      our own guest with tls:// pointed at a server without --tls-psk: the
#             server refuses its ClientHello in our own (plain) frame, so the guest
#             says the server answered without TLS, and the server's log says a TLS
#             client came to a plain endpoint;
#   ggml-rpc: llama.cpp's --rpc pointed at our server: its log names a ggml-rpc
#             client, at once (not at the handshake timeout).
# Each session ends within LIMIT_S, and the server serves a real guest after them.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/llama_helpers.sh"

LIMIT_S=10
tiny=$(model tiny)
run_local local "$tiny" 8
start_server srv
port=${srv_TCP##*:}

# tls: a key the guest holds; the server has none.
psktool -u guest -p "$WORK/keys.psk" >/dev/null
started=$(now_ms)
rc=0
GGML_REMOTE_TLS_PSK_FILE=$WORK/keys.psk GGML_REMOTE_CONNECT_TIMEOUT_MS=5000 GUEST_TIMEOUT=$LIMIT_S \
    run_guest tls "tls://127.0.0.1:$port" "$tiny" 8 || rc=$?
took=$(($(now_ms) - started))
[ "$rc" = 0 ] || { tail -5 "$WORK/tls.err" >&2; fail "the tls guest did not fall back to its CPU (exit $rc)"; }
[ "$took" -lt $((LIMIT_S * 1000)) ] || fail "the tls guest took ${took} ms"
line=$(wait_for_line "$srv_LOG" "a TLS client on a plain endpoint" "$LIMIT_S") ||
    { cat "$srv_LOG" >&2; fail "the server's log does not name the TLS client"; }
note "server: ${line#*: }"
guest_line=$(grep -m1 'TLS handshake failed: the server answered without TLS' "$WORK/tls.err") ||
    { tail -5 "$WORK/tls.err" >&2; fail "the tls guest does not say it reached a plain endpoint"; }
note "guest: $guest_line"

# ggml-rpc: llama.cpp's own RPC client.
started=$(now_ms)
timeout "$LIMIT_S" llama-completion -m "$tiny" --rpc "127.0.0.1:$port" -ngl 99 -n 1 -p Hi -no-cnv --no-warmup \
    </dev/null >"$WORK/rpc.out" 2>"$WORK/rpc.err" || true
line=$(wait_for_line "$srv_LOG" "a ggml-rpc client" "$LIMIT_S") ||
    { cat "$srv_LOG" >&2; tail -5 "$WORK/rpc.err" >&2; fail "the server's log does not name the ggml-rpc client"; }
took=$(($(now_ms) - started))
[ "$took" -lt $((LIMIT_S * 1000)) ] || fail "the ggml-rpc client was told after ${took} ms"
note "server: ${line#*: }"

run_guest_ok after "$srv_TCP" "$tiny" 8
assert_same_tokens local after
echo PASS
