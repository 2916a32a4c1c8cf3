# llama_tensor_split_hosts: -sm tensor over two TLS servers on two "machines":
# network namespaces with addresses of their own, joined by a veth pair (no
# loopback between them, so the servers must listen on a routable address, which
# needs TLS). The guest runs beside the first server; the second server dials the
# first (--tensor-peer tls://10.77.0.1:PORT) through its listener. The tokens must
# be the CPU's, the servers must have summed every step, and the first server must
# have taken the second's connection for the guest's session.
# Skipped where network namespaces cannot be made (not root, no ip(8) or nsenter).
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/llama_helpers.sh"

command -v ip >/dev/null && command -v nsenter >/dev/null || skip "no ip(8) or nsenter(1)"
unshare --net true 2>/dev/null || skip "cannot make a network namespace (needs root)"
# A namespace lives while a process holds it: one sleeper each, ended by cleanup.
unshare --net sleep 1h &
holder_a=$!
unshare --net sleep 1h &
holder_b=$!
SERVER_PIDS+=("$holder_a" "$holder_b")
# in_ns PID CMD...: CMD in the network namespace of process PID.
in_ns() {
    local pid=$1
    shift
    nsenter --net="/proc/$pid/ns/net" "$@"
}
for _ in $(seq 50); do
    [ "$(readlink /proc/$holder_a/ns/net)" != "$(readlink /proc/$$/ns/net)" ] &&
        [ "$(readlink /proc/$holder_b/ns/net)" != "$(readlink /proc/$$/ns/net)" ] && break
    sleep 0.1
done
ip link add "ggr$$a" type veth peer name "ggr$$b"
ip link set "ggr$$a" netns "$holder_a"
ip link set "ggr$$b" netns "$holder_b"
in_ns "$holder_a" ip addr add 10.77.0.1/24 dev "ggr$$a"
in_ns "$holder_b" ip addr add 10.77.0.2/24 dev "ggr$$b"
in_ns "$holder_a" ip link set "ggr$$a" up
in_ns "$holder_b" ip link set "ggr$$b" up
in_ns "$holder_a" ip link set lo up
in_ns "$holder_b" ip link set lo up

psktool -u guest -p "$WORK/keys.psk" >/dev/null
chmod 600 "$WORK/keys.psk"
PORT=50053
A=tls://10.77.0.1:$PORT B=tls://10.77.0.2:$PORT
# serve NAME HOLDER ADDRESS [ARGS...]: a TLS server in HOLDER's namespace.
serve() {
    local name=$1 holder=$2 address=$3
    shift 3
    in_ns "$holder" "$SERVER_BIN" --tls-psk "$WORK/keys.psk" --listen "tcp://$address:$PORT" "$@" \
        >"$WORK/$name.log" 2>&1 &
    SERVER_PIDS+=($!)
    wait_for_line "$WORK/$name.log" "listening on tcp://$address:$PORT" 10 >/dev/null ||
        { cat "$WORK/$name.log" >&2; fail "server $name did not start"; }
}
serve first "$holder_a" 10.77.0.1
serve second "$holder_b" 10.77.0.2 --tensor-peer "$A"

N=32
path=$(model small f16)
unset GGML_BACKEND_PATH GGML_REMOTE_SERVERS
llama_args=()
greedy local env
llama_args=(-ngl 99 -sm tensor)
greedy hosts nsenter --net="/proc/$holder_a/ns/net" env GGML_BACKEND_PATH="$PLUGIN" GGML_REMOTE_SERVERS="$A,$B" \
    GGML_REMOTE_TLS_PSK_FILE="$WORK/keys.psk" GGML_REMOTE_STATS=1
assert_same_tokens local hosts
counts=$(grep 'tensor parallelism:' "$WORK/hosts.err" || true)
by_servers=$(sed -n 's/.* \([0-9][0-9]*\) all-reduces between servers.*/\1/p' <<<"$counts")
[ "${by_servers:-0}" -ge $((N * 2)) ] || fail "the servers did only ${by_servers:-0} all-reduces: $counts"
grep -q "(tls://10.77.0.2:[0-9]*): a peer server's connection (rank 1), handed to its session" "$WORK/first.log" ||
    { cat "$WORK/first.log" >&2; fail "the first server did not take the second's connection"; }
note "$counts"
note "two hosts (10.77.0.1, 10.77.0.2), TLS links: the CPU's $N tokens"
echo PASS
