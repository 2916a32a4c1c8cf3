# config_file: --config FILE sets flags as the command line would. A server started
# with only a file listens where the file says, and its session workers get the
# file's settings (a status query's worker answers with --max-sessions); a flag on
# the command line wins over the file's; a SIGUSR2 replacement keeps the settings
# without reading the file; a bad line is refused with FILE:LINE and exit status 2,
# before anything listens.
source "$(dirname "$0")/lib.sh"

failures=()
# serve NAME ARGS...: starts a server (its socket is $WORK/NAME.sock, set by the
# file) and waits for the socket.
serve() {
    local name=$1; shift
    "$SERVER_BIN" "$@" >"$WORK/$name.log" 2>&1 &
    SERVER_PIDS+=("$!")
    wait_for_socket "$WORK/$name.sock" "$!" "$WORK/$name.log" "server $name"
}
# max_sessions ENDPOINT: --max-sessions as a session worker of that server has it.
max_sessions() {
    "$SERVER_BIN" status --connect "$1" --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["server"]["max_sessions"])'
}

cat >"$WORK/server.conf" <<CONF
# a test server
listen = unix:$WORK/filed.sock

max-sessions = 5
   memory-quota=1G
no-repack
CONF
serve filed --config "$WORK/server.conf"
got=$(max_sessions "unix:$WORK/filed.sock")
note "a server configured by its file: max_sessions $got"
[ "$got" = 5 ] || failures+=("the file's max-sessions = 5 did not reach the worker: $got")

# SIGUSR2: the new listener gets the file's settings as flags and does not read the
# file again (here it would refuse it).
cp "$WORK/server.conf" "$WORK/server.conf.good"
echo "max-sessions = many" >>"$WORK/server.conf"
kill -USR2 "${SERVER_PIDS[-1]}"
for i in $(seq 100); do
    [ "$(grep -c 'listening on' "$WORK/filed.log")" -ge 2 ] && break
    sleep 0.1
done
grep -q 'SIGUSR2: replacing the listener' "$WORK/filed.log" || failures+=("SIGUSR2 did not replace the listener")
kill -0 "${SERVER_PIDS[-1]}" 2>/dev/null || failures+=("the listener replaced by SIGUSR2 is gone: $(tail -n2 "$WORK/filed.log")")
got=$(max_sessions "unix:$WORK/filed.sock" || true)
note "after SIGUSR2, with the file now refused: max_sessions $got"
[ "$got" = 5 ] || failures+=("after SIGUSR2 the listener does not serve with the file's settings: $got")
cp "$WORK/server.conf.good" "$WORK/server.conf"

# The command line comes after the file: its --max-sessions wins, its --listen adds.
sed "s|filed.sock|both-file.sock|" "$WORK/server.conf" >"$WORK/both.conf"
serve both --config="$WORK/both.conf" --max-sessions 7 --listen "unix:$WORK/both.sock"
got=$(max_sessions "unix:$WORK/both.sock")
note "the command line's --max-sessions 7 over the file's 5: $got"
[ "$got" = 7 ] || failures+=("--max-sessions 7 on the command line did not win over the file: $got")
[ -S "$WORK/both-file.sock" ] || failures+=("the file's listen was dropped by the command line's --listen")

# refused NAME EXPECTED FILE-TEXT: a server with that file exits 2 at once, saying EXPECTED.
refused() {
    local name=$1 expected=$2 rc=0
    printf '%s\n' "$3" >"$WORK/$name.conf"
    timeout 10 "$SERVER_BIN" --config "$WORK/$name.conf" --listen "unix:$WORK/$name.sock" \
        >"$WORK/$name.log" 2>&1 || rc=$?
    note "$name: exit $rc: $(head -n1 "$WORK/$name.log")"
    [ "$rc" = 2 ] || failures+=("$name: the server exited with $rc, not 2 (124: it served)")
    grep -qF -- "$expected" "$WORK/$name.log" || failures+=("$name: no '$expected' in: $(cat "$WORK/$name.log")")
    [ ! -e "$WORK/$name.sock" ] || failures+=("$name: the server listened before refusing")
}
refused bad-value "$WORK/bad-value.conf:3: --max-sessions: expected a whole number" \
    "$(printf '# three lines\ncores = 2\nmax-sessions = many')"
refused unknown-name "$WORK/unknown-name.conf:1: unknown name 'max-session'" "max-session = 4"
refused switch-value "$WORK/switch-value.conf:1: --no-repack takes no value" "no-repack = yes"
refused nested "$WORK/nested.conf:2: config cannot be set" "$(printf 'cores = 2\nconfig = /etc/other.conf')"
refused dashes "$WORK/dashes.conf:1: expected \`name = value\`" "--max-sessions = 4"
refused help-inside "$WORK/help-inside.conf:1: unknown name 'help'" "help"

rc=0
timeout 10 "$SERVER_BIN" --config "$WORK/missing.conf" >"$WORK/missing.log" 2>&1 || rc=$?
[ "$rc" = 2 ] && grep -qF "cannot read $WORK/missing.conf: No such file" "$WORK/missing.log" ||
    failures+=("a missing file: exit $rc, $(cat "$WORK/missing.log")")

[ "${#failures[@]}" = 0 ] || { printf 'FAIL: %s\n' "${failures[@]}" >&2; exit 1; }
echo PASS
