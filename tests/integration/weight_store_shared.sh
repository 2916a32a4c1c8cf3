# weight_store_shared: guests of one tenant share what a worker makes of their
# weights (issue 27). Two tcp guests of a Q4_0 model that start together on an
# empty store: one sends each weight, the other waits for its entry, so their
# workers map the same entry files, and the same repacked images (r-<key>) of
# ggml-cpu's faster layout; both print a local run's tokens. Skipped where
# ggml-cpu has no repacked layout for Q4_0 on this CPU.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/llama_helpers.sh"

start_server srv --weight-store "$WORK/store"
path=$(model small q4_0)
failures=()
run_local local "$path" 24
local_bytes=$(($(wc -c <"$WORK/local.out") - 1))  # without its closing newline

export GGML_REMOTE_CACHE_DIR=$WORK/cache
start_guest one "$srv_TCP" "$path" 100000
one=$GUEST_PID
start_guest two "$srv_TCP" "$path" 100000
two=$GUEST_PID
wait_generating one "$one"
wait_generating two "$two"
sleep 1  # the second worker's last swap of pages
worker_pids=($(workers))
[ "${#worker_pids[@]}" = 2 ] || fail "expected 2 workers, found ${#worker_pids[@]}"
images_a=$(store_files_mapped "$WORK/store" images "${worker_pids[0]}")
images_b=$(store_files_mapped "$WORK/store" images "${worker_pids[1]}")
entries_a=$(store_files_mapped "$WORK/store" entries "${worker_pids[0]}")
entries_b=$(store_files_mapped "$WORK/store" entries "${worker_pids[1]}")
# Both generate the local run's tokens (and more), over shared pages.
deadline=$(($(now_ms) + 60000))
while [ "$(wc -c <"$WORK/one.out")" -lt "$local_bytes" ] || [ "$(wc -c <"$WORK/two.out")" -lt "$local_bytes" ]; do
    [ "$(now_ms)" -lt "$deadline" ] || break
    sleep 0.1
done
kill "$one" "$two" 2>/dev/null || true
wait "$one" "$two" 2>/dev/null || true
for guest in one two; do
    head -c "$local_bytes" "$WORK/$guest.out" | cmp -s - <(head -c "$local_bytes" "$WORK/local.out") ||
        failures+=("$guest's tokens differ from the local run's: $(head -c "$local_bytes" "$WORK/$guest.out") / $(cat "$WORK/local.out")")
done
[ -n "$images_a$images_b" ] || skip "no weight was repacked (ggml-cpu has no faster Q4_0 layout on this CPU)"
note "worker maps: $(wc -l <<<"$entries_a") entries and $(wc -l <<<"$images_a") images;" \
    "the other $(wc -l <<<"$entries_b") and $(wc -l <<<"$images_b")"
[ -n "$entries_a" ] && [ "$entries_a" = "$entries_b" ] ||
    failures+=("the two workers do not map the same entries: $(wc -l <<<"$entries_a") vs $(wc -l <<<"$entries_b")")
[ "$images_a" = "$images_b" ] ||
    failures+=("the two workers do not map the same images: $(wc -l <<<"$images_a") vs $(wc -l <<<"$images_b")")
stored=$(find "$WORK/store" -type f ! -name 'r-*' ! -name '.*' | wc -l)
[ "$stored" = "$(wc -l <<<"$entries_a")" ] ||
    failures+=("the store holds $stored entries for the $(wc -l <<<"$entries_a") weights: one was written twice")
finish "$srv_LOG"
