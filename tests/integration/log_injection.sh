# log_injection: a guest's strings never forge a server log line. A TLS guest picks
# its PSK identity freely; the server logs it when the handshake succeeds (a bare key
# in the key file admits every identity) and when the identity is unknown. An
# identity that carries a newline and a whole fake log line, a carriage return and
# a terminal escape must show up escaped (\xNN) inside the one genuine line, and a
# very long identity must be cut short with a marker.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/llama_helpers.sh"

psktool -u guest -p "$WORK/keys.psk" >/dev/null
cut -d: -f2 "$WORK/keys.psk" >"$WORK/bare.psk"
psktool -u stranger -p "$WORK/stranger.psk" >/dev/null
start_server bare --tls-psk "$WORK/bare.psk"
start_server named --tls-psk "$WORK/keys.psk"

# (under 64 bytes, the most of an identity a line shows)
FORGED="2026-12-01 12:00:00 ggml-remote-server: FORGED"
HOSTILE=$'evil\n'"$FORGED"$'\r\x1b[2K\x07'
LONG=$(printf 'A%.0s' $(seq 3000))

# tls_guest SERVER_TCP IDENTITY KEYFILE: one TLS handshake as IDENTITY, then hang up.
tls_guest() {
    timeout 10 gnutls-cli --pskusername "$2" --pskkey "$(cut -d: -f2 "$3")" --priority 'NORMAL:-KX-ALL:+ECDHE-PSK' \
        -p "${1##*:}" 127.0.0.1 </dev/null >>"$WORK/gnutls-cli.txt" 2>&1 || true
}

tls_guest "$bare_TCP" "$HOSTILE" "$WORK/bare.psk"
tls_guest "$bare_TCP" "$LONG" "$WORK/bare.psk"
tls_guest "$named_TCP" "$HOSTILE" "$WORK/stranger.psk"
wait_for_line "$bare_LOG" "session 2 \(.*\): disconnected" 10 >/dev/null || fail "the long identity's session did not end"
wait_for_line "$named_LOG" "session 1 \(.*\): TLS handshake failed" 10 >/dev/null ||
    { cat "$named_LOG" >&2; fail "the unknown identity's handshake was not logged"; }

failures=()
for log in "$bare_LOG" "$named_LOG"; do
    name=$(basename "$log" .log)
    if grep -q '^2026-12-01 12:00:00 ggml-remote-server: FORGED' "$log"; then
        failures+=("$name: the guest forged a log line: $(grep -n 'FORGED' "$log")")
    fi
    if grep -q $'[\r\x1b\x07]' "$log"; then failures+=("$name: raw control bytes reached the log"); fi
done
escaped='evil\x0a2026-12-01 12:00:00 ggml-remote-server: FORGED\x0d\x1b[2K\x07'
grep -qF "TLS as '$escaped" "$bare_LOG" || failures+=("bare: the admitted identity was not logged escaped")
grep -qF "unknown identity '$escaped" "$named_LOG" || failures+=("named: the unknown identity was not logged escaped")
line=$(grep -F "TLS as 'AAAA" "$bare_LOG" || true)
grep -qF '...(+2936 bytes)' <<<"$line" || failures+=("bare: the long identity was not cut short: ${line:0:200}")
[ "${#line}" -lt 400 ] || failures+=("bare: the long identity made a line of ${#line} characters")
note "admitted: $(grep -F "TLS as 'evil" "$bare_LOG" || true)"
note "unknown: $(grep -F "unknown identity 'evil" "$named_LOG" || true)"

if [ "${#failures[@]}" -gt 0 ]; then
    printf 'FAIL: %s\n' "${failures[@]}" >&2
    echo "--- server logs:" >&2
    cat "$bare_LOG" "$named_LOG" >&2
    fail "${#failures[@]} expectation(s) not met"
fi
echo PASS
