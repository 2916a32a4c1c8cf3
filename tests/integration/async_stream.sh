# async_stream: ggml's asynchronous stream on a remote device, over unix, TCP and
# shm (tests/integration/async_stream_client.cpp): set/get/copy in line with the
# compute, events, and results equal to the same sums done in the client. Over the
# sockets the client also sees that an asynchronous read does not block it.
# usage: async_stream.sh CLIENT
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/llama_helpers.sh"
client=${1:?usage: async_stream.sh CLIENT}

start_server srv
for transport in unix tcp shm; do
    case $transport in
        unix) endpoint=$srv_UNIX mode=deferred ;;
        tcp) endpoint=$srv_TCP mode=deferred ;;
        shm) endpoint=shm:${srv_UNIX#unix:} mode=in-place ;;
    esac
    before=$(grep -c 'disconnected after' "$srv_LOG" || true)
    GGML_REMOTE_SERVERS=$endpoint timeout 60 "$client" "$PLUGIN" "$mode" >"$WORK/$transport.out" 2>&1 ||
        { cat "$WORK/$transport.out" >&2; fail "the asynchronous stream over $transport failed"; }
    grep -q '^PASS$' "$WORK/$transport.out" || fail "$transport: no PASS: $(tail -3 "$WORK/$transport.out")"
    # The sums were computed by the server, not in the client.
    line=$(wait_for_line "$srv_LOG" "session $((before + 1)) .*disconnected after" 10)
    computes=$(graph_computes "$line")
    [ "${computes:-0}" -ge 3 ] || fail "$transport: the server ran ${computes:-no} graph computes: $line"
    note "$transport: $(grep -c '^ok' "$WORK/$transport.out") checks passed; server: $line"
done
echo PASS
