# llama_shared_cores: three llama.cpp guests computing at once through one server
# share its cores (docs/MANY-GUESTS.md). The server schedules 2 cores (--cores 2,
# whatever this machine has): a guest alone computes with both, and while others
# compute too each gets one thread. Every guest gets exactly the tokens the local
# CPU produces, each session's closing log line says its shared computes used one
# thread, and at least two sessions shared (else this test tested nothing). With
# --no-core-scheduling the same overlap keeps the threads the guests asked for.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/llama_helpers.sh"

small=$(model small)
tiny=$(model tiny)
N=32
run_local small-local "$small" "$N"
run_local tiny-local "$tiny" "$N"

# run_together SERVER-NAME MODEL REFERENCE GUEST...: each GUEST (name:transport)
# generates at once through the server; each must match REFERENCE.
run_together() {
    local server=$1 path=$2 reference=$3 guest name transport endpoint pids=() names=()
    shift 3
    local unix_var=${server}_UNIX
    for guest in "$@"; do
        IFS=: read -r name transport <<<"$guest"
        endpoint=${!unix_var}
        [ "$transport" = shm ] && endpoint=shm:${endpoint#unix:}
        start_guest "$name" "$endpoint" "$path" "$N"
        pids+=("$GUEST_PID")
        names+=("$name")
    done
    local i rc
    for i in "${!pids[@]}"; do
        rc=0
        wait "${pids[$i]}" || rc=$?
        [ "$rc" = 0 ] || { tail -n 20 "$WORK/${names[$i]}.err" >&2; fail "guest ${names[$i]} exited with $rc"; }
    done
    for name in "${names[@]}"; do
        assert_generated "$name"
        assert_offloaded "$name"
        assert_same_tokens "$reference" "$name"
    done
}

# shared_threads LINE: "1" or "1-2" from a closing line's "cores shared in N of M
# CPU computes at T thread(s)"; empty when the session never shared.
shared_threads() { sed -n 's/.*cores shared in [0-9]* of [0-9]* CPU computes at \([0-9-]*\) threads*$/\1/p' <<<"$1"; }

# --- Scheduled: 3 guests, 2 cores.
start_server sched --cores 2
grep -q 'core scheduling: the sessions that compute at once share 2 cores' "$sched_LOG" ||
    { cat "$sched_LOG" >&2; fail "the server did not say it schedules 2 cores"; }
run_together sched "$small" small-local g1:shm g2:shm g3:unix
shared=0
for id in 1 2 3; do
    line=$(session_end "$sched_LOG" "$id")
    [[ $line == *": disconnected after "* ]] || fail "session $id did not end normally: $line"
    threads=$(shared_threads "$line")
    note "session $id: ${line##*graph computes, }"
    [ -z "$threads" ] && continue
    shared=$((shared + 1))
    [ "$threads" = 1 ] || fail "session $id computed with $threads threads beside other sessions on 2 cores: $line"
done
note "$shared of 3 sessions shared the cores"
[ "$shared" -ge 2 ] || { cat "$sched_LOG" >&2; fail "the guests never computed at once; this test did not test sharing"; }

# --- Not scheduled: the guests' threads stay as they asked (llama.cpp's default, at
# most this machine's CPUs), shared or not.
[ "$(nproc)" -ge 2 ] || { echo "PASS (one CPU: the unscheduled case shows nothing)"; exit 0; }
start_server off --cores 2 --no-core-scheduling
grep -q 'core scheduling: off' "$off_LOG" || { cat "$off_LOG" >&2; fail "the server did not say scheduling is off"; }
run_together off "$tiny" tiny-local h1:shm h2:shm
shared=0
for id in 1 2; do
    line=$(session_end "$off_LOG" "$id")
    threads=$(shared_threads "$line")
    [ -z "$threads" ] && continue
    shared=$((shared + 1))
    [ "${threads%%-*}" -ge 2 ] || fail "session $id was scheduled although scheduling is off: $line"
done
note "unscheduled: $shared of 2 sessions overlapped, with their guests' own threads"
echo PASS
