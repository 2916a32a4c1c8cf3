# weight_store: a server with --weight-store. The first tcp guest of a model sends
# its weights and the server keeps them; the next one names them by digest and
# sends none of them (the server's log counts what it found), with the same tokens
# as a local run. The guest hashes the model file once: the digests are kept in its
# cache. Two guests at once map one copy: their workers map the same store files.
# The metrics endpoint counts what the store found and saved.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/llama_helpers.sh"

start_server srv --weight-store "$WORK/store" --metrics "unix:$WORK/metrics.sock"
export GGML_REMOTE_CACHE_DIR=$WORK/cache
path=$(model small f16)
N=16
failures=()

run_local local "$path" "$N"

# store_line SESSION: what the session's closing line says of the store.
store_line() { session_end "$srv_LOG" "$1" | sed -n 's/.*weight store: \(.*\)/\1/p'; }
bytes_in() { session_end "$srv_LOG" "$1" | sed -n 's/.* graph computes, \(.*\) in, .*/\1/p'; }

for run in first second; do
    session=$(($(sessions_connected "$srv_LOG") + 1))
    run_guest_ok "$run" "$srv_TCP" "$path" "$N"
    assert_same_tokens local "$run"
    eval "${run}_store=\"\$(store_line $session)\" ${run}_in=\"\$(bytes_in $session)\""
done
note "first guest: $first_in in, weight store: $first_store"
note "second guest: $second_in in, weight store: $second_store"
[[ $first_store =~ ^0\ found\ .*,\ ([0-9]+)\ not\ found$ ]] && [ "${BASH_REMATCH[1]}" -gt 0 ] ||
    failures+=("the first guest should find nothing and send its weights: '$first_store'")
stored=${BASH_REMATCH[1]:-0}
[[ $second_store =~ ^$stored\ found\ \(.*\ not\ sent\),\ 0\ not\ found$ ]] ||
    failures+=("the second guest should find all $stored weights: '$second_store'")
[ "$first_in" != "$second_in" ] || failures+=("the second guest sent as much as the first: $second_in")

# The metrics: the totals of ended sessions, scraped and checked line by line.
python3 "$(dirname "$0")/metrics_scrape.py" "unix:$WORK/metrics.sock" >"$WORK/metrics.txt" ||
    failures+=("the metrics scrape failed or is invalid: $(cat "$WORK/metrics.txt")")
metric() { awk -v name="$1" '$1 == name { print $2 }' "$WORK/metrics.txt"; }
[ "$(metric ggml_remote_store_hits_total)" = "$stored" ] ||
    failures+=("metrics: store hits $(metric ggml_remote_store_hits_total), expected $stored")
[ "$(metric ggml_remote_store_misses_total)" = "$stored" ] ||
    failures+=("metrics: store misses $(metric ggml_remote_store_misses_total), expected $stored")
[ "${metric_saved:=$(metric ggml_remote_store_saved_bytes_total)}" -gt 0 ] 2>/dev/null ||
    failures+=("metrics: no bytes saved: '$metric_saved'")

# One record file for the model, with a digest per weight looked up, hashed once.
records=$(find "$WORK/cache/digests" -type f | wc -l)
[ "$records" = 1 ] || failures+=("expected one digest file for the model, found $records")
record_bytes=$(find "$WORK/cache/digests" -type f -exec cat {} + | wc -c)
[ "$record_bytes" = $((stored * 32)) ] ||
    failures+=("the digest file holds $record_bytes bytes, expected $stored records of 32")

# Two guests at once: their workers map the same entry files.
start_guest one "$srv_TCP" "$path" 100000
one=$GUEST_PID
start_guest two "$srv_TCP" "$path" 100000
two=$GUEST_PID
wait_generating one "$one"
wait_generating two "$two"
worker_pids=($(workers))
[ "${#worker_pids[@]}" = 2 ] || failures+=("expected 2 workers, found ${#worker_pids[@]}")
if [ "${#worker_pids[@]}" = 2 ]; then
    a=$(store_files_mapped "$WORK/store" entries "${worker_pids[0]}")
    b=$(store_files_mapped "$WORK/store" entries "${worker_pids[1]}")
    [ -n "$a" ] && [ "$a" = "$b" ] ||
        failures+=("the two workers do not map the same store entries: $(wc -l <<<"$a") vs $(wc -l <<<"$b")")
    [ "$(wc -l <<<"$a")" = "$stored" ] || failures+=("a worker maps $(wc -l <<<"$a") entries, expected $stored")
fi
kill "$one" "$two" 2>/dev/null || true
finish "$srv_LOG"
