# logs_json: with --log-format json every line the server writes, the listener's and
# its workers' (ggml's messages with -v included), is one JSON object with a time, a
# level and a message; the lines about a session name it and its peer. Under the
# journal each object follows its priority prefix.
source "$(dirname "$0")/lib.sh"

# check_lines LOG PREFIX GGML: every line of LOG is PREFIX then a JSON object, as said
# above; GGML=1: some of them are ggml's own messages.
check_lines() {
    python3 - "$1" "$2" "$3" <<'PY'
import json, re, sys
path, prefix, ggml_expected = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
problems, seen = [], {"session": 0, "worker": 0, "ggml": 0}
lines = open(path, "rb").read().decode("utf-8").splitlines()
for number, line in enumerate(lines, 1):
    match = re.match(prefix, line)
    if not match:
        problems.append(f"line {number} lacks its prefix /{prefix}/: {line!r}")
        continue
    try:
        entry = json.loads(line[match.end():])
    except ValueError as error:
        problems.append(f"line {number} is no JSON object ({error}): {line!r}")
        continue
    if not isinstance(entry, dict) or entry.get("level") not in ("error", "warning", "info"):
        problems.append(f"line {number} has no level: {line!r}")
    elif not isinstance(entry.get("message"), str) or not entry["message"]:
        problems.append(f"line {number} has no message: {line!r}")
    elif not re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", str(entry.get("time"))):
        problems.append(f"line {number} has no time: {line!r}")
    if "session" in entry:
        if not isinstance(entry["session"], int) or not entry.get("peer"):
            problems.append(f"line {number} names a session without its number or peer: {line!r}")
        seen["session"] += 1
        if "disconnected after" in entry["message"]:
            seen["worker"] += 1
    if re.match(r"(load_backend|ggml)", str(entry.get("message"))):
        seen["ggml"] += 1
print(f"-- {path}: {len(lines)} lines; about a session: {seen['session']}, "
      f"a worker's end: {seen['worker']}, ggml's: {seen['ggml']}")
if not lines:
    problems.append("no lines at all")
if seen["session"] == 0 or seen["worker"] == 0:
    problems.append("no line names a session, or no worker's line does")
if ggml_expected and seen["ggml"] == 0:
    problems.append("no line of ggml's (with -v)")
for problem in problems[:10]:
    print("FAIL:", problem, file=sys.stderr)
sys.exit(1 if problems else 0)
PY
}

# wait_for_ends LOG N: until N sessions' workers have logged their end.
wait_for_ends() {
    local i
    for i in $(seq 100); do
        [ "$(grep -c 'disconnected after' "$1")" -ge "$2" ] && return 0
        sleep 0.1
    done
    cat "$1" >&2
    fail "the workers did not log their sessions' ends"
}

start_server json --log-format json -v
"$SERVER_BIN" status --connect "$json_UNIX" >/dev/null
"$SERVER_BIN" status --connect "$json_UNIX" --json >/dev/null
wait_for_ends "$json_LOG" 2
check_lines "$json_LOG" '' 1 || { cat "$json_LOG" >&2; fail "a line of --log-format json is not as it should be"; }
grep -q '"message":"session 1 (unix[^"]*): connected, worker pid [0-9]*","session":1,"peer":"unix' "$json_LOG" ||
    fail "no 'connected' line with its session and peer: $(grep connected "$json_LOG")"

: >"$WORK/journal.log"
JOURNAL_STREAM=$(stat -L -c '%d:%i' "$WORK/journal.log") start_server journal --log-format json
"$SERVER_BIN" status --connect "$journal_UNIX" >/dev/null
wait_for_ends "$journal_LOG" 1
check_lines "$journal_LOG" '<[0-7]>' 0 || { cat "$journal_LOG" >&2; fail "a journal line is not <N> and an object"; }
echo PASS
