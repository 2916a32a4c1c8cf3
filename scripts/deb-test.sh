#!/usr/bin/env bash
# make deb-test: installs the built ggml-remote .deb with apt into a FRESH Debian sid
# root (mmdebstrap, as scripts/make-sysroot makes the build root) that has llama.cpp
# but nothing of this build, and checks the INSTALLED files there, in two phases:
#  1. in a chroot: the package's files and user, the man page, the systemd units
#     (systemd-analyze verify), then the installed server, run as the user
#     ggml-remote on /run/ggml-remote/ggml-remote.sock, serving llama-simple guests
#     of another user through the installed plugin (same tokens as the local CPU,
#     over unix and shm), `status` during a generation, the socket's permissions,
#     socket activation (systemd-socket-activate);
#  2. the same root booted with systemd as PID 1 in a container (private pid,
#     mount, network, ipc, uts and cgroup namespaces; /sys and /proc/sys read-only):
#     ggml-remote.socket enabled and listening, the sandboxed ggml-remote.service
#     started by a guest's connection, stop and re-activation, then apt-get purge
#     stopping and removing it all. Skipped (with the reason) where the host cannot
#     offer a cgroup2 hierarchy; the purge then runs in the chroot.
# Prints PASS/FAIL per check and a summary; exits non-zero on any failure. Leaves
# nothing behind: the root lives in a temporary folder, its mounts in private mount
# namespaces; the logs are kept in BUILD/deb-test/.
#   usage: scripts/deb-test.sh [BUILD_DIR]      (needs root, mmdebstrap and the network)
#   GGML_REMOTE_MIRROR      Debian mirror (default: http://deb.debian.org/debian)
#   GGML_REMOTE_DEB         the package to test (default: the newest BUILD_DIR/ggml-remote_*.deb)
#   GGML_REMOTE_KEEP_ROOT=1 keep the root (its path is printed) instead of removing it
set -euo pipefail

# ---------------------------------------------------------------------------
# Inside the test root: run by the host part below, as root of the test root, as
#   deb-test.sh --inside PHASE PACKAGE.deb MODEL
# PHASE: chroot (phase 1), systemd (phase 2, under systemd as PID 1) or purge (the
# purge alone, when phase 2 cannot run).
# ---------------------------------------------------------------------------
LOGS=/root/deb-test
SERVER_LOG=$LOGS/server.log  # the server's log: a file in the chroot, the journal under systemd
UNDER_SYSTEMD=0
SOCK_DIR=/run/ggml-remote
SOCK=$SOCK_DIR/ggml-remote.sock
ACTIVATED_SOCK=$SOCK_DIR/activated.sock
PLUGIN=/usr/lib/x86_64-linux-gnu/ggml-remote/libggml-remote.so
PROMPT="Hello world"
RESULTS=()
PIDS=()  # every background process started, stopped at exit
SERVER_PID=""
ALICE_UID=""

stop_all() {
    local pid
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
}

# check NAME FUNCTION [ARGS...]: runs a check (in this shell: checks share state,
# such as the server's pid) and records PASS or FAIL.
check() {
    local name=$1 rc=0 started=$SECONDS
    shift
    echo "== $name"
    "$@" || rc=$?
    if [ "$rc" = 0 ]; then
        RESULTS+=("PASS  $name ($((SECONDS - started)) s)")
    else
        RESULTS+=("FAIL  $name")
        echo "   -> FAIL"
    fi
    printf '%s\n' "${RESULTS[-1]}" >>"$LOGS/results"
}
failed() {
    local result
    for result in "${RESULTS[@]}"; do [[ $result != FAIL* ]] || return 0; done
    return 1
}
say() { printf '   %s\n' "$@"; }
indent() { sed 's/^/   /'; }
die() { say "$*"; return 1; }

# as USER CMD...: CMD as USER, with its groups, from /tmp.
as() {
    local user=$1
    shift
    (cd /tmp && exec setpriv --reuid="$user" --regid="$user" --init-groups -- "$@")
}
# guest NAME USER SERVERS N [ARGS...]: llama-simple of USER through the installed
# plugin, every layer offered to the remote devices; output in $LOGS/NAME.{out,err}.
guest() {
    local name=$1 user=$2 servers=$3 n=$4
    shift 4
    as "$user" env GGML_BACKEND_PATH="$PLUGIN" GGML_REMOTE_SERVERS="$servers" \
        timeout 120 llama-simple -m "$MODEL" -n "$n" -ngl 99 "$@" "$PROMPT" >"$LOGS/$name.out" 2>"$LOGS/$name.err"
}
# local_run NAME N: the reference: llama-simple of alice on the local CPU, no plugin.
local_run() {
    as alice timeout 120 llama-simple -m "$MODEL" -n "$2" "$PROMPT" >"$LOGS/$1.out" 2>"$LOGS/$1.err" ||
        { tail -n 5 "$LOGS/$1.err" | indent; die "local llama-simple failed"; }
}
wait_for_socket() {  # wait_for_socket PATH PID
    local i
    for i in $(seq 100); do
        [ -S "$1" ] && return 0
        kill -0 "$2" 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}
# server_log: brings $SERVER_LOG up to date (under systemd, from the journal).
server_log() {
    if [ "$UNDER_SYSTEMD" = 1 ]; then
        journalctl --sync 2>/dev/null || true
        journalctl -u ggml-remote.service -o cat --no-pager >"$SERVER_LOG" 2>/dev/null || true
    fi
}
sessions() { server_log; grep -c ': connected, worker pid ' "$SERVER_LOG" || true; }

install_package() {
    apt-get install -y --no-install-recommends "$DEB" >"$LOGS/apt-install.log" 2>&1 ||
        { tail -n 30 "$LOGS/apt-install.log" | indent; die "apt-get install $DEB failed"; }
    grep -E '^Setting up ' "$LOGS/apt-install.log" | grep -E 'ggml|systemd' | indent || true
    local status
    status=$(dpkg-query -W -f '${Status} ${Version}' ggml-remote)
    say "dpkg: ggml-remote $status"
    [[ $status == "install ok installed "* ]]
}

files_installed() {
    local path owner
    for path in /usr/bin/ggml-remote-server "$PLUGIN" /usr/share/man/man1/ggml-remote-server.1.gz \
        /usr/lib/systemd/system/ggml-remote.service /usr/lib/systemd/system/ggml-remote.socket \
        /usr/lib/sysusers.d/ggml-remote.conf /usr/share/doc/ggml-remote/README.Debian \
        /usr/share/doc/ggml-remote/changelog.Debian.gz; do
        [ -f "$path" ] || die "missing: $path" || return
        owner=$(dpkg -S "$path" | cut -d: -f1)
        [ "$owner" = ggml-remote ] || die "$path belongs to '$owner'" || return
        say "ok: $path"
    done
    /usr/bin/ggml-remote-server --version | indent
    /usr/bin/ggml-remote-server --help >/dev/null
    [ -L /etc/systemd/system/sockets.target.wants/ggml-remote.socket ] || die "postinst did not enable ggml-remote.socket" || return
    say "enabled: ggml-remote.socket (sockets.target.wants)"
}

system_user() {
    local entry uid home shell
    entry=$(getent passwd ggml-remote) || die "no user ggml-remote" || return
    say "passwd: $entry"
    IFS=: read -r _ _ uid _ _ home shell <<<"$entry"
    [ "$uid" -lt 1000 ] || die "ggml-remote is not a system user (uid $uid)" || return
    [ "$home" = /nonexistent ] || die "home is $home" || return
    [[ $shell == */nologin ]] || die "shell is $shell" || return
    getent group ggml-remote >/dev/null || die "no group ggml-remote" || return
    say "groups: $(id -nG ggml-remote)"
    id -nG ggml-remote | tr ' ' '\n' | grep -qx render || die "ggml-remote is not in the group render"
}

man_page() {
    local path warnings text word
    path=$(man -w ggml-remote-server) || die "man -w ggml-remote-server found nothing" || return
    say "man -w ggml-remote-server: $path"
    [ "$path" = /usr/share/man/man1/ggml-remote-server.1.gz ] || die "unexpected path" || return
    warnings=$(MANWIDTH=80 man --warnings -E UTF-8 ggml-remote-server 2>&1 >/dev/null)
    [ -z "$warnings" ] || die "groff warnings: $warnings" || return
    text=$(MANWIDTH=80 man ggml-remote-server 2>/dev/null)
    for word in NAME SYNOPSIS DESCRIPTION OPTIONS STATUS ENVIRONMENT SYSTEMD FILES SECURITY EXAMPLES; do
        grep -q "^$word" <<<"$text" || die "no section $word" || return
    done
    for word in GGML_BACKEND_PATH GGML_REMOTE_SERVERS GGML_REMOTE_CONNECT_TIMEOUT_MS GGML_REMOTE_STATS \
        GGML_REMOTE_TLS_PSK_FILE --insecure --tls-psk --listen --memory-quota; do
        grep -q -- "$word" <<<"$text" || die "the page does not mention $word" || return
    done
    say "$(wc -l <<<"$text") lines; all sections and variables there; no groff warnings"
}

# syscalls_of @SET: the system calls of a systemd syscall set, its nested sets expanded.
syscalls_of() {
    local entry
    for entry in $(systemd-analyze syscall-filter "$1" | sed -n '2,$ { /^ *#/d; s/^ *//p }'); do
        if [[ $entry == @* ]]; then syscalls_of "$entry"; else echo "$entry"; fi
    done | sort -u
}

systemd_units() {
    local out syscall
    command -v systemd-analyze >/dev/null || die "systemd-analyze is missing" || return
    systemd-analyze --version | head -n 1 | indent
    out=$(systemd-analyze verify /usr/lib/systemd/system/ggml-remote.socket \
        /usr/lib/systemd/system/ggml-remote.service 2>&1) ||
        { indent <<<"$out"; die "systemd-analyze verify failed"; return; }
    [ -z "$out" ] || { indent <<<"$out"; die "systemd-analyze verify complained"; return; }
    say "systemd-analyze verify ggml-remote.socket ggml-remote.service: no complaints"
    # What the sandbox must still allow: fork and exec a worker per guest, memory
    # files, passing descriptors over the socket, mapping what guests pass.
    out=$(syscalls_of @system-service)
    for syscall in clone clone3 fork vfork execve memfd_create mmap ftruncate fcntl socket bind listen accept4 \
        sendmsg recvmsg signalfd4; do
        grep -qw "$syscall" <<<"$out" || die "SystemCallFilter=@system-service lacks $syscall" || return
    done
    say "@system-service allows clone/fork, execve, memfd_create, mmap, sendmsg/recvmsg, signalfd4 and sockets"
    # The workers install their own seccomp filter (with TSYNC: the seccomp call, not prctl).
    grep -qE '^SystemCallFilter=.*[[:space:]]seccomp([[:space:]]|$)' /usr/lib/systemd/system/ggml-remote.service ||
        die "ggml-remote.service does not allow seccomp: the server could not sandbox its workers" || return
    systemd-analyze security --offline=yes --no-pager /usr/lib/systemd/system/ggml-remote.service 2>/dev/null |
        tail -n 1 | indent || true
}

test_users() {
    # alice may use the server (group ggml-remote); bob may not.
    systemd-sysusers --inline 'u alice - "deb-test guest" /tmp' 'm alice ggml-remote' \
        'u bob - "deb-test outsider" /tmp' 2>&1 | indent
    ALICE_UID=$(id -u alice) || return
    say "alice: $(id alice)" "bob: $(id bob)"
    id -nG alice | tr ' ' '\n' | grep -qx ggml-remote || die "alice is not in the group ggml-remote"
}

start_server() {
    # What ggml-remote.service does, without systemd: the user ggml-remote, its
    # RuntimeDirectory /run/ggml-remote (0755), UMask=0007 (a socket for the group).
    install -d -o ggml-remote -g ggml-remote -m 0755 "$SOCK_DIR"
    setpriv --reuid=ggml-remote --regid=ggml-remote --init-groups -- \
        sh -c "umask 0007; exec /usr/bin/ggml-remote-server --listen unix:$SOCK" >"$LOGS/server.log" 2>&1 &
    SERVER_PID=$!
    PIDS+=("$SERVER_PID")
    wait_for_socket "$SOCK" "$SERVER_PID" || { indent <"$LOGS/server.log"; die "the server did not start"; return; }
    local uid mode
    uid=$(awk '/^Uid:/ { print $2 }' "/proc/$SERVER_PID/status")
    mode=$(stat -c '%A %U:%G' "$SOCK")
    say "server pid $SERVER_PID runs as $(getent passwd "$uid" | cut -d: -f1); $SOCK: $mode"
    sed 's/^/   server: /' "$LOGS/server.log"
    [ "$uid" = "$(id -u ggml-remote)" ] || die "the server does not run as ggml-remote" || return
    [ "$mode" = "srwxrwx--- ggml-remote:ggml-remote" ] || die "unexpected socket permissions: $mode"
}

# same_tokens TRANSPORT: a guest of alice generates what the local CPU does.
same_tokens() {
    local transport=$1 name="remote-$1" before line
    [ -s "$LOGS/local.out" ] || local_run local 16 || return
    before=$(sessions)
    guest "$name" alice "$transport:$SOCK" 16 ||
        { tail -n 20 "$LOGS/$name.err" | indent; die "the guest failed"; return; }
    grep -q 'assigned to device REMOTE0' "$LOGS/$name.err" || die "no layer was assigned to REMOTE0" || return
    ! grep -q 'layer .* assigned to device CPU' "$LOGS/$name.err" || die "some layers stayed on the CPU" || return
    cmp -s "$LOGS/local.out" "$LOGS/$name.out" ||
        { say "local:  $(cat "$LOGS/local.out")" "remote: $(cat "$LOGS/$name.out")"; die "different tokens"; return; }
    say "the same 16 tokens as the local CPU: $(head -c 100 "$LOGS/$name.out" | tr '\n' ' ')"
    sleep 0.3  # the worker logs the end of its session after the guest has gone
    [ "$(sessions)" -gt "$before" ] || die "the server logged no new session" || return
    line=$(grep -E "uid $ALICE_UID\): (disconnected|closed)" "$SERVER_LOG" | tail -n 1)
    say "server: $line"
    [[ $line == *": disconnected after "* ]] || die "alice's session did not end normally"
}

# outsider_refused: bob is not in the group: his guest cannot connect, gets no device.
outsider_refused() {
    local before
    before=$(sessions)
    guest outsider bob "unix:$SOCK" 8 || true
    grep -i 'ggml-remote' "$LOGS/outsider.err" | head -n 2 | indent
    ! grep -q 'REMOTE0' "$LOGS/outsider.err" || die "bob got a remote device" || return
    grep -qi 'permission denied' "$LOGS/outsider.err" || die "no 'Permission denied' from the plugin" || return
    [ "$(sessions)" = "$before" ] || die "the server accepted bob"
}

status_during_generation() {
    local guest_pid json="" found=0 running=0 i
    local_run long-local 600 || return
    guest long-remote alice "shm:$SOCK" 600 &
    guest_pid=$!
    PIDS+=("$guest_pid")
    for i in $(seq 1200); do
        json=$(ggml-remote-server status --connect "unix:$SOCK" --json 2>"$LOGS/status.err") || true
        if grep -q "\"peer\": \"[^\"]* uid $ALICE_UID\"" <<<"$json" && grep -qE '"commands": [1-9]' <<<"$json"; then
            found=1
            break
        fi
        kill -0 "$guest_pid" 2>/dev/null || break
        sleep 0.05
    done
    kill -0 "$guest_pid" 2>/dev/null && running=1
    printf '%s\n' "$json" >"$LOGS/status.json"
    ggml-remote-server status --connect "unix:$SOCK" 2>&1 | tee "$LOGS/status.txt" | indent
    [ "$found" = 1 ] || { indent <<<"$json"; indent <"$LOGS/status.err"; die "status showed no session of alice"; return; }
    say "status --json showed alice's session with commands > 0$([ "$running" = 1 ] && echo ', during the generation')"
    # Only the server's own user (or root) gets answers.
    ! as alice ggml-remote-server status --connect "unix:$SOCK" >"$LOGS/status-alice.txt" 2>&1 ||
        die "status answered alice" || return
    say "as alice: $(cat "$LOGS/status-alice.txt")"
    as ggml-remote ggml-remote-server status --connect "unix:$SOCK" --json >/dev/null ||
        die "status refused the server's own user" || return
    wait "$guest_pid" || { tail -n 20 "$LOGS/long-remote.err" | indent; die "the long generation failed"; return; }
    [ -s "$LOGS/local.out" ] || local_run local 16 || return
    local head
    head=$(cat "$LOGS/local.out")
    [[ $(cat "$LOGS/long-remote.out") == "$head"* ]] || die "the long generation does not start as the CPU's" || return
    # Over hundreds of greedy tokens of a random model, near-ties may tip either way
    # (other thread counts sum in another order): reported, not a failure.
    if cmp -s "$LOGS/long-local.out" "$LOGS/long-remote.out"; then
        say "the 600-token generation over shm is the CPU's"
    else
        say "the 600-token generation starts as the CPU's; $(cmp "$LOGS/long-local.out" "$LOGS/long-remote.out" |
            sed 's/.*: //') (not checked)"
    fi
}

stop_server() {
    local rc=0
    kill -TERM "$SERVER_PID"
    wait "$SERVER_PID" || rc=$?
    tail -n 2 "$LOGS/server.log" | sed 's/^/   server: /'
    [ "$rc" = 0 ] || die "the server exited with $rc on SIGTERM" || return
    [ ! -e "$SOCK" ] || die "the socket file is still there"
}

# socket_activation: what ggml-remote.socket does, with systemd-socket-activate
# standing in for PID 1: systemd listens, and passes the socket in LISTEN_FDS.
socket_activation() {
    local pid
    command -v systemd-socket-activate >/dev/null || die "systemd-socket-activate is missing" || return
    install -d -o ggml-remote -g ggml-remote -m 0755 "$SOCK_DIR"
    (umask 0077 && exec systemd-socket-activate -l "$ACTIVATED_SOCK" \
        setpriv --reuid=ggml-remote --regid=ggml-remote --init-groups -- /usr/bin/ggml-remote-server) \
        >"$LOGS/activated.log" 2>&1 &
    pid=$!
    PIDS+=("$pid")
    wait_for_socket "$ACTIVATED_SOCK" "$pid" || { indent <"$LOGS/activated.log"; die "no socket"; return; }
    # SocketUser=, SocketGroup= and SocketMode= of ggml-remote.socket.
    chown ggml-remote:ggml-remote "$ACTIVATED_SOCK"
    chmod 0660 "$ACTIVATED_SOCK"
    [ -s "$LOGS/local.out" ] || local_run local 16 || return
    guest activated alice "shm:$ACTIVATED_SOCK" 16 ||
        { tail -n 20 "$LOGS/activated.err" | indent; indent <"$LOGS/activated.log"; die "the guest failed"; return; }
    sed 's/^/   server: /' "$LOGS/activated.log"
    cmp -s "$LOGS/local.out" "$LOGS/activated.out" || die "different tokens" || return
    grep -q "listening on unix:$ACTIVATED_SOCK (from systemd)" "$LOGS/activated.log" ||
        die "the server did not take the socket from systemd" || return
    ! grep -q 'listening on tcp://' "$LOGS/activated.log" || die "the server also listened on TCP" || return
    kill "$pid"
    wait "$pid" || true
    [ -S "$ACTIVATED_SOCK" ] || die "the server removed the socket file that systemd owns" || return
    rm -f "$ACTIVATED_SOCK"
    say "the same tokens through a socket passed in LISTEN_FDS; the socket file was left to systemd"
}

purge_package() {
    local path
    apt-get purge -y ggml-remote >"$LOGS/apt-purge.log" 2>&1 ||
        { tail -n 20 "$LOGS/apt-purge.log" | indent; die "apt-get purge failed"; return; }
    for path in /usr/bin/ggml-remote-server "$PLUGIN" /usr/lib/systemd/system/ggml-remote.service \
        /usr/share/man/man1/ggml-remote-server.1.gz; do
        [ ! -e "$path" ] || die "$path is still there" || return
    done
    ! dpkg-query -W -f '${Status}\n' ggml-remote 2>/dev/null | grep -qx 'install ok installed' ||
        die "still installed" || return
    say "purged, its files are gone; the user stays: $(getent passwd ggml-remote)"
}

# --- Under systemd (phase 2): the root booted with systemd as PID 1 ---------

# unit_state UNIT: "ActiveState/SubState".
unit_state() { systemctl show -P ActiveState "$1"; }

booted() {
    local state i
    for i in $(seq 120); do
        state=$(systemctl is-system-running 2>/dev/null || true)
        [ "$state" = running ] || [ "$state" = degraded ] && break
        sleep 0.5
    done
    say "systemctl is-system-running: $state"
    systemctl --failed --no-legend --plain 2>/dev/null | awk '{ print "failed (not ours): " $1 }' | indent
    [ "$state" = running ] || [ "$state" = degraded ] || die "systemd did not finish booting" || return
    ! systemctl --failed --no-legend --plain | grep -q ggml-remote || die "a ggml-remote unit failed"
}

socket_listening() {
    local enabled state mode dir
    enabled=$(systemctl is-enabled ggml-remote.socket 2>&1 || true)
    state=$(unit_state ggml-remote.socket)
    mode=$(stat -c '%A %U:%G' "$SOCK" 2>&1 || true)
    dir=$(stat -c '%a %U:%G' "$SOCK_DIR" 2>&1 || true)
    say "ggml-remote.socket: $enabled, $state; ggml-remote.service: $(unit_state ggml-remote.service)" \
        "$SOCK: $mode; $SOCK_DIR: $dir"
    [ "$enabled" = enabled ] || die "the package did not enable ggml-remote.socket" || return
    [ "$state" = active ] || die "ggml-remote.socket is not listening" || return
    [ "$mode" = "srw-rw---- ggml-remote:ggml-remote" ] || die "unexpected socket permissions" || return
    [ "$(unit_state ggml-remote.service)" = inactive ] || die "the server started before any guest connected"
}

service_activated() {
    local pid status
    [ "$(unit_state ggml-remote.service)" = active ] || die "ggml-remote.service is not running" || return
    pid=$(systemctl show -P MainPID ggml-remote.service)
    status=$(cat "/proc/$pid/status")
    say "ggml-remote.service: active, main pid $pid" \
        "$(grep -E '^(Uid|NoNewPrivs|Seccomp|CapEff|CapBnd):' <<<"$status" | tr -s '\t' ' ' | paste -sd';')"
    server_log
    grep 'listening on' "$SERVER_LOG" | tail -n 1 | sed 's/^/   server: /'
    [ "$(awk '/^Uid:/ { print $2 }' <<<"$status")" = "$(id -u ggml-remote)" ] || die "not run as ggml-remote" || return
    grep -q '^NoNewPrivs:.*1' <<<"$status" || die "NoNewPrivileges= did not apply" || return
    grep -q '^Seccomp:.*2' <<<"$status" || die "SystemCallFilter= did not apply" || return
    grep -q '^CapEff:.*0000000000000000' <<<"$status" || die "the server has capabilities" || return
    grep -q "listening on unix:$SOCK (from systemd)" "$SERVER_LOG" || die "the socket did not come from systemd" || return
    ! grep -q 'listening on tcp://' "$SERVER_LOG" || die "the server also listened on TCP" || return
    systemd-analyze security --no-pager ggml-remote.service 2>/dev/null | tail -n 1 | indent || true
}

stop_and_reactivate() {
    systemctl stop ggml-remote.service 2>&1 | indent
    say "after systemctl stop ggml-remote.service: service $(unit_state ggml-remote.service)," \
        "socket $(unit_state ggml-remote.socket), $SOCK $([ -S "$SOCK" ] && echo there || echo GONE)"
    [ "$(unit_state ggml-remote.socket)" = active ] || die "the socket stopped with the service" || return
    [ -S "$SOCK" ] || die "stopping the service removed the socket file" || return
    guest reactivated alice "shm:$SOCK" 16 || { tail -n 20 "$LOGS/reactivated.err" | indent; die "the guest failed"; return; }
    cmp -s "$LOGS/local.out" "$LOGS/reactivated.out" || die "different tokens" || return
    [ "$(unit_state ggml-remote.service)" = active ] || die "the connection did not start the service again" || return
    say "the next guest started the service again, and got the same tokens"
}

purge_under_systemd() {
    purge_package || return
    say "ggml-remote.socket: $(unit_state ggml-remote.socket), ggml-remote.service: $(unit_state ggml-remote.service)"
    [ "$(unit_state ggml-remote.socket)" = inactive ] || die "the socket still listens" || return
    [ "$(unit_state ggml-remote.service)" = inactive ] || die "the server still runs" || return
    [ ! -e "$SOCK" ] || die "$SOCK is still there" || return
    [ ! -e /etc/systemd/system/sockets.target.wants/ggml-remote.socket ] || die "the enablement link is still there" || return
    ! systemctl cat ggml-remote.socket >/dev/null 2>&1 || die "systemd still knows ggml-remote.socket"
}

run_inside() {
    local phase=$1
    DEB=$2
    MODEL=$3
    mkdir -p "$LOGS"
    export LC_ALL=C.UTF-8
    trap stop_all EXIT
    ALICE_UID=$(id -u alice 2>/dev/null || true)

    case $phase in
    chroot)
        echo "-- phase 1: the package in a chroot"
        check "apt installs the package and its dependencies" install_package
        failed && return 1
        check "installed files, owned by ggml-remote" files_installed
        check "system user ggml-remote" system_user
        check "man ggml-remote-server" man_page
        check "systemd-analyze verify, syscall filter" systemd_units
        check "test users: alice in the group ggml-remote, bob not" test_users
        check "installed server runs as ggml-remote on $SOCK" start_server
        if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
            check "llama-simple through the installed plugin, unix: same tokens as local" same_tokens unix
            check "llama-simple through the installed plugin, shm: same tokens as local" same_tokens shm
            check "a user outside the group ggml-remote cannot connect" outsider_refused
            check "status shows the live session during a generation" status_during_generation
            check "SIGTERM stops the server, which removes its socket" stop_server
        fi
        check "socket activation (LISTEN_FDS), with systemd-socket-activate" socket_activation
        ;;
    systemd)
        echo "-- phase 2: the package under systemd (PID 1 in a container)"
        UNDER_SYSTEMD=1
        SERVER_LOG=$LOGS/journal-ggml-remote.service.log
        check "systemd boots the root" booted
        failed && return 1
        check "ggml-remote.socket enabled and listening, 0660 ggml-remote:ggml-remote" socket_listening
        check "a guest's connection starts ggml-remote.service: same tokens as local (unix)" same_tokens unix
        check "ggml-remote.service: user ggml-remote, sandboxed, socket from systemd" service_activated
        check "same tokens as local over shm through the sandboxed service" same_tokens shm
        check "a user outside the group ggml-remote cannot connect" outsider_refused
        check "status (as root) shows the live session during a generation" status_during_generation
        check "systemctl stop ggml-remote.service, then a guest starts it again" stop_and_reactivate
        check "apt-get purge stops and removes the units" purge_under_systemd
        ;;
    purge)
        check "apt-get purge removes the package" purge_package
        ;;
    esac
    ! failed
}

if [ "${1:-}" = --inside ]; then
    shift
    run_inside "$@"
    exit
fi

# ---------------------------------------------------------------------------
# On the host: make the root, run the phases above in it, clean up.
# ---------------------------------------------------------------------------
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
build=$(cd "${1:-$repo/build}" && pwd)
mirror=${GGML_REMOTE_MIRROR:-http://deb.debian.org/debian}
started=$SECONDS
inside_path=PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

[ "$(id -u)" = 0 ] || { echo "deb-test: needs root (mmdebstrap, chroot, mounts)" >&2; exit 1; }
command -v mmdebstrap >/dev/null || {
    echo "deb-test: mmdebstrap is missing; installing it (apt-get install mmdebstrap)" >&2
    apt-get update -qq && apt-get install -y -qq mmdebstrap >/dev/null
}
deb=${GGML_REMOTE_DEB:-$(ls -t "$build"/ggml-remote_*.deb 2>/dev/null | head -n 1 || true)}
[ -n "$deb" ] && [ -f "$deb" ] || { echo "deb-test: no ggml-remote_*.deb in $build (make deb)" >&2; exit 1; }
deb=$(cd "$(dirname "$deb")" && pwd)/$(basename "$deb")
logs=$build/deb-test
rm -rf "$logs"
mkdir -p "$logs"
echo "deb-test: package $deb"

# The synthetic model comes from this build (scripts/in-sysroot runs the tool
# where it was built); the test root has only the package and llama.cpp.
model=$build/models/tiny-f16.gguf
if [ ! -s "$model" ]; then
    mkdir -p "$build/models"
    "$here/in-sysroot" "$build/bin/ggml-remote-synthetic-model" --preset tiny --type f16 -o "$model.tmp.$$" >/dev/null
    mv "$model.tmp.$$" "$model"
fi

root=$(mktemp -d /var/tmp/ggml-remote-deb-test.XXXXXX)
cgroup=""         # the container's cgroup (phase 2)
container_pid=""  # unshare of the container
pid1=""           # its systemd

stop_container() {
    [ -n "$container_pid" ] || return 0
    if [ -n "$pid1" ] && kill -0 "$pid1" 2>/dev/null; then
        kill -s RTMIN+4 "$pid1" 2>/dev/null || true  # systemd: poweroff (a container's PID 1 then exits)
        for _ in $(seq 100); do kill -0 "$pid1" 2>/dev/null || break; sleep 0.2; done
        kill -KILL "$pid1" 2>/dev/null || true  # takes every process of its pid namespace along
    fi
    wait "$container_pid" 2>/dev/null || true
    container_pid=""
    pid1=""
}
cleanup() {
    local rc=$? pid leftover
    stop_container
    # Processes still running in the root (none, normally: each phase stops its own).
    for pid in $(ls /proc | grep -E '^[0-9]+$'); do
        [ "$(readlink "/proc/$pid/root" 2>/dev/null)" = "$root" ] && kill -KILL "$pid" 2>/dev/null || true
    done
    if [ -n "$cgroup" ] && [ -d "$cgroup" ]; then
        find "$cgroup" -depth -type d -exec rmdir {} + 2>/dev/null || echo "deb-test: could not remove the cgroup $cgroup" >&2
    fi
    leftover=$(awk -v r="$root" 'index($5, r) == 1 { print $5 }' /proc/self/mountinfo)
    if [ -n "$leftover" ]; then
        echo "deb-test: FAIL: mounts left under $root; not removing it:" >&2
        echo "$leftover" >&2
        exit 1
    fi
    if [ "${GGML_REMOTE_KEEP_ROOT:-}" = 1 ]; then
        echo "deb-test: kept the root: $root"
    else
        rm -rf --one-file-system "$root"
    fi
    exit "$rc"
}
trap cleanup EXIT

echo "deb-test: creating a fresh Debian sid root in $root (mmdebstrap, a minute or two)"
# Same mirror and options as scripts/make-sysroot; apt lists are kept so that apt
# can install the package and its dependencies afterwards.
if ! mmdebstrap --variant=apt --mode=root \
    --aptopt='Acquire::Check-Valid-Until "false"' \
    --aptopt='APT::Install-Recommends "false"' \
    --include=llama.cpp-tools,llama.cpp-examples,man-db \
    --skip=cleanup/apt/lists \
    sid "$root" "$mirror" >"$logs/mmdebstrap.log" 2>&1; then
    tail -n 30 "$logs/mmdebstrap.log" >&2
    echo "deb-test: FAIL: mmdebstrap could not create the root (log: $logs/mmdebstrap.log)" >&2
    exit 1
fi
echo "deb-test: root ready after $((SECONDS - started)) s"

cp "$deb" "$root/root/"
install -d -m 0755 "$root/srv/ggml-remote-test"
install -m 0644 "$model" "$root/srv/ggml-remote-test/tiny-f16.gguf"
cp "${BASH_SOURCE[0]}" "$root/root/deb-test.sh"
inside_args=("/root/$(basename "$deb")" /srv/ggml-remote-test/tiny-f16.gguf)
# No getty on the container's console (it is /dev/null, where agetty only fails and respawns).
ln -sf /dev/null "$root/etc/systemd/system/console-getty.service"

# run_chroot PHASE: the inside part in a chroot, its mounts in a private namespace.
run_chroot() {
    unshare --mount --propagation private --fork -- /bin/bash -c '
        set -e
        root=$1; path=$2; shift 2
        mount --rbind /dev "$root/dev"
        mount -t proc proc "$root/proc"
        mount --rbind /sys "$root/sys"
        mount -t tmpfs -o mode=0755 tmpfs "$root/run"
        mount -t tmpfs -o mode=1777 tmpfs "$root/tmp"
        cp -L /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
        exec chroot "$root" /usr/bin/env -i HOME=/root "$path" /bin/bash /root/deb-test.sh --inside "$@"
    ' deb-test "$root" "$inside_path" "$@"
}

# boot_container: starts systemd as PID 1 of the root, in new pid, mount, network,
# ipc, uts and cgroup namespaces, with /sys and /proc/sys read-only and a minimal
# /dev, so that it cannot touch the host's devices, network or kernel settings.
# Sets pid1; fails, with the reason in boot_failure, where the host has no cgroup2
# hierarchy or systemd does not start.
boot_failure=""
boot_container() {
    local base
    if [ "$(stat -fc %T /sys/fs/cgroup 2>/dev/null)" = cgroup2fs ]; then
        base=/sys/fs/cgroup
    elif [ "$(stat -fc %T /sys/fs/cgroup/unified 2>/dev/null)" = cgroup2fs ]; then
        base=/sys/fs/cgroup/unified
    else
        boot_failure="no cgroup2 hierarchy on this host (systemd needs one)"
        return 1
    fi
    cgroup=$base/ggml-remote-deb-test.$$
    mkdir "$cgroup" || { boot_failure="cannot create a cgroup under $base"; return 1; }
    (
        echo "$BASHPID" >"$cgroup/cgroup.procs"
        exec unshare --pid --mount --uts --ipc --net --cgroup --fork --propagation private -- /bin/bash -c '
            set -e
            root=$1; path=$2
            mount --bind "$root" "$root"
            mount -t proc proc "$root/proc"
            mount --bind "$root/proc/sys" "$root/proc/sys"
            mount -o remount,bind,ro "$root/proc/sys"
            if [ -e "$root/proc/sysrq-trigger" ]; then
                mount --bind "$root/proc/sysrq-trigger" "$root/proc/sysrq-trigger"
                mount -o remount,bind,ro "$root/proc/sysrq-trigger"
            fi
            mount -t sysfs -o ro sysfs "$root/sys"
            mount -t cgroup2 cgroup2 "$root/sys/fs/cgroup"
            # Device nodes of its own (systemd chmods and chowns some, and would
            # change the host nodes through bind mounts), and a console that is a
            # plain file of the root.
            mount -t tmpfs -o mode=0755 tmpfs "$root/dev"
            mknod -m 0666 "$root/dev/null" c 1 3
            mknod -m 0666 "$root/dev/zero" c 1 5
            mknod -m 0666 "$root/dev/full" c 1 7
            mknod -m 0666 "$root/dev/random" c 1 8
            mknod -m 0666 "$root/dev/urandom" c 1 9
            mknod -m 0666 "$root/dev/tty" c 5 0
            : >"$root/var/log/container-console"
            touch "$root/dev/console"
            mount --bind "$root/var/log/container-console" "$root/dev/console"
            mkdir "$root/dev/shm" "$root/dev/pts"
            mount -t tmpfs -o mode=1777 tmpfs "$root/dev/shm"
            mount -t devpts -o newinstance,ptmxmode=0666,mode=0620 devpts "$root/dev/pts"
            ln -s pts/ptmx "$root/dev/ptmx"
            ln -s /proc/self/fd "$root/dev/fd"
            mount -t tmpfs -o mode=0755 tmpfs "$root/run"
            mount -t tmpfs -o mode=1777 tmpfs "$root/tmp"
            exec setpriv --bounding-set=-sys_module,-sys_time,-sys_boot,-sys_rawio \
                chroot "$root" /usr/bin/env -i container=other "$path" /usr/lib/systemd/systemd --system
        ' container "$root" "$inside_path"
    ) >"$logs/container.log" 2>&1 &
    container_pid=$!
    local i
    for i in $(seq 100); do
        pid1=$(cat "/proc/$container_pid/task/$container_pid/children" 2>/dev/null | awk '{ print $1 }')
        [ -n "$pid1" ] && [ "$(cat "/proc/$pid1/comm" 2>/dev/null)" = systemd ] && return 0
        kill -0 "$container_pid" 2>/dev/null || break
        sleep 0.1
    done
    boot_failure="systemd did not start: $(tail -n 3 "$logs/container.log" | paste -sd' ')"
    pid1=""
    return 1
}

run_in_container() {
    nsenter --target "$pid1" --mount --pid --uts --ipc --net --cgroup --root --wd -- \
        /usr/bin/env -i HOME=/root "$inside_path" /bin/bash /root/deb-test.sh --inside "$@"
}

# host_devices: the host's device nodes a container could reach; compared before
# and after, so that a test that changed them says so.
host_devices() { stat -c '%n %a %U:%G %t:%T' /dev/null /dev/zero /dev/full /dev/random /dev/urandom /dev/tty /dev/console; }
devices_before=$(host_devices)

rc=0
run_chroot chroot "${inside_args[@]}" || rc=$?
if grep -q '^PASS  apt installs' "$root/root/deb-test/results" 2>/dev/null; then
    echo
    if boot_container; then
        run_in_container systemd "${inside_args[@]}" || rc=1
        journal=$(nsenter --target "$pid1" --mount --pid --root -- journalctl --no-pager -b 2>/dev/null || true)
        printf '%s\n' "$journal" >"$logs/journal.log"
        stop_container
    else
        echo "-- phase 2 (systemd as PID 1) SKIPPED: $boot_failure"
        echo "SKIP  phase 2, systemd as PID 1: $boot_failure" >>"$root/root/deb-test/results"
        stop_container
        run_chroot purge "${inside_args[@]}" || rc=1
    fi
fi
cp -r "$root/root/deb-test/." "$logs/" 2>/dev/null || true
if [ "$(host_devices)" != "$devices_before" ]; then
    echo "FAIL  the host's device nodes changed during the test: $(diff <(echo "$devices_before") <(host_devices) | paste -sd' ')" \
        >>"$logs/results"
fi

echo
echo "deb-test summary ($(grep -c '^PASS' "$logs/results" 2>/dev/null || true) passed," \
    "$(grep -c '^FAIL' "$logs/results" 2>/dev/null || true) failed):"
sed 's/^/  /' "$logs/results" 2>/dev/null || true
grep -q '^FAIL' "$logs/results" 2>/dev/null && rc=1
if [ "$rc" = 0 ]; then
    echo "deb-test: PASS in $((SECONDS - started)) s (logs: $logs)"
else
    echo "deb-test: FAIL in $((SECONDS - started)) s (logs: $logs)"
fi
exit "$rc"
