# metrics: a server with --metrics answers GET /metrics in Prometheus' text format
# (every line checked by metrics_scrape.py), and the figures move with what guests do:
#  - a guest's commands and bytes count while its session lives (labelled with its
#    session and peer) and stay in the totals after it ended;
#  - refusals are counted by reason: a handshake with another protocol version, a
#    peer over its limit, a full server, failed TLS handshakes, and commands over a
#    session's limit;
#  - anything but GET /metrics, and a request that never ends, get 404;
#  - a scraper that connects and sends nothing holds up neither guests nor scrapes;
#  - a unix: endpoint (here of a TLS server) serves the same;
#  - without --metrics-per-session no series names a session, 20 guests add no
#    series, and live sessions only their tenant's (sessions, memory); sessions_started_total counts the 20 guests, not a status query;
#    guests that compute fill the histograms (in seconds), their sessions' lengths too.
# usage: metrics.sh HANDSHAKE_CLIENT MEMORY_CLIENT ASYNC_CLIENT
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/llama_helpers.sh"

CLIENT=${1:?usage: metrics.sh HANDSHAKE_CLIENT MEMORY_CLIENT}
MEMORY_CLIENT=${2:?usage: metrics.sh HANDSHAKE_CLIENT MEMORY_CLIENT ASYNC_CLIENT}
ASYNC_CLIENT=${3:?usage: metrics.sh HANDSHAKE_CLIENT MEMORY_CLIENT ASYNC_CLIENT}
RTT=$BUILD/bin/ggml-remote-rtt
SCRAPE="python3 $(dirname "$0")/metrics_scrape.py"
failures=()
declare -A HOLDER

$SCRAPE --self-test >/dev/null || fail "the exposition checker accepts what it should refuse"

# Refused at once: a public address without --insecure, endpoints that are not plain
# HTTP, and garbage.
for bad in tcp://0.0.0.0:9464 "shm:$WORK/metrics.sock" tls://127.0.0.1:9464 garbage; do
    rc=0
    timeout 10 "$SERVER_BIN" --listen "unix:$WORK/never.sock" --metrics "$bad" >"$WORK/bad.out" 2>&1 || rc=$?
    if [ "$rc" = 0 ] || [ "$rc" = 124 ] || ! grep -q -- "--metrics" "$WORK/bad.out"; then
        failures+=("--metrics $bad: exit $rc, expected a refusal naming --metrics: $(cat "$WORK/bad.out")")
    fi
done
"$SERVER_BIN" --help >"$WORK/help.txt"
grep -q -- '--metrics ENDPOINT' "$WORK/help.txt" || failures+=("--help does not document --metrics")

# --max-sessions 2 gives an address one session (--max-sessions-per-peer's default);
# the server's own user on the unix socket is not limited.
start_server srv --max-sessions 2 --max-backends 1 --metrics tcp://127.0.0.1:0 --metrics-per-session
METRICS=$(wait_for_line "$srv_LOG" 'metrics on tcp://127\.0\.0\.1:[0-9]+' 10 | grep -oE 'tcp://127\.0\.0\.1:[0-9]+') ||
    { cat "$srv_LOG" >&2; fail "the server did not say where it serves metrics"; }
note "metrics on $METRICS"

# scrape NAME [PATH]: one checked scrape into $WORK/NAME.txt; a scrape that fails, or
# whose text breaks the format, ends the test.
scrape() {
    local name=$1 rc=0
    $SCRAPE "$METRICS" "${2:-/metrics}" >"$WORK/$name.txt" 2>"$WORK/$name.err" || rc=$?
    [ "$rc" = 0 ] || { cat "$WORK/$name.err" "$WORK/$name.txt" >&2; fail "$name: the scrape failed or is invalid"; }
}
# value NAME SERIES: the value of SERIES (name and labels, as rendered) in scrape NAME.
value() { awk -v series="$2 " 'index($0, series) == 1 { print substr($0, length(series) + 1) }' "$WORK/$1.txt"; }
# expect NAME SERIES OP NUMBER: a failure unless SERIES's value OP (-eq, -gt, ...) NUMBER.
expect() {
    local got
    got=$(value "$1" "$2")
    if [ -z "$got" ] || ! [ "$got" "$3" "$4" ]; then
        failures+=("$1: expected $2 $3 $4, got '${got:-no such series}'")
    fi
}
# await SERIES OP NUMBER: scrapes until SERIES's value OP NUMBER (the listener counts
# a session's figures when it reaps its worker), for up to 10 s; the last scrape is `await`.
await() {
    local i got
    for i in $(seq 100); do
        scrape await
        got=$(value await "$1")
        [ -n "$got" ] && [ "$got" "$2" "$3" ] && return 0
        sleep 0.1
    done
    failures+=("expected $1 $2 $3 within 10 s, got '${got:-no such series}'")
}
# hold NAME ENDPOINT: a session that stays open (up to 60 s) until killed.
hold() {
    timeout 70 "$CLIENT" "$2" --hold 60 >"$WORK/$1.out" 2>&1 &
    HOLDER[$1]=$!
    SERVER_PIDS+=("$!")
    wait_for_line "$WORK/$1.out" '^(accepted|message|reply): ' 15 >/dev/null ||
        { cat "$WORK/$1.out" "$srv_LOG" >&2; fail "$1: the server did not answer"; }
}
refused() { echo "ggml_remote_guests_refused_total{reason=\"$1\"}"; }
commands_refused() { echo "ggml_remote_commands_refused_total{reason=\"$1\"}"; }

scrape start
grep -qx 'status: 200' "$WORK/start.txt" || failures+=("start: not a 200 answer: $(head -n2 "$WORK/start.txt")")
grep -qx 'content-type: text/plain; version=0.0.4' "$WORK/start.txt" ||
    failures+=("start: wrong content type: $(sed -n 2p "$WORK/start.txt")")
expect start ggml_remote_sessions_live -eq 0
expect start ggml_remote_sessions_max -eq 2
expect start ggml_remote_commands_total -eq 0
expect start "$(refused version_mismatch)" -eq 0
grep -qE '^ggml_remote_build_info\{version="[0-9]+\.[0-9]+\.[0-9]+",ggml="[^"]+"\} 1$' "$WORK/start.txt" ||
    failures+=("start: no build_info with the server's and ggml's versions")
expect start 'ggml_remote_device_memory_total_bytes{device="CPU"}' -gt 0
expect start 'ggml_remote_device_memory_free_bytes{device="CPU"}' -gt 0

# A guest that ends: its figures stay in the totals.
"$RTT" "$srv_UNIX" 200 >"$WORK/rtt.out" 2>&1 || { cat "$WORK/rtt.out" >&2; fail "ggml-remote-rtt failed"; }
await ggml_remote_sessions_live -eq 0
await ggml_remote_commands_total -gt 1200
expect await ggml_remote_sessions_started_total -eq 1
expect await ggml_remote_received_bytes_total -gt $((320 << 20))
expect await ggml_remote_sent_bytes_total -gt $((320 << 20))
grep -q 'session="' "$WORK/await.txt" && failures+=("a session that ended is still listed")
note "after ggml-remote-rtt: $(grep -E '^ggml_remote_(commands|received_bytes|sent_bytes)_total ' "$WORK/await.txt" |
    tr '\n' ' ')"

# A handshake with another protocol version: the worker tells the listener why.
timeout 20 "$CLIENT" "$srv_UNIX" --protocol-version next >"$WORK/newer.out" 2>&1 || true
grep -q 'code=version_mismatch' "$WORK/newer.out" || failures+=("newer: not refused: $(cat "$WORK/newer.out")")
await "$(refused version_mismatch)" -eq 1
before_live=$(value await ggml_remote_commands_total)

# A live session is listed with its id and peer, and counts in the totals.
hold tcp1 "$srv_TCP"
scrape live
expect live ggml_remote_sessions_live -eq 1
tcp1_series=$(grep -oE '^ggml_remote_session_commands_total\{session="[0-9]+",peer="tcp://127\.0\.0\.1:[0-9]+"\}' \
    "$WORK/live.txt" || true)
if [ -z "$tcp1_series" ]; then
    failures+=("live: no per-session series with the guest's session and peer")
else
    expect live "$tcp1_series" -eq 1  # its handshake
fi
expect live ggml_remote_commands_total -eq $((before_live + 1))

# Refusals at the listener: the address's second session, then a full server.
hold tcp2 "$srv_TCP"
grep -q 'code=limit_exceeded' "$WORK/tcp2.out" || failures+=("tcp2: not refused: $(cat "$WORK/tcp2.out")")
hold unix1 "$srv_UNIX"
hold unix2 "$srv_UNIX"
grep -q 'code=limit_exceeded' "$WORK/unix2.out" || failures+=("unix2: not refused: $(cat "$WORK/unix2.out")")
scrape full
expect full "$(refused peer_limit)" -eq 1
expect full "$(refused server_full)" -eq 1
expect full ggml_remote_sessions_live -eq 2
note "refused: $(grep -E '^ggml_remote_guests_refused_total.* [1-9]' "$WORK/full.txt" | tr '\n' ' ')"

# A scraper that connects and says nothing holds up neither the listener nor scrapes.
exec 4<>"/dev/tcp/127.0.0.1/${METRICS##*:}"
kill "${HOLDER[unix1]}"
await ggml_remote_sessions_live -eq 1
scrape beside-idle
expect beside-idle ggml_remote_sessions_live -eq 1

# Commands over a session's limit (--max-backends 1), while it lives and after it ended.
mkfifo "$WORK/backends.in"
"$MEMORY_CLIENT" "$srv_UNIX" backends 3 <"$WORK/backends.in" >"$WORK/backends.out" 2>&1 &
backends_pid=$!
exec 3>"$WORK/backends.in"
echo go >&3
wait_for_line "$WORK/backends.out" '^result: ' 15 >/dev/null ||
    { cat "$WORK/backends.out" >&2; fail "backends: no result"; }
scrape over-limit
note "over the limit: $(grep -E '^ggml_remote_(session_)?commands_refused_total.*limit_reached' "$WORK/over-limit.txt" |
    tr '\n' ' ')"
expect over-limit "$(commands_refused limit_reached)" -eq 1
grep -qE '^ggml_remote_session_commands_refused_total\{session="[0-9]+",peer="unix:[^"]*",reason="limit_reached"\} 1$' \
    "$WORK/over-limit.txt" || failures+=("over-limit: the session's own refusal is not listed")
exec 3>&-
wait "$backends_pid" || true
await ggml_remote_sessions_live -eq 1
expect await "$(commands_refused limit_reached)" -eq 1
exec 4>&-

# Anything else: 404.
scrape other /other
grep -qx 'status: 404' "$WORK/other.txt" || failures+=("other: $(head -n1 "$WORK/other.txt"), expected 404")
$SCRAPE "$METRICS" --raw-bytes 9000 >"$WORK/endless.txt" 2>&1 || true
grep -qx 'status: 404' "$WORK/endless.txt" || failures+=("endless request: $(head -n1 "$WORK/endless.txt")")

# The same on a unix socket, of a TLS server whose workers turn away guests that
# fail the TLS handshake: a plain tcp:// guest and one with the wrong key.
psktool -u guest -p "$WORK/keys.psk" >/dev/null
psktool -u guest -p "$WORK/wrong.psk" >/dev/null
start_server tls --tls-psk "$WORK/keys.psk" --metrics "unix:$WORK/metrics.sock"
wait_for_line "$tls_LOG" "metrics on unix:$WORK/metrics.sock" 10 >/dev/null || fail "no unix metrics endpoint"
METRICS=unix:$WORK/metrics.sock
scrape unix
expect unix ggml_remote_sessions_max -eq 64
expect unix "$(refused tls_failed)" -eq 0
timeout 20 "$CLIENT" "$tls_TCP" >"$WORK/plain.out" 2>&1 || true
timeout 20 "$CLIENT" "$tls_TCP" --psk "$WORK/wrong.psk" >"$WORK/wrong-key.out" 2>&1 || true
await "$(refused tls_failed)" -eq 2
expect await ggml_remote_sessions_started_total -eq 0

# Bounded labels: a server without --metrics-per-session.
start_server bounded --metrics "unix:$WORK/bounded-metrics.sock"
wait_for_line "$bounded_LOG" "metrics on unix:$WORK/bounded-metrics.sock" 10 >/dev/null || fail "no bounded endpoint"
METRICS=unix:$WORK/bounded-metrics.sock

scrape bounded-start
series_before=$(grep -c . "$WORK/bounded-start.txt")

# 20 guests that compute: their computes, their waits for cores and their round
# trips fill the histograms; each session's length is counted when it ends.
for i in $(seq 20); do
    GGML_REMOTE_SERVERS=$bounded_UNIX timeout 60 "$ASYNC_CLIENT" "$PLUGIN" deferred >"$WORK/async.out" 2>&1 ||
        { cat "$WORK/async.out" >&2; fail "computing guest $i failed"; }
done
# A status query is served by a worker too, but is no guest's session.
"$SERVER_BIN" status --connect "$bounded_UNIX" >"$WORK/status.out" 2>&1 ||
    { cat "$WORK/status.out" >&2; fail "the status query failed"; }
await ggml_remote_session_length_seconds_count -eq 20
await ggml_remote_sessions_live -eq 0
expect await ggml_remote_sessions_started_total -eq 20
expect await ggml_remote_session_length_seconds_count -eq 20
series_after=$(grep -c . "$WORK/await.txt")
[ "$series_after" -eq "$series_before" ] ||
    failures+=("the series grew with the sessions: $series_before lines before 20 guests, $series_after after")
expect await ggml_remote_graph_compute_seconds_count -ge 60
expect await 'ggml_remote_graph_compute_seconds_bucket{le="+Inf"}' -ge 3
expect await ggml_remote_cores_wait_seconds_count -ge 1
expect await ggml_remote_compute_round_trip_seconds_count -ge 1
grep -q 'session=' "$WORK/await.txt" && failures+=("a series names a session without --metrics-per-session")
note "histograms: $(grep -E '^ggml_remote_[a-z_]+_seconds_(count|sum) ' "$WORK/await.txt" | tr '\n' ' ')"

# Live sessions add only their tenant's two series (one tenant here: this test's
# user), whatever their number; sessions that only shook hands are no guests'.
hold live1 "$bounded_UNIX"
hold live2 "$bounded_UNIX"
scrape bounded-live
expect bounded-live ggml_remote_sessions_live -eq 2
expect bounded-live ggml_remote_sessions_started_total -eq 20
tenant="uid $(id -u)"
expect bounded-live "ggml_remote_tenant_sessions_live{tenant=\"$tenant\"}" -eq 2
expect bounded-live "ggml_remote_tenant_memory_bytes{tenant=\"$tenant\"}" -ge 0
series_live=$(grep -c . "$WORK/bounded-live.txt")
[ "$series_live" -eq $((series_before + 2)) ] ||
    failures+=("live sessions of one tenant added other than its 2 series: $series_before lines before, $series_live with 2 live sessions")
kill "${HOLDER[live1]}" "${HOLDER[live2]}"

kill -0 "$srv_PID" 2>/dev/null || failures+=("the server exited")
finish "$srv_LOG"
