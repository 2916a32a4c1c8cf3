# errors_wrong_peer: GGML_REMOTE_SERVERS points at something that accepts the
# connection but is not a working ggml-remote-server:
#   http:   answers the handshake with an HTTP error page;
#   close:  hangs up at once;
#   silent: accepts and never answers (a hung or stopped server, a black hole);
# each time the application still starts within a bounded time (the plugin's
# connect timeout, GGML_REMOTE_CONNECT_TIMEOUT_MS=2000, plus slack), runs on the
# CPU with the same tokens as without the plugin, and the plugin says what went
# wrong in exactly one line that names the endpoint.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/llama_helpers.sh"

tiny=$(model tiny)
N=32
LIMIT_S=12
run_local local "$tiny" "$N"

# fake_peer MODE PATH: a unix socket listener that misbehaves as MODE says.
fake_peer() {
    perl -MIO::Socket::UNIX -e '
        my ($mode, $path) = @ARGV;
        my $s = IO::Socket::UNIX->new(Local => $path, Listen => 8) or die "listen $path: $!";
        if ($mode eq "silent") { sleep 60; exit }  # connections wait in the backlog
        while (my $c = $s->accept) {
            if ($mode eq "http") {
                my $request;
                $c->sysread($request, 64);
                $c->syswrite("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
            }
            close $c;
        }' "$1" "$2" &
    SERVER_PIDS+=($!)
    local i
    for i in $(seq 50); do [ -S "$2" ] && return 0; sleep 0.1; done
    fail "the fake $1 peer did not start"
}

failures=()
for mode in http close silent; do
    sock=$WORK/$mode.sock
    fake_peer "$mode" "$sock"
    started=$(now_ms) rc=0
    GGML_REMOTE_CONNECT_TIMEOUT_MS=2000 GUEST_TIMEOUT=$((LIMIT_S + 10)) run_guest "$mode" "unix:$sock" "$tiny" "$N" || rc=$?
    took=$(($(now_ms) - started))
    note "$mode: exit $rc after $took ms; the plugin said:"
    plugin_lines "$mode" | sed 's/^/     /'
    # Check everything, then report every broken expectation of this peer at once.
    problems=()
    [ "$rc" != 124 ] || problems+=("the application hung at start-up (stopped by timeout after $took ms)")
    [ "$rc" = 0 ] || [ "$rc" = 124 ] || problems+=("llama-simple exited with $rc")
    [ "$took" -lt $((LIMIT_S * 1000)) ] || problems+=("giving up took $took ms (limit $LIMIT_S s)")
    count=$(plugin_lines "$mode" | grep -c '^' || true)
    [ "$count" = 1 ] || problems+=("$count ggml-remote lines instead of one")
    plugin_lines "$mode" | grep -q "unix:$sock" || problems+=("no line names the endpoint")
    if [ "$rc" = 0 ]; then
        cmp -s "$WORK/local.out" "$WORK/$mode.out" || problems+=("different tokens than the CPU")
        if grep -q 'REMOTE0' "$WORK/$mode.err"; then problems+=("a remote device was listed"); fi
    fi
    for problem in "${problems[@]}"; do failures+=("$mode peer: $problem"); done
done

if [ "${#failures[@]}" -gt 0 ]; then
    printf 'FAIL: %s\n' "${failures[@]}" >&2
    fail "${#failures[@]} expectation(s) not met"
fi
echo PASS
