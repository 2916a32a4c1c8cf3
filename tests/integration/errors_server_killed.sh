# errors_server_killed_{worker,server}: a long llama.cpp generation through the
# remote device loses its server mid-way (kill -9). No affected guest hangs: each
# exits within 5 s of the kill, having said once that it lost the connection.
#  worker: only the session's worker process is killed. The server logs that the
#          worker died from signal 9, keeps running, and a second guest that was
#          generating at the same time finishes with the right tokens; new guests
#          are served correctly.
#  server: the listener and the workers of three generating guests (over unix,
#          TCP and shm) are killed together; all three exit within the limit. A new
#          guest finds nobody there, says so in one line and runs on the CPU.
# usage: errors_server_killed.sh worker|server
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/llama_helpers.sh"

what=${1:?usage: errors_server_killed.sh worker|server}
case $what in worker | server) ;; *) fail "unknown target '$what'" ;; esac
EXIT_LIMIT_S=5
# A guest whose server is gone tries to reconnect for up to its connect timeout
# (docs/RECONNECT.md) before its compute fails: well inside the limit.
export GGML_REMOTE_CONNECT_TIMEOUT_MS=2000

small=$(model small)
tiny=$(model tiny)
run_local tiny-local "$tiny" 32
GUEST_TIMEOUT=300
# One core for the sessions to share (docs/MANY-GUESTS.md): every compute then has
# one thread, whether the bystander computes alone or beside the victim.
start_server srv --cores 1

# The bystander is cheap per token (tiny model) so that it still finishes in
# reasonable time on a busy 2-core machine, and long enough to be mid-way at the
# kill. Its reference is the same run on the same server, undisturbed: over a
# thousand tokens the text depends on the thread count, so the local CPU's text
# (4 threads, llama-simple's default) would differ, and so would the bystander's if
# its threads changed when the victim's session started or ended computing.
BYSTANDER_N=1500
if [ "$what" = worker ]; then
    bystander_ref_session=$(($(sessions_connected "$srv_LOG") + 1))
    run_guest_ok bystander-ref "$srv_TCP" "$tiny" "$BYSTANDER_N"
    assert_session_computed "$srv_LOG" "$bystander_ref_session" $((BYSTANDER_N - 1))
fi

# The victims: far more tokens than they can generate before the kill (about 30 s
# of work through the remote device on an idle machine). Killing a worker affects
# one guest; killing the server affects every guest it serves.
victim_names=(victim)
victim_endpoints=("$srv_UNIX")
if [ "$what" = server ]; then
    victim_names+=(victim-tcp victim-shm)
    victim_endpoints+=("$srv_TCP" "shm:${srv_UNIX#unix:}")
fi
victims=() workers=()
for i in "${!victim_names[@]}"; do
    victim_session=$(($(sessions_connected "$srv_LOG") + 1))
    start_guest "${victim_names[i]}" "${victim_endpoints[i]}" "$small" 4000
    victims+=("$GUEST_PID")
    connected=$(wait_for_line "$srv_LOG" "session $victim_session \\(.*\\): connected, worker pid [0-9]+" 30) ||
        { cat "$srv_LOG" >&2; fail "${victim_names[i]} never connected"; }
    worker=$(sed -n 's/.*worker pid \([0-9]*\).*/\1/p' <<<"$connected")
    [ -n "$worker" ] || fail "no worker pid in: $connected"
    workers+=("$worker")
    # Kill only once tokens are coming out of the remote device.
    wait_generating "${victim_names[i]}" "$GUEST_PID"
    assert_offloaded "${victim_names[i]}"
done
victim_session=$((victim_session - ${#victims[@]} + 1))  # the first victim's
worker=${workers[0]}

if [ "$what" = worker ]; then
    # A second guest on another worker, generating while the first one's worker dies.
    bystander_session=$(($(sessions_connected "$srv_LOG") + 1))
    start_guest bystander "$srv_TCP" "$tiny" "$BYSTANDER_N"
    bystander=$GUEST_PID
    wait_generating bystander "$bystander"
    kill -0 "$bystander" 2>/dev/null || fail "the bystander ended before the kill"
fi
for i in "${!victims[@]}"; do
    kill -0 "${victims[i]}" 2>/dev/null || fail "${victim_names[i]} ended before the kill"
done

if [ "$what" = worker ]; then
    note "killing worker $worker of session $victim_session"
    kill -9 "$worker"
else
    note "killing the server: listener $srv_PID and workers ${workers[*]}"
    kill -9 "$srv_PID" "${workers[@]}"
fi
killed_at=$(now_ms)

for i in "${!victims[@]}"; do
    name=${victim_names[i]}
    if ! wait_pid_exit "${victims[i]}" "$EXIT_LIMIT_S"; then
        tail -n 5 "$WORK/$name.err" >&2
        fail "$name was still running $EXIT_LIMIT_S s after its server was killed (hung)"
    fi
    took=$(($(now_ms) - killed_at))
    rc=0
    wait "${victims[i]}" || rc=$?
    note "$name exited with code $rc, $took ms after the kill"
    [ "$rc" != 124 ] || fail "$name had to be stopped by timeout"

    lost=$(grep -c "^ggml-remote: lost the connection to ggml-remote-server at ${victim_endpoints[i]}" "$WORK/$name.err" || true)
    [ "$lost" = 1 ] || {
        grep 'ggml-remote' "$WORK/$name.err" >&2
        fail "$name: expected the plugin to report the lost connection once, got $lost lines"
    }
    note "$name: $(grep '^ggml-remote: lost' "$WORK/$name.err")"
done

if [ "$what" = worker ]; then
    line=$(wait_for_line "$srv_LOG" "session $victim_session \(.*\): worker died from signal 9" 10) ||
        { cat "$srv_LOG" >&2; fail "the server did not log the death of the victim's worker"; }
    [[ $line == *"only this guest was affected"* ]] || fail "the server's line does not limit the damage: $line"
    note "server: $line"
    kill -0 "$srv_PID" 2>/dev/null || fail "the server died with its worker"

    rc=0
    wait "$bystander" || rc=$?
    [ "$rc" = 0 ] || { tail -n 20 "$WORK/bystander.err" >&2; fail "the bystander guest failed with $rc"; }
    assert_same_tokens bystander-ref bystander
    [ -z "$(plugin_lines bystander)" ] || fail "the bystander guest reported trouble: $(plugin_lines bystander)"
    assert_session_computed "$srv_LOG" "$bystander_session" $((BYSTANDER_N - 1))
    note "the bystander, generating at the time of the kill, got all its $BYSTANDER_N tokens right"

    for endpoint in "$srv_UNIX" "$srv_TCP"; do
        name=after-${endpoint%%:*}
        session=$(($(sessions_connected "$srv_LOG") + 1))
        run_guest_ok "$name" "$endpoint" "$tiny" 32
        assert_offloaded "$name"
        assert_same_tokens tiny-local "$name"
        assert_session_computed "$srv_LOG" "$session" 31
    done
else
    wait_pid_exit "$srv_PID" 5 || fail "the listener survived kill -9"
    for worker in "${workers[@]}"; do wait_pid_exit "$worker" 5 || fail "worker $worker survived kill -9"; done
    # The dead server left its socket file behind; a new guest is not fooled by it.
    started=$(now_ms) rc=0
    run_guest after "$srv_UNIX" "$tiny" 32 || rc=$?
    [ "$rc" = 0 ] || fail "a guest of the dead server exited with $rc"
    [ $(($(now_ms) - started)) -lt 10000 ] || fail "a guest of the dead server took over 10 s to give up"
    assert_one_plugin_line after "connect $srv_UNIX: Connection refused"
    assert_not_offloaded after
    assert_same_tokens tiny-local after
fi
echo PASS
