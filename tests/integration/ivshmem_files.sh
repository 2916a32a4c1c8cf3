# ivshmem_region_{owner,shrunk_idle,shrunk_attached}: the files the listener maps are its own
# (src/host/listener/region_port.h; issue 25, class 5).
#  owner: a region file that another user (nobody) created first, and would read
#      every session through, is refused, with ,reuse too; the server creates its
#      own file exclusively, mode 0600, and takes over a leftover of its own only
#      with ,reuse.
#  shrunk-idle, shrunk-attached: the region file is truncated while idle, or while
#      a guest is generating through it (as its VM, its worker or another process
#      of the server's user can): the listener survives, the attached session
#      ends, and the next guest is served through the region with the CPU's tokens.
# usage: ivshmem_files.sh owner|shrunk-idle|shrunk-attached
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/llama_helpers.sh"

mode=${1:?usage: ivshmem_files.sh owner|shrunk-idle|shrunk-attached}

# serve_region NAME ENDPOINT: a server on ENDPOINT alone; prints "served" once it
# serves the region, or its last line once it exited.
serve_region() {
    local log=$WORK/$1.log
    "$SERVER_BIN" --listen "$2" --listen "unix:$WORK/$1.sock" >"$log" 2>&1 &
    local pid=$!
    SERVER_PIDS+=("$pid")
    for _ in $(seq 100); do
        if grep -q "serving one VM at a time" "$log"; then
            kill "$pid"
            wait "$pid" 2>/dev/null || true
            echo served
            return
        fi
        kill -0 "$pid" 2>/dev/null || { tail -n 1 "$log"; return; }
        sleep 0.1
    done
    fail "$1: the server neither served nor exited"
}

case $mode in
owner)
    chmod o+x "$WORK"
    shared=$WORK/shm
    mkdir -m 1777 "$shared"  # like /dev/shm: anyone may create files there
    region=$shared/vm.region
    setpriv --reuid=65534 --regid=65534 --clear-groups truncate -s 128M "$region"
    [ "$(stat -c %u "$region")" = 65534 ] || fail "nobody could not create the file"
    answer=$(serve_region planted "ivshmem:$region,size=128M")
    [ "$answer" != served ] || fail "the server served $region, which uid 65534 created (and reads)"
    [[ $answer == *"exists"* ]] || fail "no reason given: $answer"
    note "another user's file: $answer"
    answer=$(serve_region planted-reuse "ivshmem:$region,size=128M,reuse")
    [ "$answer" != served ] || fail "with ,reuse the server served $region, which uid 65534 created"
    [[ $answer == *"belongs to uid 65534"* ]] || fail "no reason given with ,reuse: $answer"
    note "with ,reuse: $answer"
    rm -f "$region"
    # Its own file: created, mode 0600; left behind at exit; taken over only with ,reuse.
    [ "$(serve_region own "ivshmem:$region,size=128M")" = served ] || fail "the server did not create $region"
    [ "$(stat -c '%u %a' "$region")" = "$(id -u) 600" ] || fail "the region file is $(stat -c '%U %a' "$region")"
    answer=$(serve_region again "ivshmem:$region,size=128M")
    [[ $answer == *"exists"* ]] || fail "the server took over an existing file without ,reuse: $answer"
    [ "$(serve_region reuse "ivshmem:$region,size=128M,reuse")" = served ] || fail ",reuse refused the server's own file"
    chmod 0666 "$region"
    answer=$(serve_region open-mode "ivshmem:$region,size=128M,reuse")
    [[ $answer == *"mode 0666"* ]] || fail ",reuse took over a file anyone may open: $answer"
    note "own file: mode 0600, kept; again only with ,reuse; not at mode 0666"
    ;;
shrunk-idle|shrunk-attached)
    REGION=$WORK/vm.region
    ENDPOINT=ivshmem:file:$REGION
    start_server srv --listen "ivshmem:$REGION,size=128M"
    wait_for_line "$srv_LOG" "serving one VM at a time on $REGION" 10 >/dev/null || fail "no region: $(cat "$srv_LOG")"
    tiny=$(model tiny f16)
    run_local tiny-local "$tiny" 16
    if [ "$mode" = shrunk-idle ]; then
        truncate -s 0 "$REGION"
        sleep 0.5
        kill -0 "$srv_PID" 2>/dev/null || { cat "$srv_LOG" >&2; fail "the listener died when the idle region shrank"; }
        wait_for_line "$srv_LOG" "changed size while idle" 5 >/dev/null || fail "the listener did not notice: $(cat "$srv_LOG")"
    else
        # A guest generating through the region; the file loses every byte.
        session=$(($(sessions_connected "$srv_LOG") + 1))
        start_guest attached "$ENDPOINT" "$(model small f16)" 4000
        wait_generating attached "$GUEST_PID"
        truncate -s 0 "$REGION"
        sleep 0.5
        kill -0 "$srv_PID" 2>/dev/null ||
            { cat "$srv_LOG" >&2; fail "the listener died when the region shrank under a session"; }
        line=$(session_end "$srv_LOG" "$session")
        note "attached: $line"
        kill "$GUEST_PID" 2>/dev/null || true
    fi
    for _ in $(seq 50); do
        [ "$(stat -c %s "$REGION")" = $((128 << 20)) ] && break
        sleep 0.1
    done
    [ "$(stat -c %s "$REGION")" = $((128 << 20)) ] ||
        fail "the region was not made whole again ($(stat -c %s "$REGION") bytes): no next guest can be served"
    run_guest_ok after "$ENDPOINT" "$tiny" 16
    assert_offloaded after
    assert_same_tokens tiny-local after
    kill -0 "$srv_PID" 2>/dev/null || fail "the listener died"
    note "region truncated ($mode): the listener lives, only that session ended, and the next guest was served"
    ;;
*) fail "unknown mode '$mode'" ;;
esac
echo PASS
