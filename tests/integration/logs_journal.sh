# logs_journal: the server's log lines carry a level; under systemd (JOURNAL_STREAM
# names stderr's device and inode) they carry the journal's priority prefix instead
# of a time of their own, which the journal adds.
source "$(dirname "$0")/lib.sh"

start_server plain
line=$(grep -m1 'listening on' "$plain_LOG")
[[ "$line" =~ ^[0-9]{4}-[0-9]{2}-[0-9]{2}\ [0-9]{2}:[0-9]{2}:[0-9]{2}\ [+-][0-9]{4}\ INFO\ ggml-remote-server:\ listening\ on ]] ||
    fail "a plain line lacks its time zone or level: $line"
note "$line"

: >"$WORK/journal.log"
JOURNAL_STREAM=$(stat -L -c '%d:%i' "$WORK/journal.log") start_server journal
line=$(grep -m1 'listening on' "$journal_LOG")
[[ "$line" =~ ^\<6\>ggml-remote-server:\ listening\ on ]] || fail "a journal line lacks its priority, or has a time: $line"
if grep -qvE '^<[0-7]>ggml-remote-server: ' "$journal_LOG"; then
    fail "a line for the journal without its priority: $(grep -vE '^<[0-7]>' "$journal_LOG" | head -1)"
fi
note "$line"

# Another file's identity in JOURNAL_STREAM (stderr redirected elsewhere): plain lines.
JOURNAL_STREAM=1:1 start_server elsewhere
grep -q '^[0-9]\{4\}-.* INFO ggml-remote-server: listening on' "$elsewhere_LOG" ||
    fail "a JOURNAL_STREAM that is not stderr still changed the lines: $(head -1 "$elsewhere_LOG")"
echo PASS
