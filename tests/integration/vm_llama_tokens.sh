# vm_llama_tokens_{tcp,tls}: llama-simple inside the test VM, with the plugin and
# every layer offered to the host's server through QEMU's user network
# (tcp://10.0.2.2:PORT, or tls:// with the server's pre-shared key), generates the
# same 32 greedy tokens of the tiny model as the host's local run; every layer was
# on REMOTE0, and the server's session ran the graph computes.
# usage: vm_llama_tokens.sh tcp|tls
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/llama_helpers.sh"
source "$(dirname "$0")/vm_lib.sh"
transport=${1:?usage: vm_llama_tokens.sh tcp|tls}
case $transport in tcp | tls) ;; *) fail "unknown transport '$transport'" ;; esac
vm_require

guest_env=()
if [ "$transport" = tls ]; then
    psktool -u guest -p "$WORK/keys.psk" >/dev/null
    guest_env=(GGML_REMOTE_TLS_PSK_FILE="$WORK/keys.psk")
    start_server srv --tls-psk "$WORK/keys.psk"
else
    start_server srv
fi
# QEMU's user network takes the guest's 10.0.2.2 to the host's loopback.
endpoint=$transport://10.0.2.2:${srv_TCP##*:}
N=32
path=$(model tiny f16)
run_local local "$path" "$N"

session=$(($(sessions_connected "$srv_LOG") + 1))
vm_run_ok vm -- env GGML_BACKEND_PATH="$PLUGIN" GGML_REMOTE_SERVERS="$endpoint" "${guest_env[@]}" \
    llama-simple -m "$path" -n "$N" -ngl 99 "$PROMPT"
assert_generated vm
assert_offloaded vm
assert_same_tokens local vm
[ -z "$(plugin_lines vm)" ] || fail "in the VM, the plugin reported trouble: $(plugin_lines vm)"
assert_session_computed "$srv_LOG" "$session" $((N - 1))
assert_session_transport "$srv_LOG" "$session" "$transport"
if [ "$transport" = tls ]; then assert_session_tls13 "$srv_LOG" "$session"; fi
note "in the VM over $transport: same $N tokens as the host's CPU: $(head -c 80 "$WORK/vm.out")..."
echo PASS
