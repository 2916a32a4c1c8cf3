# llama_tensor_split: llama.cpp's -sm tensor (ggml's meta backend) over two of our
# servers, whose partial results the servers sum among themselves (the plugin's
# comm all-reduce): through a memory file (shm, unix: PeerExchange) or over a TCP
# connection their listeners make (tcp: PeerLinks; the second server may dial the
# first, --tensor-peer).
#
# The oracle: ggml's own all-reduce, through this process, adds the same two
# partials in the same order, so over TCP to servers that may not link (where
# the plugin leaves every step to ggml) the tokens must be the same bits; and
# the same as the CPU's alone. The guest's counts must show that the servers did
# the steps (not ggml), so that a plugin that silently left them to ggml fails.
# tls: the same over TLS servers (the guest's sessions and the servers' link).
# usage: llama_tensor_split.sh shm|unix|tcp|tls
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/llama_helpers.sh"
transport=${1:?usage: llama_tensor_split.sh shm|unix|tcp|tls}

keys=()
scheme=tcp
if [ "$transport" = tls ]; then
    psktool -u guest -p "$WORK/keys.psk" >/dev/null
    chmod 600 "$WORK/keys.psk"
    export GGML_REMOTE_TLS_PSK_FILE=$WORK/keys.psk
    keys=(--tls-psk "$WORK/keys.psk")
    scheme=tls
fi
# tcp_of NAME: the server's TCP endpoint, in the scheme of this run.
tcp_of() {
    local var=${1}_TCP
    echo "$scheme://${!var#tcp://}"
}
start_server first "${keys[@]}"
case $transport in
    tcp | tls) start_server second "${keys[@]}" --tensor-peer "$(tcp_of first)" ;;
    *) start_server second ;;
esac
# Servers that may not link: the second may dial no one (the group's join fails).
start_server third "${keys[@]}"
unlinked="$(tcp_of first),$(tcp_of third)"
case $transport in
    unix) ours="$first_UNIX,$second_UNIX" ;;
    shm) ours="shm:${first_UNIX#unix:},shm:${second_UNIX#unix:}" ;;
    tcp | tls) ours="$(tcp_of first),$(tcp_of second)" ;;
    *) fail "unknown transport '$transport'" ;;
esac
N=32
path=$(model small f16)

unset GGML_BACKEND_PATH GGML_REMOTE_SERVERS  # the local run takes neither
llama_args=()
greedy local env
llama_args=(-ngl 99 -sm tensor)
greedy ours env GGML_BACKEND_PATH="$PLUGIN" GGML_REMOTE_SERVERS="$ours" GGML_REMOTE_STATS=1
greedy ggml_own env GGML_BACKEND_PATH="$PLUGIN" GGML_REMOTE_SERVERS="$unlinked" GGML_REMOTE_STATS=1

counts=$(grep 'tensor parallelism:' "$WORK/ours.err" || true)
[ -n "$counts" ] || fail "no tensor-parallel group over $transport: $(grep -i 'tensor\|meta' "$WORK/ours.err" | head -5)"
by_servers=$(sed -n 's/.* \([0-9][0-9]*\) all-reduces between servers.*/\1/p' <<<"$counts")
[ "${by_servers:-0}" -ge $((N * 2)) ] || fail "the servers did only ${by_servers:-0} all-reduces: $counts"
if grep -q 'all-reduces between servers' "$WORK/ggml_own.err"; then
    fail "without --tensor-peer the plugin must leave the all-reduce to ggml: $(grep 'tensor parallelism:' "$WORK/ggml_own.err")"
fi
grep -q "may not reach $scheme://127.0.0.1" "$WORK/ggml_own.err" ||
    fail "the guest did not say why the unlinked servers could not sum: $(grep -i 'tensor' "$WORK/ggml_own.err" | head -3)"
if [ "$scheme" = tls ] || [ "$transport" = tcp ]; then
    grep -q "a peer server's connection (rank 1), handed to its session" "$first_LOG" ||
        fail "the first server never took the second's connection: $(grep -i peer "$first_LOG" | head -3)"
fi
assert_same_tokens ggml_own ours
assert_same_tokens local ours
for server in first second; do
    log_var=${server}_LOG
    assert_session_computed "${!log_var}" 1 $((N - 1))
done
note "$counts"
note "same $N tokens as ggml's own all-reduce and the CPU: $(head -c 80 "$WORK/ours.out")..."
echo PASS
