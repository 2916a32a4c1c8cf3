# errors_bad_endpoint: a malformed endpoint is reported clearly on both sides.
# Guest: GGML_REMOTE_SERVERS=garbage (and other malformed forms) gives one line
# that names the bad text and the accepted forms; the application runs on, on the
# CPU. Server: a malformed --listen, a public TCP address without --tls-psk or
# --insecure, a bad --tls-psk key file, a tls:// listener without a key, an unknown
# flag and a flag without its value all exit non-zero at once with a message that
# says what to do; --help exits 0.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/llama_helpers.sh"

tiny=$(model tiny)
N=32
run_local local "$tiny" "$N"

# The accepted forms, as the message spells them (other schemes may be listed too).
UNIX_FORM='unix:/path/to\.sock'
TCP_FORM='tcp://host:port'
i=0
for servers in garbage "tcp://localhost" "tcp://:50053" "tcp://127.0.0.1:99999" "unix:" "http://127.0.0.1:80"; do
    i=$((i + 1))
    name=guest-$i rc=0
    run_guest "$name" "$servers" "$tiny" "$N" || rc=$?
    [ "$rc" = 0 ] || { tail -n 20 "$WORK/$name.err" >&2; fail "GGML_REMOTE_SERVERS=$servers: llama-simple exited with $rc"; }
    # The bad text is quoted, as it was given, in the one line.
    quoted=$(sed 's/[.[\*^$]/\\&/g' <<<"$servers")
    assert_one_plugin_line "$name" "^ggml-remote: GGML_REMOTE_SERVERS: " "'$quoted'" "$UNIX_FORM" "$TCP_FORM"
    assert_not_offloaded "$name"
    assert_same_tokens local "$name"
done

# server NAME ARGS...: runs the server's command line (bounded); output in $WORK/NAME.{out,err,rc}.
server() {
    local name=$1 rc=0
    shift
    timeout 10 "$SERVER_BIN" "$@" >"$WORK/$name.out" 2>"$WORK/$name.err" || rc=$?
    echo "$rc" >"$WORK/$name.rc"
}

expect_server_refusal listen-garbage "invalid endpoint 'garbage'" "$UNIX_FORM" "$TCP_FORM" -- --listen garbage
expect_server_refusal listen-bad-port "invalid endpoint 'tcp://127\.0\.0\.1:notaport'" "$UNIX_FORM" "$TCP_FORM" -- \
    --listen tcp://127.0.0.1:notaport
# A second, bad --listen is caught before the first one is opened.
expect_server_refusal listen-second-bad "invalid endpoint 'garbage'" -- --listen "unix:$WORK/never.sock" --listen garbage
[ ! -e "$WORK/never.sock" ] || fail "a refused command line still created the first socket"

port=$(perl -MIO::Socket::INET -e \
    '$s = IO::Socket::INET->new(LocalAddr => "127.0.0.1", LocalPort => 0, Listen => 1) or die; print $s->sockport')
expect_server_refusal listen-public "refusing to listen on tcp://0\.0\.0\.0:$port" "--tls-psk FILE" "--insecure" -- \
    --listen "tcp://0.0.0.0:$port"
# TLS needs a usable key file, and a tls:// listener needs --tls-psk.
printf 'guest:0011\n' >"$WORK/short.psk"
expect_server_refusal tls-short-key "--tls-psk: key file .*short\.psk: line 1: .*at least 16" -- \
    --listen "tcp://0.0.0.0:$port" --tls-psk "$WORK/short.psk"
expect_server_refusal tls-missing-key "--tls-psk: key file .*missing\.psk: No such file" -- \
    --listen "tcp://0.0.0.0:$port" --tls-psk "$WORK/missing.psk"
expect_server_refusal tls-listen-without-key "--listen tls://127\.0\.0\.1:$port needs --tls-psk FILE" -- \
    --listen "tls://127.0.0.1:$port"
# A key file per endpoint is the guest's: a server takes its keys from --tls-psk.
expect_server_refusal listen-psk-file "psk-file= is for guests; a server takes its keys from --tls-psk FILE" -- \
    --listen "tls://127.0.0.1:$port?psk-file=$WORK/short.psk"
expect_server_refusal unknown-flag "unknown argument: --frobnicate" "--help" -- --frobnicate
expect_server_refusal missing-value "--listen needs a value" -- --listen
expect_server_refusal bad-threads "--threads" "got 'many'" -- --threads many --listen "unix:$WORK/x.sock"

# With --insecure the public address is accepted: the server starts listening.
"$SERVER_BIN" --listen "tcp://0.0.0.0:$port" --insecure >"$WORK/insecure.log" 2>&1 &
SERVER_PIDS+=($!)
wait_for_line "$WORK/insecure.log" "listening on tcp://0\.0\.0\.0:$port" 10 >/dev/null ||
    { cat "$WORK/insecure.log" >&2; fail "--insecure did not let the server listen on 0.0.0.0"; }
note "--insecure: $(grep 'listening on' "$WORK/insecure.log")"
kill "${SERVER_PIDS[-1]}"
wait "${SERVER_PIDS[-1]}" 2>/dev/null || true

# With --tls-psk (a key psktool made) the public address is accepted, with TLS.
psktool -u guest -p "$WORK/keys.psk" >/dev/null
"$SERVER_BIN" --listen "tcp://0.0.0.0:$port" --tls-psk "$WORK/keys.psk" >"$WORK/tls.log" 2>&1 &
SERVER_PIDS+=($!)
wait_for_line "$WORK/tls.log" "listening on tcp://0\.0\.0\.0:$port with TLS" 10 >/dev/null ||
    { cat "$WORK/tls.log" >&2; fail "--tls-psk did not let the server listen on 0.0.0.0 with TLS"; }
note "--tls-psk: $(grep 'listening on' "$WORK/tls.log")"

server help --help
[ "$(cat "$WORK/help.rc")" = 0 ] || fail "--help exited $(cat "$WORK/help.rc")"
grep -q '^usage: ' "$WORK/help.out" || fail "--help printed no usage line on stdout"
grep -q -- '--listen ENDPOINT' "$WORK/help.out" || fail "--help does not document --listen"
grep -q -- '--insecure' "$WORK/help.out" || fail "--help does not document --insecure"
grep -q -- '--tls-psk FILE' "$WORK/help.out" || fail "--help does not document --tls-psk"
[ ! -s "$WORK/help.err" ] || fail "--help wrote to stderr: $(cat "$WORK/help.err")"
echo PASS
