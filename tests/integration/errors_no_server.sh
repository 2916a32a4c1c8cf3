# errors_no_server: when GGML_REMOTE_SERVERS names servers that are not there (a
# socket path nobody created, a stale socket file left by a dead server, a closed
# TCP port), the application still runs, on the CPU, with the same tokens as
# without the plugin; the plugin says so in one line per endpoint, naming the
# endpoint and the cause; and giving up is fast.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/llama_helpers.sh"

tiny=$(model tiny)
N=32
LIMIT_MS=10000
run_local local "$tiny" "$N"

# A port that was free a moment ago: bind, read the number, close.
closed_port=$(perl -MIO::Socket::INET -e \
    '$s = IO::Socket::INET->new(LocalAddr => "127.0.0.1", LocalPort => 0, Listen => 1) or die "bind: $!"; print $s->sockport')
[ -n "$closed_port" ] || fail "could not find a free port"

# A socket file with nobody behind it, as a server killed with -9 leaves it.
stale=$WORK/stale.sock
perl -MIO::Socket::UNIX -e '$s = IO::Socket::UNIX->new(Local => $ARGV[0], Listen => 1) or die "bind: $!"' "$stale"
[ -S "$stale" ] || fail "could not create a stale socket file"

missing=$WORK/nobody-here.sock

# case: name, GGML_REMOTE_SERVERS, regexes the one line must match
check_unreachable() {
    local name=$1 servers=$2 started elapsed rc=0
    shift 2
    started=$(now_ms)
    run_guest "$name" "$servers" "$tiny" "$N" || rc=$?
    elapsed=$(($(now_ms) - started))
    [ "$rc" = 0 ] || { tail -n 20 "$WORK/$name.err" >&2; fail "$name: llama-simple exited with $rc"; }
    [ "$elapsed" -lt "$LIMIT_MS" ] || fail "$name: took $elapsed ms to give up (limit $LIMIT_MS ms)"
    assert_one_plugin_line "$name" "$@"
    assert_not_offloaded "$name"
    assert_same_tokens local "$name"
    note "$name: ran on the CPU in $elapsed ms"
}

check_unreachable missing-unix "unix:$missing" \
    "^ggml-remote: connect unix:$missing: " "No such file or directory" "ggml-remote-server running"
check_unreachable stale-unix "unix:$stale" \
    "^ggml-remote: connect unix:$stale: " "Connection refused" "ggml-remote-server running"
check_unreachable closed-tcp "tcp://127.0.0.1:$closed_port" \
    "^ggml-remote: connect tcp://127\.0\.0\.1:$closed_port: " "Connection refused" "ggml-remote-server running"

# Two dead servers in one list: one line for each, in order.
name=both started=$(now_ms) rc=0
run_guest both "unix:$missing,tcp://127.0.0.1:$closed_port" "$tiny" "$N" || rc=$?
elapsed=$(($(now_ms) - started))
[ "$rc" = 0 ] || fail "both: llama-simple exited with $rc"
[ "$elapsed" -lt "$LIMIT_MS" ] || fail "both: took $elapsed ms to give up"
lines=$(plugin_lines both)
[ "$(grep -c '^' <<<"$lines")" = 2 ] || { echo "$lines" >&2; fail "both: expected one line per endpoint"; }
sed -n 1p <<<"$lines" | grep -q "connect unix:$missing: No such file or directory" || fail "both: first line: $lines"
sed -n 2p <<<"$lines" | grep -q "connect tcp://127.0.0.1:$closed_port: Connection refused" || fail "both: second line: $lines"
assert_not_offloaded both
assert_same_tokens local both
echo PASS
