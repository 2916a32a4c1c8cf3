#!/usr/bin/env bash
# make deb-test: installs the built ggml-remote-plugin and ggml-remote-server .debs
# with apt into a FRESH Debian sid root (mmdebstrap, as scripts/make-sysroot makes
# the build root) that has llama.cpp but nothing of this build, and checks the
# INSTALLED files there, in three phases:
#  0. in a chroot, the plugin package alone: nothing of the server or of systemd
#     comes with it (dpkg -L, the packages apt added), ggml bounded to 0.27, and
#     llama-simple loads the installed plugin;
#  1. in a chroot, the server package: its files and user, the man page, the systemd units
#     (systemd-analyze verify), then the installed server, run as the user
#     ggml-remote on /run/ggml-remote/ggml-remote.sock, serving llama-simple guests
#     of another user through the installed plugin (same tokens as the local CPU,
#     over unix and shm), `status` during a generation, the socket's permissions,
#     socket activation (systemd-socket-activate); the conffiles (kept, with a local
#     change, across an upgrade and a remove; purge removes them), the server
#     reading /etc/ggml-remote/server.conf (SKIP where this build has no --config),
#     the CDI spec /etc/cdi/ggml-remote.yaml (parsed; its paths), and a container
#     given the CDI device by podman (SKIP, with the reason, where podman cannot
#     be installed or run a container here);
#  2. the same root booted by systemd-nspawn (systemd as PID 1, a private network,
#     /sys and /proc/sys read-only), the checks run by a unit that powers the
#     container off when they end: ggml-remote.socket enabled and listening, the
#     sandboxed ggml-remote.service started by a guest's connection, a restart
#     during a generation (the session goes on), stop and re-activation, then apt-get purge stopping and removing it all. Skipped (with
#     the reason) where the container cannot boot; the purge then runs in the chroot.
# Prints PASS/FAIL per check and a summary; exits non-zero on any failure. Leaves
# nothing behind: the root lives in a temporary folder, the chroot's mounts in a
# private mount namespace; the logs are kept in BUILD/deb-test/.
#   usage: scripts/deb-test.sh [BUILD_DIR]
#          (needs root, mmdebstrap, systemd-nspawn and the network; installs the
#          Debian packages mmdebstrap and systemd-container when they are missing)
#   GGML_REMOTE_MIRROR      Debian mirror (default: http://deb.debian.org/debian)
#   GGML_REMOTE_PLUGIN_DEB, GGML_REMOTE_SERVER_DEB   the packages to test (default: the
#                           newest BUILD_DIR/ggml-remote-{plugin,server}_*.deb)
#   GGML_REMOTE_KEEP_ROOT=1 keep the root (its path is printed) instead of removing it
set -euo pipefail

# ---------------------------------------------------------------------------
# Inside the test root, as its root user:
#   deb-test.sh --inside PHASE PLUGIN.deb SERVER.deb MODEL
# PHASE: plugin (phase 0), chroot (phase 1), systemd (phase 2, a unit under systemd
# as PID 1) or purge (the purge alone, when phase 2 cannot run).
# ---------------------------------------------------------------------------
LOGS=/root/deb-test
SERVER_LOG=$LOGS/server.log  # the server's log: a file in the chroot, the journal under systemd
UNDER_SYSTEMD=0
SOCK_DIR=/run/ggml-remote
SOCK=$SOCK_DIR/ggml-remote.sock
ACTIVATED_SOCK=$SOCK_DIR/activated.sock
PLUGIN=/usr/lib/x86_64-linux-gnu/ggml-remote/libggml-remote.so
CONF=/etc/ggml-remote/server.conf
CDI_SPEC=/etc/cdi/ggml-remote.yaml
PROMPT="Hello world"
# The long generation: long enough that a restart lands inside it on an idle
# machine too (600 tokens took under a second), within the model's 2048 context.
LONG_TOKENS=2000
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
# such as the server's pid) and records PASS, FAIL, or SKIP when the function
# returns 77 (see skip) with its reason in SKIP_REASON.
SKIP_REASON=""
check() {
    local name=$1 rc=0 started=$SECONDS
    shift
    echo "== $name"
    "$@" || rc=$?
    if [ "$rc" = 0 ]; then
        RESULTS+=("PASS  $name ($((SECONDS - started)) s)")
    elif [ "$rc" = 77 ]; then
        RESULTS+=("SKIP  $name: $SKIP_REASON")
        echo "   -> SKIP: $SKIP_REASON"
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
skip() { SKIP_REASON="$*"; return 77; }

# as USER CMD...: CMD as USER, with its groups, from /tmp.
as() {
    local user=$1
    shift
    (cd /tmp && exec setpriv --reuid="$user" --regid="$user" --init-groups -- "$@")
}
# guest NAME USER SERVERS N [ARGS...]: llama-simple of USER through the installed
# plugin, every layer offered to the remote devices; output in $LOGS/NAME.{out,err}.
# The time limit grows with N: on a loaded machine (2 cores shared with builds)
# the $LONG_TOKENS-token generations under systemd took more than 120 s.
guest() {
    local name=$1 user=$2 servers=$3 n=$4 rc=0
    shift 4
    as "$user" env GGML_BACKEND_PATH="$PLUGIN" GGML_REMOTE_SERVERS="$servers" \
        timeout $((120 + n / 5)) llama-simple -m "$MODEL" -n "$n" -ngl 99 "$@" "$PROMPT" >"$LOGS/$name.out" 2>"$LOGS/$name.err" || rc=$?
    [ "$rc" != 124 ] || say "$name: llama-simple ran out of time ($((120 + n / 5)) s)"
    return "$rc"
}
# local_run NAME N: the reference: llama-simple of alice on the local CPU, no plugin.
local_run() {
    as alice timeout $((120 + $2 / 5)) llama-simple -m "$MODEL" -n "$2" "$PROMPT" >"$LOGS/$1.out" 2>"$LOGS/$1.err" ||
        { tail -n 5 "$LOGS/$1.err" | indent; die "local llama-simple failed"; }
}
# guest_like_local NAME SERVERS: 16 tokens of alice through the plugin, which must
# be those of the local CPU.
guest_like_local() {
    local name=$1
    [ -s "$LOGS/local.out" ] || local_run local 16 || return
    guest "$name" alice "$2" 16 || { tail -n 20 "$LOGS/$name.err" | indent; die "the guest failed"; return; }
    cmp -s "$LOGS/local.out" "$LOGS/$name.out" ||
        { say "local:  $(cat "$LOGS/local.out")" "remote: $(cat "$LOGS/$name.out")"; die "different tokens"; }
}
wait_for_socket() {  # wait_for_socket PATH PID
    for _ in $(seq 100); do
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
# server_says PATTERN MESSAGE: the server's log has a line matching PATTERN.
server_says() { grep -q -- "$1" "$SERVER_LOG" || die "$2"; }
# server_listens_only_on_its_socket LOG: the socket came from systemd, and no TCP.
listens_only_on_systemds_socket() {
    grep -q "listening on unix:$1 (from systemd)" "$2" || die "the socket did not come from systemd" || return
    ! grep -q 'listening on tcp://' "$2" || die "the server also listened on TCP"
}

installed_packages() { dpkg-query -W -f '${db:Status-Abbrev} ${Package}\n' | awk '$1 == "ii" { print $2 }' | sort; }

# --- Phase 0 (in a chroot: the plugin package alone) ---------------------------

# plugin_alone: apt installs ggml-remote-plugin without the server, systemd or
# anything that creates users or units.
plugin_alone() {
    local status added
    installed_packages >"$LOGS/packages-before-plugin"
    apt-get install -y --no-install-recommends "$PLUGIN_DEB" >"$LOGS/apt-install-plugin.log" 2>&1 ||
        { tail -n 30 "$LOGS/apt-install-plugin.log" | indent; die "apt-get install $PLUGIN_DEB failed"; return; }
    status=$(dpkg-query -W -f '${Status} ${Version}' ggml-remote-plugin)
    say "dpkg: ggml-remote-plugin $status"
    [[ $status == "install ok installed "* ]] || die "not installed" || return
    added=$(installed_packages | comm -13 "$LOGS/packages-before-plugin" -)
    say "apt added: $(paste -sd' ' <<<"$added")"
    ! grep -qxE 'ggml-remote-server|systemd|systemd-sysusers|systemd-standalone-sysusers|init-system-helpers|systemd-sysv' <<<"$added" ||
        die "the plugin pulled in the server or systemd" || return
    ! dpkg-query -W ggml-remote-server >/dev/null 2>&1 || die "ggml-remote-server is known to dpkg"
}

# plugin_files: the plugin and its documents, nothing else (no /etc, no programs, no units).
plugin_files() {
    local files other
    files=$(dpkg -L ggml-remote-plugin | while read -r path; do [ -d "$path" ] || echo "$path"; done)
    indent <<<"$files"
    grep -qx "$PLUGIN" <<<"$files" || die "no $PLUGIN" || return
    for doc in copyright changelog.Debian.gz README.Debian; do
        grep -qx "/usr/share/doc/ggml-remote-plugin/$doc" <<<"$files" || die "no /usr/share/doc/ggml-remote-plugin/$doc" || return
    done
    other=$(grep -vxE "$PLUGIN|/usr/share/doc/ggml-remote-plugin/.*" <<<"$files" || true)
    [ -z "$other" ] || die "files beyond the plugin and its documents: $other" || return
    [ ! -e /var/lib/dpkg/info/ggml-remote-plugin.postinst ] || die "the plugin package has a postinst"
}

# plugin_depends: ggml bounded to the 0.27 series (its private layouts), from dpkg-shlibdeps the rest.
plugin_depends() {
    local depends
    depends=$(dpkg-query -W -f '${Depends}' ggml-remote-plugin)
    say "Depends: $depends"
    grep -qF 'libggml0 (>= 0.27.0)' <<<"$depends" || die "no libggml0 (>= 0.27.0)" || return
    grep -qF 'libggml0 (<< 0.28~)' <<<"$depends" || die "no libggml0 (<< 0.28~)" || return
    grep -qE '(^|, )libc6 \(>= ' <<<"$depends" || die "no versioned libc6: was dpkg-shlibdeps run?" || return
    grep -qE '(^|, )libstdc\+\+6 \(>= ' <<<"$depends" || die "no versioned libstdc++6: was dpkg-shlibdeps run?"
}

# plugin_loads: llama-simple loads the installed plugin, which says it has no servers.
plugin_loads() {
    GGML_BACKEND_PATH="$PLUGIN" timeout 120 llama-simple -m "$MODEL" -n 4 "$PROMPT" >"$LOGS/plugin-alone.out" 2>"$LOGS/plugin-alone.err" ||
        { tail -n 10 "$LOGS/plugin-alone.err" | indent; die "llama-simple failed with the plugin"; return; }
    grep '^ggml-remote:' "$LOGS/plugin-alone.err" | head -n 2 | indent
    grep -q '^ggml-remote: GGML_REMOTE_SERVERS is not set' "$LOGS/plugin-alone.err" || die "the plugin did not load"
}

phase_plugin() {
    echo "-- phase 0: the plugin package alone, in a chroot"
    check "apt installs ggml-remote-plugin alone: no server, no systemd" plugin_alone
    failed && return 1
    check "ggml-remote-plugin holds the plugin and its documents only" plugin_files
    check "ggml-remote-plugin depends on libggml0 0.27.x, and dpkg-shlibdeps' libraries" plugin_depends
    check "llama-simple loads the installed plugin" plugin_loads
}

# --- Phase 1 (in a chroot) --------------------------------------------------

install_package() {
    apt-get install -y --no-install-recommends "$SERVER_DEB" >"$LOGS/apt-install.log" 2>&1 ||
        { tail -n 30 "$LOGS/apt-install.log" | indent; die "apt-get install $SERVER_DEB failed"; return; }
    grep -E '^Setting up ' "$LOGS/apt-install.log" | grep -E 'ggml|systemd' | indent || true
    local status
    status=$(dpkg-query -W -f '${Status} ${Version}' ggml-remote-server)
    say "dpkg: ggml-remote-server $status"
    [[ $status == "install ok installed "* ]] || return
    say "Depends: $(dpkg-query -W -f '${Depends}' ggml-remote-server)"
    dpkg-query -W -f '${Depends}' ggml-remote-server | grep -qF "ggml-remote-plugin (= $(dpkg-query -W -f '${Version}' ggml-remote-plugin))" ||
        die "ggml-remote-server does not depend on ggml-remote-plugin of its version"
}

files_installed() {
    local path owner expected
    for path in /usr/bin/ggml-remote-server /usr/libexec/ggml-remote/ggml-remote-worker /usr/libexec/ggml-remote/ggml-remote-services "$PLUGIN" /usr/share/man/man1/ggml-remote-server.1.gz \
        /usr/lib/systemd/system/ggml-remote.service /usr/lib/systemd/system/ggml-remote.socket \
        /usr/lib/sysusers.d/ggml-remote.conf "$CONF" "$CDI_SPEC" /usr/share/doc/ggml-remote-server/README.Debian \
        /usr/share/doc/ggml-remote-server/changelog.Debian.gz /usr/share/doc/ggml-remote-server/copyright; do
        [ -f "$path" ] || die "missing: $path" || return
        owner=$(dpkg -S "$path" | cut -d: -f1)
        expected=ggml-remote-server
        [ "$path" != "$PLUGIN" ] || expected=ggml-remote-plugin
        [ "$owner" = "$expected" ] || die "$path belongs to '$owner'" || return
        say "ok: $path ($owner)"
    done
    grep -qx 'License: Expat' /usr/share/doc/ggml-remote-server/copyright || die "the copyright file names no licence" || return
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

# same_tokens TRANSPORT: a guest of alice, all its layers on the server, generates
# what the local CPU does, in a session the server logs.
same_tokens() {
    local name="remote-$1" before line
    before=$(sessions)
    guest_like_local "$name" "$1:$SOCK" || return
    grep -q 'assigned to device REMOTE0' "$LOGS/$name.err" || die "no layer was assigned to REMOTE0" || return
    ! grep -q 'layer .* assigned to device CPU' "$LOGS/$name.err" || die "some layers stayed on the CPU" || return
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

# alice_listed_by_status GUEST_PID: polls `status --json` until it lists a session
# of alice with commands; false when the guest ended first.
alice_listed_by_status() {
    local json=""
    for _ in $(seq 1200); do
        json=$(ggml-remote-server status --connect "unix:$SOCK" --json 2>"$LOGS/status.err") || true
        printf '%s\n' "$json" >"$LOGS/status.json"
        grep -q "\"peer\": \"[^\"]* uid $ALICE_UID\"" <<<"$json" && grep -qE '"commands": [1-9]' <<<"$json" && return
        kill -0 "$1" 2>/dev/null || break
        sleep 0.05
    done
    indent <"$LOGS/status.json"
    indent <"$LOGS/status.err"
    return 1
}

status_during_generation() {
    local guest_pid running=0
    local_run long-local "$LONG_TOKENS" || return
    guest long-remote alice "shm:$SOCK" "$LONG_TOKENS" &
    guest_pid=$!
    PIDS+=("$guest_pid")
    alice_listed_by_status "$guest_pid" || die "status showed no session of alice" || return
    kill -0 "$guest_pid" 2>/dev/null && running=1
    ggml-remote-server status --connect "unix:$SOCK" 2>&1 | tee "$LOGS/status.txt" | indent
    say "status --json showed alice's session with commands > 0$([ "$running" = 1 ] && echo ', during the generation')"
    # Only the server's own user (or root) gets answers.
    ! as alice ggml-remote-server status --connect "unix:$SOCK" >"$LOGS/status-alice.txt" 2>&1 ||
        die "status answered alice" || return
    say "as alice: $(cat "$LOGS/status-alice.txt")"
    as ggml-remote ggml-remote-server status --connect "unix:$SOCK" --json >/dev/null ||
        die "status refused the server's own user" || return
    wait "$guest_pid" || { tail -n 20 "$LOGS/long-remote.err" | indent; die "the long generation failed"; return; }
    [ -s "$LOGS/local.out" ] || local_run local 16 || return
    [[ $(cat "$LOGS/long-remote.out") == "$(cat "$LOGS/local.out")"* ]] ||
        die "the long generation does not start as the CPU's" || return
    # Over hundreds of greedy tokens of a random model, near-ties may tip either way
    # (other thread counts sum in another order): reported, not a failure.
    if cmp -s "$LOGS/long-local.out" "$LOGS/long-remote.out"; then
        say "the $LONG_TOKENS-token generation over shm is the CPU's"
    else
        say "the $LONG_TOKENS-token generation starts as the CPU's; $(cmp "$LOGS/long-local.out" "$LOGS/long-remote.out" |
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
    guest_like_local activated "shm:$ACTIVATED_SOCK" || { indent <"$LOGS/activated.log"; return 1; }
    sed 's/^/   server: /' "$LOGS/activated.log"
    listens_only_on_systemds_socket "$ACTIVATED_SOCK" "$LOGS/activated.log" || return
    kill "$pid"
    wait "$pid" || true
    [ -S "$ACTIVATED_SOCK" ] || die "the server removed the socket file that systemd owns" || return
    rm -f "$ACTIVATED_SOCK"
    say "the same tokens through a socket passed in LISTEN_FDS; the socket file was left to systemd"
}

# conffiles_registered: dpkg knows the server's two files under /etc as conffiles.
conffiles_registered() {
    local conffiles path
    conffiles=$(dpkg-query -W -f '${Conffiles}' ggml-remote-server)
    indent <<<"$conffiles"
    for path in "$CONF" "$CDI_SPEC"; do
        grep -q "^ $path " <<<"$conffiles" || die "$path is not a conffile" || return
    done
    grep -qx 'keep-sessions' "$CONF" || die "$CONF lacks keep-sessions" || return
    grep -qx 'shader-cache = /var/cache/ggml-remote/shaders' "$CONF" || die "$CONF lacks shader-cache" || return
    grep -q "^ExecStart=/usr/bin/ggml-remote-server --config $CONF\$" /usr/lib/systemd/system/ggml-remote.service ||
        die "ggml-remote.service does not run the server with --config $CONF"
}

# server_reads_conf: the installed server starts with --config /etc/ggml-remote/server.conf.
server_reads_conf() {
    local pid sock=$SOCK_DIR/config-test.sock
    install -d -o ggml-remote -g ggml-remote -m 0755 "$SOCK_DIR" /var/cache/ggml-remote
    setpriv --reuid=ggml-remote --regid=ggml-remote --init-groups -- \
        /usr/bin/ggml-remote-server --config "$CONF" --listen "unix:$sock" >"$LOGS/config-server.log" 2>&1 &
    pid=$!
    PIDS+=("$pid")
    wait_for_socket "$sock" "$pid" || { indent <"$LOGS/config-server.log"; die "the server did not start with --config $CONF"; return; }
    guest_like_local config "shm:$sock" || return
    kill "$pid"
    wait "$pid" || true
    sed 's/^/   server: /' "$LOGS/config-server.log" | head -n 5
    say "the server started with --config $CONF and served a guest"
}

# upgrade_and_remove_keep_conffile: a local change to server.conf survives an upgrade
# (a newer version of the same package, repacked here) and a remove; purge (at the
# end) removes it. dpkg runs with no terminal: a conffile prompt would fail it.
upgrade_and_remove_keep_conffile() {
    local work=/root/deb-test-upgrade version
    echo '# deb-test: a local change' >>"$CONF"
    rm -rf "$work"
    mkdir -p "$work"
    dpkg-deb -R "$SERVER_DEB" "$work/root"
    version="$(dpkg-query -W -f '${Version}' ggml-remote-server)+debtest1"
    sed -i "s/^Version: .*/Version: $version/" "$work/root/DEBIAN/control"
    dpkg-deb -b "$work/root" "$work/upgrade.deb" >/dev/null || die "could not repack the package" || return
    dpkg -i "$work/upgrade.deb" </dev/null >"$LOGS/dpkg-upgrade.log" 2>&1 ||
        { indent <"$LOGS/dpkg-upgrade.log"; die "the upgrade to $version failed"; return; }
    [ "$(dpkg-query -W -f '${Version}' ggml-remote-server)" = "$version" ] || die "not upgraded" || return
    grep -qx '# deb-test: a local change' "$CONF" || die "the upgrade lost the local change" || return
    say "upgraded to $version: the local change is kept"
    dpkg --remove ggml-remote-server </dev/null >"$LOGS/dpkg-remove.log" 2>&1 ||
        { indent <"$LOGS/dpkg-remove.log"; die "dpkg --remove failed"; return; }
    [ "$(dpkg-query -W -f '${db:Status-Abbrev}' ggml-remote-server)" = "rc " ] || die "not in config-files state" || return
    [ ! -e /usr/bin/ggml-remote-server ] || die "dpkg --remove left the server" || return
    grep -qx '# deb-test: a local change' "$CONF" || die "dpkg --remove removed or changed $CONF" || return
    [ -f "$CDI_SPEC" ] || die "dpkg --remove removed $CDI_SPEC" || return
    say "removed (config-files): $CONF and $CDI_SPEC are kept"
    dpkg -i "$work/upgrade.deb" </dev/null >"$LOGS/dpkg-reinstall.log" 2>&1 ||
        { indent <"$LOGS/dpkg-reinstall.log"; die "installing it again failed"; return; }
    grep -qx '# deb-test: a local change' "$CONF" || die "installing it again lost the local change" || return
    [ -L /etc/systemd/system/sockets.target.wants/ggml-remote.socket ] || die "ggml-remote.socket is no longer enabled" || return
    say "installed again: the local change is kept, the socket still enabled"
    rm -rf "$work"
}

# cdi_spec: /etc/cdi/ggml-remote.yaml parses (python3-yaml) as a CDI spec whose
# device ggml-remote/server=socket mounts the socket's directory and the plugin,
# and sets the two variables to them.
cdi_spec() {
    apt-get install -y --no-install-recommends python3-yaml >"$LOGS/apt-yaml.log" 2>&1 ||
        { tail -n 5 "$LOGS/apt-yaml.log" | indent; die "apt-get install python3-yaml failed"; return; }
    python3 - "$CDI_SPEC" "$SOCK" "$PLUGIN" <<'EOF' 2>&1 | indent
import os, sys, yaml
path, sock, plugin = sys.argv[1:]
spec = yaml.safe_load(open(path))
problems = []
def expect(what, ok):
    if not ok:
        problems.append(what)
expect("cdiVersion 0.x", str(spec.get("cdiVersion", "")).startswith("0."))
expect("kind ggml-remote/server", spec.get("kind") == "ggml-remote/server")
devices = {d.get("name"): d for d in spec.get("devices", [])}
expect("a device named socket", "socket" in devices)
edits = devices.get("socket", {}).get("containerEdits", {})
env = edits.get("env", [])
expect(f"GGML_BACKEND_PATH={plugin}", f"GGML_BACKEND_PATH={plugin}" in env)
expect(f"GGML_REMOTE_SERVERS=shm:{sock}", f"GGML_REMOTE_SERVERS=shm:{sock}" in env)
mounts = {(m.get("hostPath"), m.get("containerPath")) for m in edits.get("mounts", [])}
expect(f"a mount of {os.path.dirname(sock)}", (os.path.dirname(sock), os.path.dirname(sock)) in mounts)
expect(f"a mount of {plugin}", (plugin, plugin) in mounts)
expect(f"{plugin} exists", os.path.isfile(plugin))
for p in problems:
    print("missing or wrong:", p)
print(f"{path}: cdiVersion {spec.get('cdiVersion')}, kind {spec.get('kind')}, devices {sorted(devices)}, "
      f"{len(env)} variables, {len(mounts)} mounts" + ("" if problems else ": as expected"))
sys.exit(1 if problems else 0)
EOF
    [ "${PIPESTATUS[0]}" = 0 ]
}

# podman_device: a container (rootful podman, from `podman import` of a minimal root:
# symlinks into /usr, which comes from this root read-only) given the CDI device
# ggml-remote/server=socket runs llama-simple as alice's uid in the group
# ggml-remote, through the plugin and socket the device brings: the local CPU's
# tokens. SKIP, with the reason, where podman cannot be installed or cannot run a
# container here (e.g. nested in another container).
podman_device() {
    local min=/root/deb-test-min gid podman
    apt-get install -y --no-install-recommends podman runc >"$LOGS/apt-podman.log" 2>&1 ||
        { skip "podman is not installable here: $(tail -n 1 "$LOGS/apt-podman.log")"; return; }
    # runc: crun refuses a host with hybrid cgroups; vfs: no overlay on overlay;
    # no systemd, no journal here.
    podman=(env PODMAN_IGNORE_CGROUPSV1_WARNING=1 podman --runtime runc --root /var/tmp/deb-test-podman --runroot /run/deb-test-podman --storage-driver vfs
        --cgroup-manager cgroupfs --events-backend file)
    rm -rf "$min"
    mkdir -p "$min"/{etc,tmp,proc,sys,dev,run,srv/ggml-remote-test,usr}
    for dir in bin sbin lib lib64; do ln -s "usr/$dir" "$min/$dir"; done
    cp /etc/passwd /etc/group "$min/etc/"
    tar -C "$min" -c . | "${podman[@]}" import - deb-test-min >"$LOGS/podman.log" 2>&1 ||
        { skip "podman import failed: $(tail -n 1 "$LOGS/podman.log")"; return; }
    local run=("${podman[@]}" run --rm --network none -v /usr:/usr:ro
        -v /srv/ggml-remote-test:/srv/ggml-remote-test:ro)
    timeout 120 "${run[@]}" deb-test-min /bin/true >>"$LOGS/podman.log" 2>&1 ||
        { skip "podman cannot run a container here: $(grep -v '^$' "$LOGS/podman.log" | tail -n 1)"; return; }
    gid=$(getent group ggml-remote | cut -d: -f3)
    timeout 120 "${run[@]}" --device ggml-remote/server=socket --user "$ALICE_UID:$(id -g alice)" --group-add "$gid" \
        deb-test-min sh -c 'echo "in the container: $GGML_REMOTE_SERVERS $GGML_BACKEND_PATH" >&2; ls -l /run/ggml-remote >&2;
            exec llama-simple -m "$0" -n 16 -ngl 99 "$1"' "$MODEL" "$PROMPT" >"$LOGS/podman-guest.out" 2>"$LOGS/podman-guest.err" ||
        { tail -n 15 "$LOGS/podman-guest.err" | indent; die "the container with --device ggml-remote/server=socket failed"; return; }
    grep -E '^in the container|ggml-remote.sock' "$LOGS/podman-guest.err" | indent
    grep -q 'assigned to device REMOTE0' "$LOGS/podman-guest.err" || die "no layer was assigned to REMOTE0" || return
    [ -s "$LOGS/local.out" ] || local_run local 16 || return
    cmp -s "$LOGS/local.out" "$LOGS/podman-guest.out" || die "other tokens than the local CPU's" || return
    say "podman $(podman --version | cut -d' ' -f3): the container got the socket and the plugin from the CDI device; the same 16 tokens"
}

purge_package() {
    local path
    apt-get purge -y ggml-remote-server ggml-remote-plugin >"$LOGS/apt-purge.log" 2>&1 ||
        { tail -n 20 "$LOGS/apt-purge.log" | indent; die "apt-get purge failed"; return; }
    for path in /usr/bin/ggml-remote-server /usr/libexec/ggml-remote/ggml-remote-worker /usr/libexec/ggml-remote/ggml-remote-services "$PLUGIN" /usr/lib/systemd/system/ggml-remote.service \
        /usr/share/man/man1/ggml-remote-server.1.gz "$CONF" /etc/ggml-remote "$CDI_SPEC"; do
        [ ! -e "$path" ] || die "$path is still there" || return
    done
    for package in ggml-remote-server ggml-remote-plugin; do
        ! dpkg-query -W -f '${Status}\n' "$package" 2>/dev/null | grep -q 'installed' ||
            die "$package is still (half-)installed or has config-files" || return
    done
    say "purged, their files and conffiles are gone; the user stays: $(getent passwd ggml-remote)"
}

# --- Phase 2 (a unit under systemd as PID 1) ----------------------------------

unit_state() { systemctl show -P ActiveState "$1"; }
# unit_is UNIT STATE MESSAGE: UNIT's ActiveState is STATE, or the check fails with MESSAGE.
unit_is() { [ "$(unit_state "$1")" = "$2" ] || die "$3"; }

booted() {
    local state
    for _ in $(seq 120); do
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
    local enabled mode dir
    enabled=$(systemctl is-enabled ggml-remote.socket 2>&1 || true)
    mode=$(stat -c '%A %U:%G' "$SOCK" 2>&1 || true)
    dir=$(stat -c '%a %U:%G' "$SOCK_DIR" 2>&1 || true)
    say "ggml-remote.socket: $enabled, $(unit_state ggml-remote.socket);" \
        "ggml-remote.service: $(unit_state ggml-remote.service)" "$SOCK: $mode; $SOCK_DIR: $dir"
    [ "$enabled" = enabled ] || die "the package did not enable ggml-remote.socket" || return
    unit_is ggml-remote.socket active "ggml-remote.socket is not listening" || return
    [ "$mode" = "srw-rw---- ggml-remote:ggml-remote" ] || die "unexpected socket permissions" || return
    unit_is ggml-remote.service inactive "the server started before any guest connected"
}

service_activated() {
    local pid status
    unit_is ggml-remote.service active "ggml-remote.service is not running" || return
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
    listens_only_on_systemds_socket "$SOCK" "$SERVER_LOG" || return
    systemd-analyze security --no-pager ggml-remote.service 2>/dev/null | tail -n 1 | indent || true
}

# restart_keeps_session: `systemctl restart ggml-remote.service` during a guest's
# generation replaces only the listener (KillMode=process, --keep-sessions): the
# guest finishes with the tokens of the same generation undisturbed, its worker
# stays in the unit's cgroup, the new listener says it took the session over (from
# the board in systemd's file descriptor store), and it serves a new guest;
# `systemctl reload` then reaches the listener (SIGHUP) and replaces nothing.
restart_keeps_session() {
    local guest_pid old_pid new_pid running=0 procs before
    [ -s "$LOGS/long-remote.out" ] || die "no undisturbed $LONG_TOKENS-token generation to compare with" || return
    guest restart-remote alice "shm:$SOCK" "$LONG_TOKENS" &
    guest_pid=$!
    PIDS+=("$guest_pid")
    alice_listed_by_status "$guest_pid" || die "the guest's session did not start" || return
    old_pid=$(systemctl show -P MainPID ggml-remote.service)
    systemctl restart ggml-remote.service 2>&1 | indent
    kill -0 "$guest_pid" 2>/dev/null && running=1
    new_pid=$(systemctl show -P MainPID ggml-remote.service)
    procs=$(wc -l <"/sys/fs/cgroup$(systemctl show -P ControlGroup ggml-remote.service)/cgroup.procs" 2>/dev/null || echo 0)
    say "systemctl restart: listener $old_pid -> $new_pid; $procs process(es) in the unit's cgroup;" \
        "the guest $([ "$running" = 1 ] && echo 'was still generating' || echo 'had already finished')"
    [ "$running" = 1 ] || die "the guest finished before the restart: nothing was tested" || return
    [ "$new_pid" != "$old_pid" ] && [ "$new_pid" != 0 ] || die "no new listener" || return
    [ "$procs" -ge 2 ] || die "the worker is not in the unit's cgroup" || return
    wait "$guest_pid" || { tail -n 20 "$LOGS/restart-remote.err" | indent; die "the guest failed across the restart"; return; }
    cmp -s "$LOGS/long-remote.out" "$LOGS/restart-remote.out" || die "other tokens than undisturbed" || return
    say "the $LONG_TOKENS-token generation across the restart is the undisturbed one"
    server_log
    grep 'took over' "$SERVER_LOG" | tail -n 1 | sed 's/^/   server: /'
    server_says 'took over 1 live session(s) from the previous listener' "the new listener took nothing over" ||
        { systemd-analyze fdstore ggml-remote.service 2>&1 | indent; grep 'status board' "$SERVER_LOG" | indent; return 1; }
    before=$(sessions)
    guest_like_local after-restart "unix:$SOCK" || return
    [ "$(sessions)" -gt "$before" ] || die "the new listener logged no new session" || return
    [ "$(systemctl show -P MainPID ggml-remote.service)" = "$new_pid" ] || die "the listener changed again" || return
    # systemctl reload: SIGHUP to the listener alone (without --tls-psk it says so).
    systemctl reload ggml-remote.service 2>&1 | indent
    sleep 0.5
    server_log
    server_says 'SIGHUP: no --tls-psk file to re-read' "systemctl reload did not reach the listener" || return
    [ "$(systemctl show -P MainPID ggml-remote.service)" = "$new_pid" ] || die "systemctl reload replaced the listener"
}

stop_and_reactivate() {
    systemctl stop ggml-remote.service 2>&1 | indent
    say "after systemctl stop ggml-remote.service: service $(unit_state ggml-remote.service)," \
        "socket $(unit_state ggml-remote.socket), $SOCK $([ -S "$SOCK" ] && echo there || echo GONE)"
    unit_is ggml-remote.socket active "the socket stopped with the service" || return
    [ -S "$SOCK" ] || die "stopping the service removed the socket file" || return
    guest_like_local reactivated "shm:$SOCK" || return
    unit_is ggml-remote.service active "the connection did not start the service again" || return
    say "the next guest started the service again, and got the same tokens"
}

# operator_walkthrough: what the README tells a new operator, under systemd: one
# changed setting is one line of server.conf (here: metrics on loopback), a
# restart applies it, 20 guest sessions later a scrape has as many series as after
# one (labels are bounded; both taken with no session live) and counts 20 more
# sessions, and the journal has the server's lines with their priority.
operator_walkthrough() {
    local scrape1 scrape20 series1 series20 started1 started20 i
    echo 'metrics = tcp://127.0.0.1:9464' >>"$CONF"
    systemctl restart ggml-remote.service 2>&1 | indent
    guest_like_local operator-first "shm:$SOCK" || return
    scrape1=$(metrics_scrape) || die "no answer on http://127.0.0.1:9464/metrics" || return
    for i in $(seq 2 20); do
        guest "operator-$i" alice "shm:$SOCK" 4 || { tail -n 5 "$LOGS/operator-$i.err" | indent; die "guest $i failed"; return; }
    done
    scrape20=$(metrics_scrape) || die "no answer on http://127.0.0.1:9464/metrics" || return
    series1=$(grep -cv '^#' <<<"$scrape1")
    series20=$(grep -cv '^#' <<<"$scrape20")
    started1=$(awk '$1 == "ggml_remote_sessions_started_total" { print $2 }' <<<"$scrape1")
    started20=$(awk '$1 == "ggml_remote_sessions_started_total" { print $2 }' <<<"$scrape20")
    say "echo 'metrics = tcp://127.0.0.1:9464' >>$CONF; systemctl restart ggml-remote.service" \
        "after 1 session: $series1 series, sessions_started_total $started1" \
        "after 20 sessions: $series20 series, sessions_started_total $started20"
    grep -E '^ggml_remote_(build_info|sessions_started_total|device_memory_total_bytes)' <<<"$scrape20" | indent
    [ "$series20" = "$series1" ] || die "the series grew with the sessions" || return
    [ "$((started20 - started1))" = 19 ] || die "sessions_started_total did not count the 19 guests" || return
    journalctl -u ggml-remote.service -o short-iso -p info --no-pager -n 4 2>&1 | indent
    journalctl -u ggml-remote.service -o verbose --no-pager -n 1 2>/dev/null | grep -E '^ *PRIORITY=' | indent
}
# metrics_scrape: the server's /metrics page, with the Python of the test root, once
# no session is live any more (a tenant's series last as long as its sessions).
metrics_scrape() {
    local page
    for _ in $(seq 50); do
        page=$(python3 -c 'import urllib.request, sys; sys.stdout.write(urllib.request.urlopen("http://127.0.0.1:9464/metrics", timeout=10).read().decode())') || return
        grep -qx 'ggml_remote_sessions_live 0' <<<"$page" && break
        sleep 0.2
    done
    printf '%s\n' "$page"
}

purge_under_systemd() {
    purge_package || return
    say "ggml-remote.socket: $(unit_state ggml-remote.socket), ggml-remote.service: $(unit_state ggml-remote.service)"
    unit_is ggml-remote.socket inactive "the socket still listens" || return
    unit_is ggml-remote.service inactive "the server still runs" || return
    [ ! -e "$SOCK" ] || die "$SOCK is still there" || return
    [ ! -e /etc/systemd/system/sockets.target.wants/ggml-remote.socket ] || die "the enablement link is still there" || return
    ! systemctl cat ggml-remote.socket >/dev/null 2>&1 || die "systemd still knows ggml-remote.socket"
}

phase_chroot() {
    echo "-- phase 1: the package in a chroot"
    check "apt installs ggml-remote-server and its dependencies" install_package
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
        check "podman --device ggml-remote/server=socket: a container's guest, same tokens" podman_device
        check "SIGTERM stops the server, which removes its socket" stop_server
    fi
    check "socket activation (LISTEN_FDS), with systemd-socket-activate" socket_activation
    check "conffiles: $CONF, $CDI_SPEC; the unit runs --config" conffiles_registered
    check "the installed server reads $CONF (--config)" server_reads_conf
    check "$CDI_SPEC: a CDI spec with the socket and plugin paths" cdi_spec
    check "a local change to $CONF survives upgrade and remove" upgrade_and_remove_keep_conffile
}

phase_systemd() {
    echo "-- phase 2: the package under systemd (PID 1 in a systemd-nspawn container)"
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
    check "systemctl restart during a generation keeps the session; the new listener serves" restart_keeps_session
    check "systemctl stop ggml-remote.service, then a guest starts it again" stop_and_reactivate
    check "an operator: one line of $CONF, a restart, 20 sessions, a bounded scrape, the journal" operator_walkthrough
    check "apt-get purge stops and removes the units" purge_under_systemd
    journalctl --no-pager -b >"$LOGS/journal.log" 2>&1 || true
}

run_inside() {
    local phase=$1
    PLUGIN_DEB=$2
    SERVER_DEB=$3
    MODEL=$4
    mkdir -p "$LOGS"
    export LC_ALL=C.UTF-8
    trap stop_all EXIT
    ALICE_UID=$(id -u alice 2>/dev/null || true)
    case $phase in
    plugin) phase_plugin || return ;;
    chroot) phase_chroot || return ;;
    systemd) phase_systemd || return ;;
    purge) check "apt-get purge removes the package" purge_package ;;
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

# need COMMAND PACKAGE: installs the Debian package PACKAGE when COMMAND is missing.
need() {
    command -v "$1" >/dev/null && return
    echo "deb-test: $1 is missing; installing it (apt-get install $2)" >&2
    apt-get update -qq && apt-get install -y -qq "$2" >/dev/null
}

[ "$(id -u)" = 0 ] || { echo "deb-test: needs root (mmdebstrap, chroot, mounts, systemd-nspawn)" >&2; exit 1; }
need mmdebstrap mmdebstrap
need systemd-nspawn systemd-container || echo "deb-test: no systemd-nspawn: phase 2 will be skipped" >&2
# newest_deb NAME: the newest BUILD/NAME_*.deb, as an absolute path.
newest_deb() {
    local deb
    deb=$(ls -t "$build/$1"_*.deb 2>/dev/null | head -n 1 || true)
    [ -n "$deb" ] && [ -f "$deb" ] || { echo "deb-test: no $1_*.deb in $build (make deb)" >&2; return 1; }
    echo "$(cd "$(dirname "$deb")" && pwd)/$(basename "$deb")"
}
plugin_deb=${GGML_REMOTE_PLUGIN_DEB:-$(newest_deb ggml-remote-plugin)} || exit 1
server_deb=${GGML_REMOTE_SERVER_DEB:-$(newest_deb ggml-remote-server)} || exit 1
logs=$build/deb-test
rm -rf "$logs"
mkdir -p "$logs"
echo "deb-test: packages $plugin_deb $server_deb"

# The synthetic model comes from this build (scripts/in-sysroot runs the tool
# where it was built); the test root has only the package and llama.cpp.
model=$build/models/tiny-f16.gguf
if [ ! -s "$model" ]; then
    mkdir -p "$build/models"
    "$here/in-sysroot" "$build/bin/ggml-remote-synthetic-model" --preset tiny --type f16 -o "$model.tmp.$$" >/dev/null
    mv "$model.tmp.$$" "$model"
fi

root=$(mktemp -d /var/tmp/ggml-remote-deb-test.XXXXXX)
results=$root/root/deb-test/results
cleanup() {
    local rc=$? proc leftover
    # Processes still running in the root (none, normally: each phase stops its own).
    for proc in /proc/[0-9]*; do
        [ "$(readlink "$proc/root" 2>/dev/null)" = "$root" ] && kill -KILL "${proc#/proc/}" 2>/dev/null || true
    done
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

cp "$plugin_deb" "$server_deb" "$root/root/"
install -d -m 0755 "$root/srv/ggml-remote-test"
install -m 0644 "$model" "$root/srv/ggml-remote-test/tiny-f16.gguf"
cp "${BASH_SOURCE[0]}" "$root/root/deb-test.sh"
inside_args=("/root/$(basename "$plugin_deb")" "/root/$(basename "$server_deb")" /srv/ggml-remote-test/tiny-f16.gguf)
# No getty on the container's console (the test's output is all it shows).
ln -sf /dev/null "$root/etc/systemd/system/console-getty.service"

# run_chroot PHASE: the inside part in a chroot, its mounts in a private namespace.
run_chroot() {
    unshare --mount --propagation private --fork -- /bin/bash -c '
        set -e
        root=$1; path=$2; shift 2
        # The root a mount point of its own: container runtimes (podman_device) need one.
        mount --bind "$root" "$root"
        mount --rbind /dev "$root/dev"
        mount -t proc proc "$root/proc"
        mount --rbind /sys "$root/sys"
        mount -t tmpfs -o mode=0755 tmpfs "$root/run"
        mount -t tmpfs -o mode=1777 tmpfs "$root/tmp"
        cp -L /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
        exec chroot "$root" /usr/bin/env -i HOME=/root "$path" /bin/bash /root/deb-test.sh --inside "$@"
    ' deb-test "$root" "$inside_path" "$@"
}

# Phase 2 runs as deb-test.service of the booted root; it powers the container off
# when it ends. Type=simple: the boot is over (is-system-running) while it runs.
install_phase2_unit() {
    cat >"$root/etc/systemd/system/deb-test.service" <<EOF
[Unit]
Description=ggml-remote deb-test, phase 2
After=multi-user.target
SuccessAction=poweroff
FailureAction=poweroff

[Service]
Type=simple
Environment=HOME=/root $inside_path
ExecStart=/bin/bash /root/deb-test.sh --inside systemd ${inside_args[*]}
StandardOutput=append:/root/deb-test/systemd.out
StandardError=inherit
EOF
    mkdir -p "$root/etc/systemd/system/multi-user.target.wants"
    ln -sf ../deb-test.service "$root/etc/systemd/system/multi-user.target.wants/deb-test.service"
}

# boot_and_test: boots the root with systemd-nspawn (its own pid, mount, network,
# ipc and uts namespaces; /sys and /proc/sys read-only; its own /dev) and shows
# phase 2's output as it runs. Fails, with the reason in boot_failure, where the
# container's systemd does not start; a container that starts but does not run or
# finish the checks is a FAIL. The host may have no systemd (no machined, no scope
# units: --register=no --keep-unit) and a hybrid cgroup setup, where the container
# still needs the unified hierarchy that systemd in sid requires.
boot_failure=""
boot_and_test() {
    local out=$root/root/deb-test/systemd.out pid status=0
    command -v systemd-nspawn >/dev/null ||
        { boot_failure="systemd-nspawn is missing (Debian package systemd-container)"; return 1; }
    install_phase2_unit
    : >"$out"
    SYSTEMD_NSPAWN_UNIFIED_HIERARCHY=1 timeout 1800 systemd-nspawn --quiet --boot --directory="$root" \
        --register=no --keep-unit --private-network --console=read-only -- --show-status=no \
        >"$logs/container.log" 2>&1 </dev/null &
    pid=$!
    tail --pid="$pid" -n +1 -f "$out"
    wait "$pid" || status=$?
    if grep -q 'running in system mode' "$logs/container.log"; then
        grep -q 'systemd boots the root' "$results" || echo "FAIL  phase 2: deb-test.service did not run" >>"$results"
        [ "$status" = 0 ] || echo "FAIL  phase 2: systemd-nspawn exited with $status (124: after 30 min)" >>"$results"
        return 0
    fi
    boot_failure="systemd did not start: $(tr -d '\r' <"$logs/container.log" | tail -n 3 | paste -sd' ')"
    return 1
}

# host_devices: the host's device nodes a container could reach; compared before
# and after, so that a test that changed them says so.
host_devices() { stat -c '%n %a %U:%G %t:%T' /dev/null /dev/zero /dev/full /dev/random /dev/urandom /dev/tty /dev/console; }
devices_before=$(host_devices)

rc=0
run_chroot plugin "${inside_args[@]}" || rc=$?
grep -q '^PASS  apt installs ggml-remote-plugin' "$results" 2>/dev/null && { run_chroot chroot "${inside_args[@]}" || rc=$?; }
if grep -q '^PASS  apt installs ggml-remote-server' "$results" 2>/dev/null; then
    echo
    if ! boot_and_test; then
        echo "-- phase 2 (systemd as PID 1) SKIPPED: $boot_failure"
        echo "SKIP  phase 2, systemd as PID 1: $boot_failure" >>"$results"
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
    "$(grep -c '^FAIL' "$logs/results" 2>/dev/null || true) failed, $(grep -c '^SKIP' "$logs/results" 2>/dev/null || true) skipped):"
sed 's/^/  /' "$logs/results" 2>/dev/null || true
grep -q '^FAIL' "$logs/results" 2>/dev/null && rc=1
if [ "$rc" = 0 ]; then
    echo "deb-test: PASS in $((SECONDS - started)) s (logs: $logs)"
else
    echo "deb-test: FAIL in $((SECONDS - started)) s (logs: $logs)"
fi
exit "$rc"
