# vm_ivshmem_{llama,whisper,killed}: the ivshmem transport inside the test VM. The
# server listens on a region file; QEMU maps it into the VM as an ivshmem-plain PCI
# device, and the guest finds it with GGML_REMOTE_SERVERS=ivshmem: (PCI 1af4:1110,
# BAR2 through sysfs resource2). llama: llama-simple in the VM gives the host's
# local 32 tokens of the tiny model, and the server's session came through the
# region. whisper: whisper-cli in the VM gives the local transcript. killed: QEMU
# killed with SIGKILL mid-generation; the guest's heartbeat stops, the server ends
# the session, its worker (and memory) goes and the region is wiped; a VM started
# again on the same region gets a new session that works.
# usage: vm_ivshmem.sh llama|whisper|killed
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/llama_helpers.sh"
source "$(dirname "$0")/vm_lib.sh"
mode=${1:?usage: vm_ivshmem.sh llama|whisper|killed}
case $mode in llama | whisper | killed) ;; *) fail "unknown mode '$mode'" ;; esac
vm_require

REGION=$WORK/vm.region
# whisper's compute buffers need more than llama's tiny model (the file is sparse).
size=128M
[ "$mode" = whisper ] && size=256M
start_server srv --listen "ivshmem:$REGION,size=$size"
wait_for_line "$srv_LOG" "serving one VM at a time on $REGION" 10 >/dev/null || fail "no region: $(cat "$srv_LOG")"
vm_ivshmem_args "$REGION" "$size"
N=32
path=$(model tiny f16)

# session_through_region ID: the server's session ID was the region's.
session_through_region() {
    grep -q "session $1 (ivshmem:" "$srv_LOG" ||
        fail "session $1 did not come through the region: $(grep "session $1 " "$srv_LOG")"
}

# region_wiped COUNT: the listener has wiped the region COUNT times (after each session).
region_wiped() {
    wait_for_line "$srv_LOG" "ivshmem:file:$REGION: wiped, ready" 10 >/dev/null || fail "the region was never wiped"
    local wiped
    wiped=$(grep -c "ivshmem:file:$REGION: wiped, ready" "$srv_LOG" || true)
    [ "$wiped" -ge "$1" ] || { sleep 1; wiped=$(grep -c "ivshmem:file:$REGION: wiped, ready" "$srv_LOG" || true); }
    [ "$wiped" -ge "$1" ] || fail "the region was wiped $wiped times, not $1: $(tail -5 "$srv_LOG")"
}

# vm_llama NAME: llama-simple in a VM with the region: the local tokens, every
# layer on REMOTE0, a session of the region that ran the computes.
vm_llama() {
    local name=$1 session
    session=$(($(sessions_connected "$srv_LOG") + 1))
    vm_run_ok "$name" --qemu "${VM_IVSHMEM_ARGS[@]}" -- env GGML_BACKEND_PATH="$PLUGIN" GGML_REMOTE_SERVERS=ivshmem: \
        llama-simple -m "$path" -n "$N" -ngl 99 "$PROMPT"
    assert_generated "$name"
    assert_offloaded "$name"
    assert_same_tokens local "$name"
    [ -z "$(plugin_lines "$name")" ] || fail "$name: the plugin reported trouble: $(plugin_lines "$name")"
    assert_session_computed "$srv_LOG" "$session" $((N - 1))
    session_through_region "$session"
}

case $mode in
llama)
    run_local local "$path" "$N"
    vm_llama vm
    note "in the VM through ivshmem: same $N tokens as the host's CPU: $(head -c 80 "$WORK/vm.out")..."
    ;;
whisper)
    source "$(dirname "$0")/whisper_helpers.sh"
    wmodel=$(whisper_model tiny f16)
    run_whisper_local local "$wmodel"
    session=$(($(sessions_connected "$srv_LOG") + 1))
    # The VM writes only in its job folder: the transcript goes there.
    vm_run_ok vm --qemu "${VM_IVSHMEM_ARGS[@]}" -- env GGML_BACKEND_PATH="$PLUGIN" GGML_REMOTE_SERVERS=ivshmem: \
        whisper-cli -m "$wmodel" -f "$WAV" -t 1 -bs 1 -nf -nt -otxt -of "$WORK/vm.vm/vm"
    cp "$WORK/vm.vm/vm.txt" "$WORK/vm.txt"
    assert_used_remote vm
    assert_same_transcript local vm
    assert_session_computed "$srv_LOG" "$session" 3
    session_through_region "$session"
    note "in the VM through ivshmem: the same transcript as the CPU: $(head -c 80 "$WORK/vm.txt")..."
    ;;
killed)
    run_local local "$path" "$N"
    session=$(($(sessions_connected "$srv_LOG") + 1))
    vm_run killed --qemu "${VM_IVSHMEM_ARGS[@]}" -- env GGML_BACKEND_PATH="$PLUGIN" GGML_REMOTE_SERVERS=ivshmem: \
        llama-simple -m "$path" -n 100000 -ngl 99 "$PROMPT" &
    vm_pid=$!
    # The VM's stdout reaches its job folder as it is written (9p, no cache).
    deadline=$(($(now_ms) + 200000))
    while [ "$(stat -c %s "$WORK/killed.vm/stdout" 2>/dev/null || echo 0)" -lt $((${#PROMPT} + 40)) ]; do
        kill -0 "$vm_pid" 2>/dev/null || { cat "$WORK/killed.err" >&2; fail "the VM ended before the kill"; }
        [ "$(now_ms)" -lt "$deadline" ] || fail "the VM generated nothing in 200 s"
        sleep 0.2
    done
    grep -q "session $session (ivshmem:" "$srv_LOG" || fail "no session of the region while the VM generates"
    qemu=$(pgrep -f "^qemu-system-x86_64 .*vmjob=$WORK/killed.vm " | head -n 1) || fail "no QEMU for the killed VM"
    [ "$(cat "/proc/$qemu/comm")" = qemu-system-x86 ] || fail "pid $qemu is not QEMU: $(cat "/proc/$qemu/comm")"
    kill -9 "$qemu"
    started=$(now_ms)
    wait "$vm_pid" || true
    line=$(session_end "$srv_LOG" "$session")
    took=$(($(now_ms) - started))
    # The guest said nothing: its heartbeat stopped (kRegionSilenceMs, 3 s), and
    # the ring reports the peer gone, which the worker logs as a disconnection.
    [[ $line == *": disconnected after "* || $line == *"closed by the server"* ]] ||
        fail "session $session did not end: $line"
    [ "$took" -lt 8000 ] || fail "a killed VM held its session for $took ms"
    note "QEMU killed mid-generation; after $took ms the server: $line"
    region_wiped 1
    [ -z "$(workers)" ] || { sleep 1; [ -z "$(workers)" ] || fail "the session's worker lives on: $(workers)"; }
    note "the session's worker is gone (its memory with it); the listener holds $(rss_kb "$srv_PID") KiB"
    vm_llama again
    region_wiped 2
    note "a VM started again on the same region: a new session, the same $N tokens"
    kill -0 "$srv_PID" || fail "the server died"
    [ -z "$(grep 'worker died' "$srv_LOG")" ] || fail "a worker crashed: $(grep 'worker died' "$srv_LOG")"
    ;;
esac
echo PASS
