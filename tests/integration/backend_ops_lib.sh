# Proof that a test-backend-ops run really tested REMOTE0 through a given server, for
# the backend_ops tests and scripts/conformance.sh (sourced after lib.sh).
#
# test-backend-ops prints OK when the device named by -b does not exist, so a run only
# counts when its output says REMOTE0 was tested, that REMOTE0 is the device of our
# server, that all of N > 0 cases passed, and when our server's log shows the session(s)
# of that run ending normally, over the expected transport, after graph computes.

SESSION_END_PATTERN='\): (disconnected after|closed by the server|worker died|worker exited)'

# strip_colors FILE: removes test-backend-ops' terminal colour codes in place.
strip_colors() { sed -i 's/\x1b\[[0-9;]*m//g' "$1"; }

# session_ends SERVER_LOG: how many sessions have ended so far.
session_ends() { grep -cE "$SESSION_END_PATTERN" "$1" || true; }

# wait_for_sessions_to_end SERVER_LOG: a guest's worker logs its totals only after
# the guest has gone; waits up to 10 s for every accepted session to end.
wait_for_sessions_to_end() {
    local server_log=$1
    for _ in $(seq 100); do
        [ "$(session_ends "$server_log")" -ge "$(grep -c '): connected' "$server_log" || true)" ] && return 0
        sleep 0.1
    done
    return 1
}

# verify_remote0_run TEST_LOG STATUS ENDPOINT SERVER_LOG ENDS_BEFORE [DESCRIPTION]:
# checks a finished run (its colour-free output, its exit status) against the server at
# ENDPOINT, whose log held ENDS_BEFORE session ends before the run; with DESCRIPTION,
# REMOTE0 must be the host device the server describes so (say its Vulkan0, not its
# CPU). Sets RUN_PASSED, RUN_TOTAL, RUN_UNSUPPORTED, RUN_FAILED_CASES (the output lines
# of failed cases, with the reason), RUN_FAILING_TESTS (test-backend-ops' closing list),
# RUN_SESSIONS (session-end lines), RUN_COMPUTES and RUN_PROBLEMS (an array, empty when
# the run counts).
# shellcheck disable=SC2034 # the RUN_ variables are this function's results
verify_remote0_run() {
    local log=$1 status=$2 endpoint=$3 server_log=$4 ends_before=$5 description=${6:-}
    local transport=${endpoint%%:*} counts line
    [ "$transport" = shm ] && transport=unix  # the server sees an shm guest on its unix socket
    RUN_PROBLEMS=()
    counts=$(sed -n 's|^ *\([0-9][0-9]*\)/\([0-9][0-9]*\) tests passed$|\1 \2|p' "$log")
    read -r RUN_PASSED RUN_TOTAL <<<"${counts:-0 0}"
    RUN_UNSUPPORTED=$(grep -c "not supported" "$log" || true)
    RUN_FAILED_CASES=$(grep "): FAIL$" "$log" || true)
    RUN_FAILING_TESTS=$(sed -n '/^Failing tests:$/,/^ *Backend /{/^ *Backend /d;/^  [A-Z]/p}' "$log")

    [ "$status" = 0 ] || RUN_PROBLEMS+=("test-backend-ops exited with status $status")
    if [ -n "$RUN_FAILED_CASES" ]; then
        RUN_PROBLEMS+=("$(grep -c . <<<"$RUN_FAILED_CASES") cases printed FAIL")
    elif grep -q "FAIL" "$log"; then
        RUN_PROBLEMS+=("the output says FAIL: $(grep -m1 "FAIL" "$log")")
    fi
    grep -qE "^Backend [0-9]+/[0-9]+: REMOTE0$" "$log" ||
        RUN_PROBLEMS+=("REMOTE0 was not tested (the plugin registered no such device)")
    grep -F "Device description: " "$log" | grep -qF "@ $endpoint" ||
        RUN_PROBLEMS+=("REMOTE0 is not the device of the server at $endpoint")
    if [ -n "$description" ] && ! grep -qxF "  Device description: $description @ $endpoint" "$log"; then
        RUN_PROBLEMS+=("REMOTE0 is not the host's '$description': $(grep -m1 -F "Device description: " "$log")")
    fi
    [ "$(grep -c . <<<"$counts")" = 1 ] ||
        RUN_PROBLEMS+=("expected one 'N/M tests passed' line, got: ${counts:-none}")
    [ "$RUN_TOTAL" -gt 0 ] || RUN_PROBLEMS+=("no case ran on REMOTE0")
    [ "$RUN_PASSED" = "$RUN_TOTAL" ] || RUN_PROBLEMS+=("$((RUN_TOTAL - RUN_PASSED)) of $RUN_TOTAL cases failed")
    grep -qE "^ *Backend REMOTE0: OK$" "$log" || RUN_PROBLEMS+=("no 'Backend REMOTE0: OK'")

    wait_for_sessions_to_end "$server_log" || RUN_PROBLEMS+=("a server session did not end within 10 s")
    RUN_SESSIONS=$(grep -E "$SESSION_END_PATTERN" "$server_log" | tail -n +"$((ends_before + 1))" || true)
    RUN_COMPUTES=0
    if [ -z "$RUN_SESSIONS" ]; then
        RUN_PROBLEMS+=("the server logged no session for this run")
    fi
    while IFS= read -r line; do
        [ -n "$line" ] || continue
        if [[ $line =~ disconnected\ after\ .*,\ ([0-9]+)\ graph\ computes ]]; then
            RUN_COMPUTES=$((RUN_COMPUTES + BASH_REMATCH[1]))
        else
            RUN_PROBLEMS+=("server: ${line#*: }")
        fi
        grep -qF "(${transport}:" <<<"$line" || RUN_PROBLEMS+=("session not over $transport: ${line#*: }")
    done <<<"$RUN_SESSIONS"
    [ "$RUN_COMPUTES" -gt 0 ] || RUN_PROBLEMS+=("the server ran no graph computes for this run")
}
