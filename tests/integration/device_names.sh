# device_names: a guest's device names follow the servers' places in
# GGML_REMOTE_SERVERS, not the order in which they answered. The first server's
# device is REMOTE0, the second's REMOTE1, ...; a server that is down leaves a gap
# and renames no other. llama-cli --list-devices shows what the plugin registered.
source "$(dirname "$0")/lib.sh"

start_server first
start_server second
DEAD=unix:$WORK/nobody-listens.sock

# list NAME SERVERS: llama-cli --list-devices through the plugin; the remote
# devices' lines in $WORK/NAME.devices ("REMOTEi: description @ endpoint").
list() {
    local name=$1 servers=$2 rc=0
    GGML_REMOTE_CONNECT_TIMEOUT_MS=1000 GGML_REMOTE_RECONNECT=0 timeout 60 \
        env GGML_BACKEND_PATH="$PLUGIN" GGML_REMOTE_SERVERS="$servers" llama-cli --list-devices \
        >"$WORK/$name.out" 2>"$WORK/$name.err" || rc=$?
    [ "$rc" = 0 ] || { tail -n 20 "$WORK/$name.err" >&2; fail "$name: llama-cli --list-devices exited with $rc"; }
    cat "$WORK/$name.out" "$WORK/$name.err" | sed -n 's/^ *\(REMOTE[0-9.]*: .*\)$/\1/p' >"$WORK/$name.devices"
    note "$name ($servers): $(tr '\n' ';' <"$WORK/$name.devices")"
}

failures=()
# expect NAME DEVICE ENDPOINT: device DEVICE was listed, and it is ENDPOINT's.
expect() {
    grep -qE "^$2: .* @ $3 " "$WORK/$1.devices" ||
        failures+=("$1: no $2 of $3 among: $(tr '\n' ';' <"$WORK/$1.devices")")
}
# expect_count NAME N: N remote devices were listed.
expect_count() {
    local count
    count=$(grep -c '^REMOTE' "$WORK/$1.devices" || true)
    [ "$count" = "$2" ] || failures+=("$1: $count remote devices instead of $2")
}

list both-up "$first_UNIX,$second_UNIX"
expect both-up REMOTE0 "$first_UNIX"
expect both-up REMOTE1 "$second_UNIX"
expect_count both-up 2

list first-down "$DEAD,$second_UNIX"
expect first-down REMOTE1 "$second_UNIX"
expect_count first-down 1
grep -q "$DEAD" "$WORK/first-down.err" || failures+=("first-down: the plugin did not name the server that is down")

list middle-down "$first_UNIX,$DEAD,$second_TCP"
expect middle-down REMOTE0 "$first_UNIX"
expect middle-down REMOTE2 "$second_TCP"
expect_count middle-down 2

finish "$second_LOG"
