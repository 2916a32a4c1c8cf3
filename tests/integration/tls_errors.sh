# tls_errors: a server started with --tls-psk admits only guests that hold its key.
# Each way of getting it wrong leaves the application running on the CPU with the
# same tokens, within a bounded time, and the plugin says what went wrong in one
# line that names the endpoint:
#   wrong key          "TLS handshake failed: wrong pre-shared key for identity 'guest'"
#   unknown identity   "TLS handshake failed: unknown identity 'stranger'"
#   no key at all      "no pre-shared key for TLS" (nothing is sent to the server)
#   plain tcp:// guest "refused the session: this server speaks TLS"
#   tls:// to a plain server  "TLS handshake failed: the server answered without TLS"
#   server full        "refused the session: ... maximum of 1 sessions" (the listener's
#                      plain refusal, read back by a TLS guest)
# The server logs each failed handshake and its worker exits; a client that
# connects and sends nothing is cut off after the 5 s handshake limit; and
# afterwards a guest with the right key is served correctly.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/llama_helpers.sh"

tiny=$(model tiny)
N=32
LIMIT_S=12
run_local local "$tiny" "$N"

psktool -u guest -p "$WORK/keys.psk" >/dev/null
psktool -u guest -p "$WORK/wrong.psk" >/dev/null
psktool -u stranger -p "$WORK/stranger.psk" >/dev/null
start_server srv --tls-psk "$WORK/keys.psk"
start_server plain
TLS_ENDPOINT=tls://${srv_TCP#tcp://}
PLAIN_AS_TLS=tls://${plain_TCP#tcp://}
grep -q "listening on $srv_TCP with TLS (guests use $TLS_ENDPOINT)" "$srv_LOG" ||
    { cat "$srv_LOG" >&2; fail "the server does not say its TCP listener speaks TLS"; }

# attempt NAME ENDPOINT KEYFILE REGEX...: a guest that must fall back to the CPU with
# one plugin line naming ENDPOINT and matching every REGEX. KEYFILE may be "" (no key).
failures=()
attempt() {
    local name=$1 endpoint=$2 keyfile=$3 started took rc=0 problems=() pattern
    shift 3
    started=$(now_ms)
    GGML_REMOTE_TLS_PSK_FILE=$keyfile GGML_REMOTE_CONNECT_TIMEOUT_MS=2000 GUEST_TIMEOUT=$((LIMIT_S + 10)) \
        run_guest "$name" "$endpoint" "$tiny" "$N" || rc=$?
    took=$(($(now_ms) - started))
    note "$name: exit $rc after $took ms: $(plugin_lines "$name")"
    [ "$rc" = 0 ] || problems+=("llama-simple exited with $rc")
    [ "$took" -lt $((LIMIT_S * 1000)) ] || problems+=("giving up took $took ms (limit $LIMIT_S s)")
    local lines count
    lines=$(plugin_lines "$name")
    count=$(grep -c '^' <<<"$lines" || true)
    [ "$count" = 1 ] || problems+=("$count ggml-remote lines instead of one: $lines")
    grep -qF "$endpoint" <<<"$lines" || problems+=("the line does not name $endpoint")
    for pattern in "$@"; do
        grep -qE -- "$pattern" <<<"$lines" || problems+=("the line does not match /$pattern/")
    done
    if grep -q 'REMOTE0' "$WORK/$name.err"; then problems+=("a remote device was listed"); fi
    [ "$rc" != 0 ] || cmp -s "$WORK/local.out" "$WORK/$name.out" || problems+=("different tokens than the CPU")
    for problem in "${problems[@]}"; do failures+=("$name: $problem"); done
}

# session_failed_tls ID REGEX: the server logged session ID's failed handshake, and
# nothing was served in it.
session_failed_tls() {
    local line
    line=$(wait_for_line "$srv_LOG" "session $1 \(.*\): (TLS handshake failed|refused a guest without TLS)" 10) ||
        { failures+=("session $1: the server logged no failed TLS handshake"); return; }
    grep -qE -- "$2" <<<"$line" || failures+=("session $1: the server's line does not match /$2/: $line")
    if grep -qE "session $1 \(.*\): (TLS as|disconnected after|closed by the server)" "$srv_LOG"; then
        failures+=("session $1 was served although its handshake failed")
    fi
    local pid
    pid=$(sed -n "s/.*session $1 (.*): connected, worker pid \([0-9]*\).*/\1/p" "$srv_LOG")
    wait_pid_exit "$pid" 10 || failures+=("session $1: worker $pid still running")
    note "server: $line"
}

session=$(($(sessions_connected "$srv_LOG") + 1))
attempt wrong-key "$TLS_ENDPOINT" "$WORK/wrong.psk" "TLS handshake failed: wrong pre-shared key for identity 'guest'"
session_failed_tls "$session" "wrong pre-shared key for identity 'guest'"

session=$((session + 1))
attempt unknown-identity "$TLS_ENDPOINT" "$WORK/stranger.psk" "TLS handshake failed: unknown identity 'stranger'"
session_failed_tls "$session" "unknown identity 'stranger'"

before=$(sessions_connected "$srv_LOG")
attempt no-key "$TLS_ENDPOINT" "" "no pre-shared key for TLS" "GGML_REMOTE_TLS_PSK_FILE"
[ "$(sessions_connected "$srv_LOG")" = "$before" ] || failures+=("no-key: the guest connected without a key")

session=$(($(sessions_connected "$srv_LOG") + 1))
attempt plain-guest "$srv_TCP" "$WORK/keys.psk" "refused the session: this server speaks TLS" "tls://host:port"
session_failed_tls "$session" "refused a guest without TLS"

attempt tls-to-plain "$PLAIN_AS_TLS" "$WORK/keys.psk" "TLS handshake failed: the server answered without TLS" "--tls-psk"

# A client that connects and says nothing holds its worker for the handshake limit only.
session=$(($(sessions_connected "$srv_LOG") + 1))
port=${srv_TCP##*:}
perl -MIO::Socket::INET -e '$s = IO::Socket::INET->new("127.0.0.1:" . shift) or die; sleep 30' "$port" &
silent=$!
SERVER_PIDS+=("$silent")
line=$(wait_for_line "$srv_LOG" "session $session \(.*\): no TLS handshake within 5000 ms" 12) ||
    failures+=("a silent client was not cut off within 12 s")
[ -z "${line:-}" ] || note "server: $line"
kill "$silent" 2>/dev/null || true

# A full TLS server turns a guest away in the plain protocol; the guest reads why.
# The slot is held by gnutls-cli: it completes the handshake with the key, then idles.
start_server full --tls-psk "$WORK/keys.psk" --max-sessions 1
mkfifo "$WORK/holder.in"
gnutls-cli --pskusername guest --pskkey "$(cut -d: -f2 "$WORK/keys.psk")" --priority 'NORMAL:-KX-ALL:+ECDHE-PSK' \
    -p "${full_TCP##*:}" 127.0.0.1 <"$WORK/holder.in" >"$WORK/holder.txt" 2>&1 &
holder=$!
SERVER_PIDS+=("$holder")
exec 3>"$WORK/holder.in"  # its input stays open, and silent, while the test runs
wait_for_line "$full_LOG" "session 1 \(.*\): TLS as 'guest'" 10 >/dev/null ||
    failures+=("gnutls-cli with the key did not get a TLS session: $(tail -n 3 "$WORK/holder.txt")")
attempt full "tls://${full_TCP#tcp://}" "$WORK/keys.psk" "refused the session: .*maximum of 1 sessions"
kill "$holder" 2>/dev/null || true

# After all that, a guest with the right key is served, with the CPU's tokens.
session=$(($(sessions_connected "$srv_LOG") + 1))
GGML_REMOTE_TLS_PSK_FILE=$WORK/keys.psk run_guest_ok good "$TLS_ENDPOINT" "$tiny" "$N"
assert_offloaded good
assert_same_tokens local good
assert_session_computed "$srv_LOG" "$session" $((N - 1))
# The key can also come inline, as "identity:hexkey".
session=$((session + 1))
GGML_REMOTE_TLS_PSK=$(cat "$WORK/keys.psk") run_guest_ok inline "$TLS_ENDPOINT" "$tiny" "$N"
assert_same_tokens local inline
assert_session_computed "$srv_LOG" "$session" $((N - 1))

finish "$srv_LOG"
