# shader_cache_isolation: --shader-cache gives each tenant a directory of its own,
# and code running inside a session worker (the worker_probe preload) can write only
# its own tenant's:
#  - a unix guest (the user root) and a TCP guest (the address 127.0.0.1) get two
#    different directories, mode 0700, beneath DIR;
#  - the TCP guest's worker may create a file in its own directory (the cache works),
#    but cannot read the unix tenant's cached entry, create a file beside it, or
#    create one in DIR itself (where a new tenant's directory would go);
#  - a TLS guest, whose identity is known only inside the sandbox, gets no directory.
# Needs no GPU: the sandbox's rules are the same whatever the drivers cache.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/llama_helpers.sh"

CLIENT=${1:?usage: shader_cache_isolation.sh HANDSHAKE_CLIENT PROBE_LIBRARY}
PROBE=${2:?usage: shader_cache_isolation.sh HANDSHAKE_CLIENT PROBE_LIBRARY}
CACHE=$WORK/shaders

# tenant_directory LOG SESSION: the shader cache directory the server gave a session.
tenant_directory() { sed -n "s/.*session $2 (.*): shader cache \(.*\)/\1/p" "$1" | head -n1; }

start_server plain --shader-cache "$CACHE"
grep -q 'shader cache: off' "$plain_LOG" && skip "$(grep -o 'shader cache: off.*' "$plain_LOG")"
grep -q "shader cache: $CACHE," "$plain_LOG" || fail "the server does not announce its shader cache: $(cat "$plain_LOG")"
for endpoint in "$plain_UNIX" "$plain_TCP"; do
    "$CLIENT" "$endpoint" >"$WORK/client.txt" 2>&1 || true
    grep -q '^accepted: ' "$WORK/client.txt" || fail "$endpoint: not served: $(cat "$WORK/client.txt")"
done
unix_dir=$(tenant_directory "$plain_LOG" 1)
tcp_dir=$(tenant_directory "$plain_LOG" 2)
[ -n "$unix_dir" ] && [ -n "$tcp_dir" ] || fail "a session got no shader cache: $(cat "$plain_LOG")"
[ "$unix_dir" != "$tcp_dir" ] || fail "two tenants share the shader cache $unix_dir"
for dir in "$unix_dir" "$tcp_dir"; do
    [ "$(dirname "$dir")" = "$CACHE" ] || fail "$dir is not beneath $CACHE"
    [ "$(stat -c %a "$dir")" = 700 ] || fail "$dir has mode $(stat -c %a "$dir"), not 700"
done
note "unix guest: $unix_dir; TCP guest: $tcp_dir"
echo "compiled code of the unix tenant" >"$unix_dir/entry"

# The attacker: a TCP guest whose worker runs the probe.
GGML_REMOTE_PROBE_FILES="$unix_dir/entry" \
    GGML_REMOTE_PROBE_WRITE="$tcp_dir/own-entry:$unix_dir/planted:$CACHE/planted" \
    LD_PRELOAD=$PROBE start_server srv --shader-cache "$CACHE"
"$CLIENT" "$srv_TCP" >"$WORK/attacker.txt" 2>&1 || true
grep -q '^accepted: ' "$WORK/attacker.txt" || fail "the probed session was not served: $(cat "$WORK/attacker.txt")"
worker=$(sed -n 's/.*session 1 (.*): connected, worker pid \([0-9]*\).*/\1/p' "$srv_LOG")
wait_for_line "$srv_LOG" "worker-probe\\[$worker\\]: done" 10 >/dev/null || fail "the probe did not run: $(cat "$srv_LOG")"
[ "$(tenant_directory "$srv_LOG" 1)" = "$tcp_dir" ] || fail "the TCP tenant's directory changed between servers"
grep "worker-probe\\[$worker\\]: \(read\|create\)" "$srv_LOG" | sed 's/^.*worker-probe/-- worker-probe/'

failures=()
# expect WHAT PATH ALLOWED|refused: what the probe reported for that attempt.
expect() {
    grep -qF "worker-probe[$worker]: $1 $2: $3" "$srv_LOG" ||
        failures+=("$1 $2: expected $3, got: $(grep -F "worker-probe[$worker]: $1 $2:" "$srv_LOG")")
}
expect create "$tcp_dir/own-entry" ALLOWED
expect read "$unix_dir/entry" refused
expect create "$unix_dir/planted" refused
expect create "$CACHE/planted" refused
for planted in "$unix_dir/planted" "$CACHE/planted"; do
    [ ! -e "$planted" ] || failures+=("the TCP guest's worker created $planted")
done

# A TLS guest: served, without a shader cache.
psktool -u guest -p "$WORK/keys.psk" >/dev/null
start_server tls --tls-psk "$WORK/keys.psk" --shader-cache "$CACHE"
"$CLIENT" "$tls_TCP" --psk "$WORK/keys.psk" >"$WORK/tls.txt" 2>&1 || true
grep -q '^accepted: ' "$WORK/tls.txt" || failures+=("the TLS guest was not served: $(cat "$WORK/tls.txt")")
wait_for_line "$tls_LOG" 'session 1 .*: (disconnected|closed)' 10 >/dev/null || failures+=("the TLS session did not end")
if grep -q 'session 1 (.*): shader cache' "$tls_LOG"; then failures+=("a TLS guest got a shader cache"); fi
[ "$(find "$CACHE" -mindepth 1 -maxdepth 1 | wc -l)" = 2 ] || failures+=("new entries in $CACHE: $(ls "$CACHE")")
finish "$srv_LOG"
