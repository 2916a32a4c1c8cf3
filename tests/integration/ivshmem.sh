# ivshmem_{llama,whisper,hostile}: the ivshmem transport on the host, without a
# VM: the guest maps the server's region file (ivshmem:file:PATH) where a VM would
# map its PCI BAR. llama: llama-simple gives the same tokens as the local CPU, its
# weights copied into the region's heap (the server receives far less than the
# model), twice in a row on the same region. whisper: whisper-cli's transcript is
# the local one. hostile: whatever a guest writes into the region ends only its own
# session: garbage over the control page, a ring count past the ring, a read count
# never written, a guest that claims a session and vanishes (its heartbeat stops),
# a llama-simple killed with SIGKILL mid-generation; after them an honest guest's
# session works on the same region.
# usage: ivshmem.sh llama|whisper|hostile
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/llama_helpers.sh"

mode=${1:?usage: ivshmem.sh llama|whisper|hostile}
REGION=$WORK/vm.region
# whisper's compute buffers need more than the small llama model (the file is sparse).
size=128M
[ "$mode" = whisper ] && size=256M
start_server srv --listen "ivshmem:$REGION,size=$size"
wait_for_line "$srv_LOG" "serving one VM at a time on $REGION" 10 >/dev/null || fail "no region: $(cat "$srv_LOG")"
ENDPOINT=ivshmem:file:$REGION

# llama_same_tokens NAME PRESET TYPE: a guest's tokens through the region are the CPU's.
llama_same_tokens() {
    local name=$1 path session
    path=$(model "$2" "$3")
    run_local "$name-local" "$path" 16
    session=$(($(sessions_connected "$srv_LOG") + 1))
    run_guest_ok "$name-remote" "$ENDPOINT" "$path" 16
    assert_offloaded "$name-remote"
    assert_same_tokens "$name-local" "$name-remote"
    [ -z "$(plugin_lines "$name-remote")" ] || fail "$name: the plugin reported trouble: $(plugin_lines "$name-remote")"
    assert_session_computed "$srv_LOG" "$session" 15
    grep -q "session $session (ivshmem:" "$srv_LOG" || fail "session $session did not come through the region"
    LAST_SESSION=$session
}

# region_wiped: the listener made the region ready for the next session.
region_wiped() {
    local wiped
    wiped=$(grep -c "ivshmem:file:$REGION: wiped, ready for the next session" "$srv_LOG" || true)
    [ "$wiped" -ge "$1" ] || { sleep 0.5; wiped=$(grep -c 'wiped, ready' "$srv_LOG" || true); }
    [ "$wiped" -ge "$1" ] || fail "the region was wiped $wiped times, not $1: $(tail -5 "$srv_LOG")"
}

# poke OFFSET VALUE...: writes little-endian uint64 values into the region, as a VM can.
poke() {
    python3 - "$REGION" "$@" <<'PY'
import mmap, struct, sys
with open(sys.argv[1], "r+b") as f:
    m = mmap.mmap(f.fileno(), 0)
    args = sys.argv[2:]
    for i in range(0, len(args), 2):
        m[int(args[i]):int(args[i]) + 8] = struct.pack("<Q", int(args[i + 1]) & (2**64 - 1))
PY
}

# claim: takes the idle region's session as a guest does (RegionControl offsets:
# generation 64, state 72, guest_claim 128, guest_heartbeat 136), and waits until
# it is served.
claim() {
    python3 - "$REGION" <<'PY'
import mmap, struct, sys, time
with open(sys.argv[1], "r+b") as f:
    m = mmap.mmap(f.fileno(), 0)
    u64 = lambda at: struct.unpack_from("<Q", m, at)[0]
    u32 = lambda at: struct.unpack_from("<I", m, at)[0]
    deadline = time.time() + 10
    while u32(72) != 1:
        assert time.time() < deadline, "the region never became idle"
        time.sleep(0.01)
    generation = u64(64)
    struct.pack_into("<Q", m, 136, 1)
    struct.pack_into("<Q", m, 128, generation)
    while u32(72) != 2 or u64(64) != generation:
        assert time.time() < deadline, "the server never served the claim"
        time.sleep(0.01)
PY
}

# session_closed_with ID TEXT: session ID ended, by the server, saying TEXT.
session_closed_with() {
    local line
    line=$(session_end "$srv_LOG" "$1")
    [[ $line == *"$2"* ]] || fail "session $1 did not end with '$2': $line"
    note "server: $line"
}

case $mode in
llama)
    llama_same_tokens tiny tiny f16
    region_wiped 1
    # Weights went into the region's heap from the guest's side, not through the rings.
    path=$(model small f16)
    llama_same_tokens small small f16
    line=$(session_end "$srv_LOG" "$LAST_SESSION")
    received=$(sed -n 's/.*, \([0-9.]*\) \(MiB\|KiB\|B\) in,.*/\1 \2/p' <<<"$line")
    model_mib=$(($(stat -c %s "$path") >> 20))
    read -r amount unit <<<"$received"
    if [ "$unit" = MiB ] && [ "$(printf '%.0f' "$amount")" -ge $((model_mib / 2 + 1)) ]; then
        fail "small through ivshmem: the server received $amount MiB for a $model_mib MiB model: weights went through the rings"
    fi
    note "small through ivshmem: the server received $received for a $model_mib MiB model"
    region_wiped 2
    ;;
whisper)
    source "$(dirname "$0")/whisper_helpers.sh"
    wmodel=$(whisper_model tiny f16)
    run_whisper_local local "$wmodel"
    session=$(($(sessions_connected "$srv_LOG") + 1))
    run_whisper_guest remote "$ENDPOINT" "$wmodel"
    assert_used_remote remote
    assert_same_transcript local remote
    assert_session_computed "$srv_LOG" "$session" 3
    note "through ivshmem: the same transcript as the CPU: $(head -c 80 "$WORK/remote.txt")..."
    ;;
hostile)
    # Garbage over the whole control page while the region is idle: the listener
    # writes its own fields again, and a guest's claim it cannot read is none.
    head -c 4096 /dev/urandom | dd of="$REGION" bs=4096 count=1 conv=notrunc status=none
    sleep 0.1
    llama_same_tokens after-garbage tiny f16
    # A ring count past the ring (guest-to-host `written`, at 4096 + 64).
    session=$(($(sessions_connected "$srv_LOG") + 1))
    claim
    poke 4160 $((1 << 40))
    session_closed_with "$session" "impossible"
    # The host-to-guest ring's `read` (at 4096 + 320 + 64) past anything the host
    # wrote, then a frame header of zeros "written", which the worker answers.
    session=$(($(sessions_connected "$srv_LOG") + 1))
    claim
    poke 4480 $((1 << 50)) 4160 16
    note "server: $(session_end "$srv_LOG" "$session")"
    # A guest that claims a session and vanishes: its heartbeat stops, the worker
    # ends the session after kRegionSilenceMs (3 s), the region is wiped.
    session=$(($(sessions_connected "$srv_LOG") + 1))
    started=$(now_ms)
    claim
    line=$(session_end "$srv_LOG" "$session")
    [ $(($(now_ms) - started)) -lt 8000 ] || fail "a vanished guest held the region for $(($(now_ms) - started)) ms"
    note "server: $line"
    region_wiped 4
    # A real guest killed with SIGKILL mid-generation: the same, then the region serves again.
    session=$(($(sessions_connected "$srv_LOG") + 1))
    start_guest killed "$ENDPOINT" "$(model small f16)" 4000
    wait_generating killed "$GUEST_PID"
    llama=$(pgrep -P "$GUEST_PID" llama-simple) || fail "no llama-simple under $GUEST_PID"
    kill -9 "$llama"
    started=$(now_ms)
    line=$(session_end "$srv_LOG" "$session")
    [ $(($(now_ms) - started)) -lt 8000 ] || fail "a killed guest held the region for $(($(now_ms) - started)) ms"
    note "killed mid-generation; server: $line"
    region_wiped 5
    llama_same_tokens after-vanished tiny f16
    kill -0 "$srv_PID" || fail "the server died"
    [ -z "$(grep 'worker died' "$srv_LOG")" ] || fail "a worker crashed: $(grep 'worker died' "$srv_LOG")"
    ;;
*) fail "unknown mode '$mode'" ;;
esac
echo PASS
