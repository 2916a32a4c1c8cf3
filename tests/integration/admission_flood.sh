# admission_flood: a peer that connects and hangs up in a loop delays no other
# peer's guest (issue 40, class 2). Each connection used to cost a fork and an exec
# of the worker program before anything was checked, so the listener could not
# drain its accept queue while one peer flooded it. Now, over unix, tcp and tls:
#  - while one peer floods, another peer's guest is accepted within ADMIT_MS (1 s),
#    each of three times (plus four times what the same guest takes without the
#    flood, measured first: on a busy machine a worker's start is slower too);
#  - the flooding peer starts no more workers than its start budget allows
#    (--max-starts-per-peer RATE: a burst of 4 x RATE, then RATE a second), however
#    many connections it makes; the rest are refused at accept;
#  - the refusals are logged a few lines per peer, then one a second, not a line per
#    connection.
# usage: admission_flood.sh HANDSHAKE_CLIENT FLOOD_CLIENT
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/llama_helpers.sh"

CLIENT=${1:?usage: admission_flood.sh HANDSHAKE_CLIENT FLOOD_CLIENT}
FLOOD=${2:?usage: admission_flood.sh HANDSHAKE_CLIENT FLOOD_CLIENT}
ADMIT_MS=1000
RATE=4
FLOOD_SECONDS=6
FLOODERS=2  # processes, each with many connections in flight
failures=()

# handshake LABEL [CLIENT ARGS...] [-- RUNNER...]: one guest's handshake; prints
# how long it took in ms, or "refused".
handshake() {
    local label=$1 args=() runner=() started
    shift
    while [ $# -gt 0 ] && [ "$1" != -- ]; do args+=("$1"); shift; done
    if [ $# -gt 0 ]; then shift; runner=("$@"); fi
    started=$(now_ms)
    "${runner[@]}" timeout 30 "$CLIENT" "${args[@]}" >"$WORK/$label.txt" 2>&1 || true
    if grep -q '^accepted: ' "$WORK/$label.txt"; then echo $(($(now_ms) - started)); else echo refused; fi
}

# probe LABEL LIMIT_MS ARGS...: a handshake during the flood, within LIMIT_MS.
probe() {
    local label=$1 limit=$2 took
    shift 2
    took=$(handshake "$label" "$@")
    if [ "$took" = refused ]; then
        failures+=("$label: not accepted during the flood: $(tr '\n' ' ' <"$WORK/$label.txt")")
    elif [ "$took" -gt "$limit" ]; then
        failures+=("$label: accepted after $took ms during the flood (at most $limit)")
    else
        note "$label: accepted in $took ms during the flood (at most $limit)"
    fi
}

# quiet_limit LABEL ARGS...: sets LIMIT to ADMIT_MS plus four times the slowest of
# three handshakes without a flood.
quiet_limit() {
    local label=$1 slowest=0 took i
    shift
    for i in 1 2 3; do
        took=$(handshake "$label-quiet$i" "$@")
        [ "$took" != refused ] || fail "$label: a guest was refused without any flood: $(cat "$WORK/$label-quiet$i.txt")"
        [ "$took" -le "$slowest" ] || slowest=$took
    done
    LIMIT=$((ADMIT_MS + 4 * slowest))
}

# flood_with LABEL LOG PEER_REGEX FLOOD_ARGS... -- PROBE ARGS...: floods, and once the
# server has seen the flooding peer (PEER_REGEX in LOG), probes three times.
flood_with() {
    local label=$1 log=$2 peer=$3 flood_args=() flooders=() i flooder
    shift 3
    while [ "$1" != -- ]; do flood_args+=("$1"); shift; done
    shift
    quiet_limit "$label" "$@"
    for i in $(seq "$FLOODERS"); do
        "${flood_args[@]}" >"$WORK/$label-flood$i.txt" 2>&1 &
        flooders+=($!)
        SERVER_PIDS+=($!)
    done
    wait_for_line "$log" "$peer" 10 >/dev/null || failures+=("$label: the flood never reached the server")
    for i in 1 2 3; do probe "$label-probe$i" "$LIMIT" "$@"; done
    for flooder in "${flooders[@]}"; do wait "$flooder" || true; done
    note "$label: $(cat "$WORK/$label"-flood*.txt | tr '\n' ' ')"
}

# expect_bounded LABEL LOG PEER_REGEX: the flooding peer started at most its budget of workers.
expect_bounded() {
    local label=$1 log=$2 peer=$3 started most
    started=$(grep -cE "session [0-9]+ \($peer.*: connected, worker pid" "$log" || true)
    # The burst, RATE a second over the flood, and one second's slack for its start.
    most=$((4 * RATE + RATE * (FLOOD_SECONDS + 1)))
    if [ "$started" -gt "$most" ]; then
        failures+=("$label: the flooding peer started $started workers (its budget: at most $most)")
    else
        note "$label: the flooding peer started $started workers (budget: at most $most)"
    fi
    local lines
    lines=$(grep -cE "refused $peer.*start" "$log" || true)
    # A few at once, then one a second (kRefusalLinesBurst, kRefusalLinesPerSecond).
    [ "$lines" -le $((5 + FLOOD_SECONDS + 2)) ] ||
        failures+=("$label: $lines log lines for the flood's refusals (five, then one a second at most)")
}

# --- tcp: 127.0.0.2 floods, 127.0.0.1 is served.
start_server tcp --max-starts-per-peer "$RATE"
flood_with tcp "$tcp_LOG" 'tcp://127\.0\.0\.2' "$FLOOD" "$tcp_TCP" "$FLOOD_SECONDS" --from 127.0.0.2 -- "$tcp_TCP"
expect_bounded tcp "$tcp_LOG" 'tcp://127\.0\.0\.2'

# --- tls: key-less connections from 127.0.0.2; a guest with the key from 127.0.0.1.
psktool -u guest -p "$WORK/keys.psk" >/dev/null
start_server tls --tls-psk "$WORK/keys.psk" --max-starts-per-peer "$RATE"
flood_with tls "$tls_LOG" 'tls://127\.0\.0\.2' "$FLOOD" "$tls_TCP" "$FLOOD_SECONDS" --from 127.0.0.2 -- \
    "$tls_TCP" --psk "$WORK/keys.psk"
expect_bounded tls "$tls_LOG" 'tls://127\.0\.0\.2'

# --- unix: user 65534 floods, user 4242 is served (the server's own user and root
# may start as many as they like: they can stop the server anyway).
if [ "$(id -u)" = 0 ]; then
    start_server unix --max-starts-per-peer "$RATE"
    chmod 711 "$WORK"
    chmod 666 "${unix_UNIX#unix:}"
    as_user() { setpriv --reuid="$1" --regid="$1" --clear-groups "${@:2}"; }
    flood_with unix "$unix_LOG" 'unix:.* uid 65534' as_user 65534 "$FLOOD" "$unix_UNIX" "$FLOOD_SECONDS" -- \
        "$unix_UNIX" -- setpriv --reuid=4242 --regid=4242 --clear-groups
    expect_bounded unix "$unix_LOG" 'unix:.* uid 65534'
else
    note "not root: the unix part (another user's flood) is left out"
fi

finish "$tcp_LOG"
