# status_upload: `status` and /metrics show each session's weight upload (issue 27).
#  - a tcp guest of the small model, once it generates: its session expects about
#    the model's bytes of weights, received all of them and found none; the table
#    shows 100% with its line below, --json the three figures, and /metrics them per
#    session and in the totals (metrics_scrape.py checks each family's HELP and TYPE);
#  - with the weight store holding the model, a second guest finds its weights:
#    found most of what it expects, received the rest;
#  - status --watch prints snapshots on a pipe until SIGINT ends it (exit 0), and
#    ends with an error naming the server once the server is gone.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/llama_helpers.sh"

start_server srv --weight-store "$WORK/store" --metrics "unix:$WORK/metrics.sock" --metrics-per-session
export GGML_REMOTE_CACHE_DIR=$WORK/cache
path=$(model small f16)
model_bytes=$(stat -c %s "$path")
failures=()

# upload_of NAME: "EXPECTED RECEIVED FOUND" of the one session in `status --json`,
# saved as $WORK/NAME.json.
upload_of() {
    "$SERVER_BIN" status --connect "$srv_UNIX" --json >"$WORK/$1.json" || fail "$1: status --json failed"
    python3 -c 'import json, sys
sessions = json.load(open(sys.argv[1]))["sessions"]
assert len(sessions) == 1, sessions
s = sessions[0]
print(s["weights_expected_bytes"], s["weights_received_bytes"], s["weights_found_bytes"])' "$WORK/$1.json" ||
        fail "$1: not one session with its upload: $(cat "$WORK/$1.json")"
}
# metric NAME: its value in $WORK/metrics.txt (series as rendered, labels included).
metric() { awk -v name="$1" '$1 == name { print $2 }' "$WORK/metrics.txt"; }

# The first guest sends every weight; the store keeps them.
start_guest first "$srv_TCP" "$path" 100000
first=$GUEST_PID
wait_generating first "$first"
read -r expected received found <<<"$(upload_of first)"
note "first guest: expected $expected, received $received, found $found of a $model_bytes-byte model"
[ "$expected" -gt $((model_bytes / 2)) ] && [ "$expected" -le "$model_bytes" ] ||
    failures+=("first: expected $expected bytes of weights for a model file of $model_bytes")
[ "$received" = "$expected" ] && [ "$found" = 0 ] ||
    failures+=("first: received $received and found $found of $expected expected; wanted all received")
"$SERVER_BIN" status --connect "$srv_UNIX" >"$WORK/first.txt"
grep -qE ' UPLOAD$' "$WORK/first.txt" || failures+=("the table has no UPLOAD column: $(cat "$WORK/first.txt")")
grep -qE ' 100%$' "$WORK/first.txt" || failures+=("the session's row does not show 100%: $(cat "$WORK/first.txt")")
grep -qE '^     weights: [0-9.]+ of [0-9.]+ MiB sent, 0\.0 MiB found in the weight store; all there$' \
    "$WORK/first.txt" || failures+=("no upload line below the session: $(cat "$WORK/first.txt")")
sed -n '/^ID /,$p' "$WORK/first.txt" | sed 's/^/   /'

python3 "$(dirname "$0")/metrics_scrape.py" "unix:$WORK/metrics.sock" >"$WORK/metrics.txt" ||
    failures+=("the metrics scrape failed or is invalid: $(cat "$WORK/metrics.txt")")
series=$(grep -oE '^ggml_remote_session_weights_expected_bytes\{[^}]*\}' "$WORK/metrics.txt" || true)
labels=${series#ggml_remote_session_weights_expected_bytes}
[ "$(metric "ggml_remote_session_weights_expected_bytes$labels")" = "$expected" ] ||
    failures+=("metrics: the session's expected bytes are not $expected: '$series'")
[ "$(metric "ggml_remote_session_weights_received_bytes$labels")" = "$received" ] ||
    failures+=("metrics: the session's received bytes are not $received")
[ "$(metric "ggml_remote_session_weights_found_bytes$labels")" = 0 ] || failures+=("metrics: found bytes not 0")
[ "$(metric ggml_remote_weights_expected_bytes)" = "$expected" ] || failures+=("metrics: no total of expected")
grep -E '^ggml_remote_(session_)?weights_' "$WORK/metrics.txt" | sed 's/^/   /'
kill "$first" 2>/dev/null || true
wait "$first" 2>/dev/null || true

# The second guest names its weights by digest: the store has them.
live_sessions() { "$SERVER_BIN" status --connect "$srv_UNIX" --json | grep -c '"worker_pid"' || true; }
for i in $(seq 100); do
    [ "$(live_sessions)" = 0 ] && break
    sleep 0.1
done
start_guest second "$srv_TCP" "$path" 100000
second=$GUEST_PID
wait_generating second "$second"
read -r expected2 received2 found2 <<<"$(upload_of second)"
note "second guest: expected $expected2, received $received2, found $found2"
[ "$found2" -gt $((expected2 / 2)) ] && [ "$received2" -lt "$found2" ] &&
    [ $((received2 + found2)) = "$expected2" ] ||
    failures+=("second: received $received2 and found $found2 of $expected2; wanted most found")

# --watch on a pipe: successive snapshots; SIGINT ends it cleanly.
"$SERVER_BIN" status --connect "$srv_UNIX" --watch 0.2 >"$WORK/watch.txt" 2>"$WORK/watch.err" &
watch=$!
wait_for_line "$WORK/watch.txt" 'weights: .* found in the weight store' 10 >/dev/null ||
    failures+=("--watch showed no upload: $(cat "$WORK/watch.txt" "$WORK/watch.err")")
sleep 0.5
kill -INT "$watch"
rc=0
wait "$watch" || rc=$?
snapshots=$(grep -c '^ggml-remote-server pid ' "$WORK/watch.txt" || true)
[ "$rc" = 0 ] && [ "$snapshots" -ge 2 ] ||
    failures+=("--watch: exit $rc after $snapshots snapshots, expected 0 after at least 2: $(cat "$WORK/watch.err")")
! grep -q $'\033' "$WORK/watch.txt" || failures+=("--watch cleared the screen of a pipe")

# The server goes away under --watch: an error that says so.
"$SERVER_BIN" status --connect "$srv_UNIX" --watch 0.2 >"$WORK/watch-gone.txt" 2>"$WORK/watch-gone.err" &
watch=$!
wait_for_line "$WORK/watch-gone.txt" '^ID ' 10 >/dev/null || failures+=("--watch did not start")
kill "$second" 2>/dev/null || true
kill "$srv_PID"
rc=0
timeout 20 tail --pid="$watch" -f /dev/null || true
wait "$watch" || rc=$?
[ "$rc" = 1 ] && grep -q "the server at $srv_UNIX went away" "$WORK/watch-gone.err" ||
    failures+=("--watch with the server gone: exit $rc, '$(cat "$WORK/watch-gone.err")'")
note "--watch with the server gone: $(cat "$WORK/watch-gone.err")"
finish "$srv_LOG"
