# vulkan_shader_cache: with --shader-cache, a session's Vulkan driver (lavapipe here)
# keeps the pipelines it compiled in its tenant's directory, and the next session of
# that tenant loads them instead of compiling them again:
#  - the first session (test-backend-ops, one ADD case on REMOTE0) leaves entries there;
#  - the second, doing the same, adds none and reads every one of them (their access
#    times are set back to 1970 before it, and a read under relatime sets them to now;
#    a noatime mount skips that assertion).
# The time of each session is noted. Skipped where no Vulkan device exists.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/llama_helpers.sh"
source "$(dirname "$0")/vulkan_lib.sh"
require_vulkan0
unset GGML_VK_VISIBLE_DEVICES
CACHE=$WORK/shaders  # a cache of its own: the first session must start cold

start_vulkan_server gpu -d Vulkan0 --shader-cache "$CACHE"
grep -q 'shader cache: off' "$gpu_LOG" && skip "$(grep -o 'shader cache: off.*' "$gpu_LOG")"

# add_session NAME: one ADD case through REMOTE0, in a session of its own; its time in ms.
add_session() {
    local started=$(now_ms)
    remote "$gpu_UNIX" "$TEST_BACKEND_OPS" -b REMOTE0 -o ADD -p 'type=f32,ne=\[10,5,4,3\],nr=\[1,1,1,1\],nf=1,perm1=0' \
        >"$WORK/$1.out" 2>&1 || { tail -n 20 "$WORK/$1.out" >&2; fail "$1: test-backend-ops failed"; }
    grep -q '1/1 tests passed' "$WORK/$1.out" || fail "$1: the ADD case did not run on REMOTE0: $(tail -n 5 "$WORK/$1.out")"
    echo $(($(now_ms) - started))
}
# entries: the cache's files, with their modification times.
entries() { find "$CACHE" -type f -printf '%p %T@\n' | sort; }

first_ms=$(add_session first)
tenant=$(sed -n 's/.*session 1 (.*): shader cache \(.*\)/\1/p' "$gpu_LOG")
[ -n "$tenant" ] || fail "the session got no shader cache: $(cat "$gpu_LOG")"
entries >"$WORK/after-first.txt"
count=$(wc -l <"$WORK/after-first.txt")
[ "$count" -gt 0 ] || fail "the first session left nothing in $CACHE"
grep -qv "^$tenant/" "$WORK/after-first.txt" && fail "entries outside $tenant: $(grep -v "^$tenant/" "$WORK/after-first.txt")"

find "$CACHE" -type f -exec touch -a -d @0 {} +
second_ms=$(add_session second)
entries >"$WORK/after-second.txt"
diff "$WORK/after-first.txt" "$WORK/after-second.txt" >&2 ||
    fail "the second session compiled again: the cache's entries changed (above)"
if findmnt -n -o OPTIONS -T "$CACHE" | grep -qw noatime; then
    note "$CACHE is on a noatime mount: reads are not asserted"
else
    unread=$(find "$CACHE" -type f -printf '%A@ %p\n' | awk '$1 < 1 { print $2 }')
    [ -z "$unread" ] || fail "the second session did not read these entries: $unread"
fi
note "$count cache entries; first session $first_ms ms, second $second_ms ms (read them all, added none)"
echo PASS
