#!/usr/bin/env bash
# Full ggml conformance run through the remote device: starts a ggml-remote-server on a
# unix socket, runs every test-backend-ops case (mode test) on REMOTE0 against the local
# CPU, and prints a summary. Takes about half an hour on two cores.
#
# usage: scripts/conformance.sh BUILD_DIR [TEST-BACKEND-OPS OPTIONS...]
#   e.g. scripts/conformance.sh build                  the whole suite, -j 2
#        scripts/conformance.sh build -o ADD,ROPE      only some ops (a quick check)
# Exits non-zero if any case failed, or if REMOTE0 did not really run (test-backend-ops
# alone prints OK when the device it was asked for does not exist).
# CONFORMANCE_TRANSPORT=shm|tcp runs through that transport instead of unix.
# CONFORMANCE_DEVICE=NAME has the server serve only its host device NAME (say Vulkan0)
# instead of all of them, and checks that REMOTE0 is that device. Mesa's lavapipe is a
# CPU-type Vulkan device that ggml shows only with GGML_VK_VISIBLE_DEVICES set, e.g.
#   GGML_VK_VISIBLE_DEVICES=0 CONFORMANCE_DEVICE=Vulkan0 make conformance
# Logs stay in BUILD_DIR/conformance/.
#
# test-backend-ops runs with tests/integration/backend_ops_zero_buffers.cpp preloaded
# (built into BUILD_DIR/lib): its buffers start zeroed, so that cases which read memory
# they never initialized (all of --test-file mode, see that file) compare zeros rather
# than a previous case's leftovers. CONFORMANCE_ZERO_BUFFERS=0 runs without it.
set -euo pipefail
[ $# -ge 1 ] || { sed -n '6,8p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
BUILD_DIR=$(cd "$1" && pwd)
shift
JOBS=${CONFORMANCE_JOBS:-2}

export GGML_REMOTE_BUILD=$BUILD_DIR
# shellcheck source=../tests/integration/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../tests/integration/lib.sh"
# shellcheck source=../tests/integration/backend_ops_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../tests/integration/backend_ops_lib.sh"

OUT=$BUILD_DIR/conformance
mkdir -p "$OUT"
LOG=$OUT/test-backend-ops.log
SERVER_LOG_COPY=$OUT/server.log
[ -x "$TEST_BACKEND_OPS" ] || fail "$TEST_BACKEND_OPS is missing (install libggml0's test tools)"
if [ ! -e "$PLUGIN" ] || [ ! -x "$SERVER_BIN" ]; then
    fail "build the project first ($PLUGIN, $SERVER_BIN)"
fi

DEVICE=${CONFORMANCE_DEVICE:-}
DESCRIPTION=""  # with DEVICE: what REMOTE0 must say it is
if [ -n "$DEVICE" ]; then
    DESCRIPTION=$(host_device_description "$DEVICE")
    [ -n "$DESCRIPTION" ] || fail "CONFORMANCE_DEVICE: the server has no host device '$DEVICE'" \
        "(see $SERVER_BIN --list-devices; lavapipe needs GGML_VK_VISIBLE_DEVICES=0)"
    start_server conformance -d "$DEVICE"
else
    start_server conformance
fi
# shellcheck disable=SC2154 # start_server sets conformance_UNIX and conformance_LOG
ENDPOINT=$conformance_UNIX SERVER_LOG=$conformance_LOG
case ${CONFORMANCE_TRANSPORT:-unix} in
    unix) ;;
    shm) ENDPOINT=shm:${conformance_UNIX#unix:} ;;  # shared buffers, commands through the shared ring
    tcp) ENDPOINT=$conformance_TCP ;;
    *) fail "CONFORMANCE_TRANSPORT: unix, shm or tcp" ;;
esac
# The guest sees no local Vulkan device: test-backend-ops compares REMOTE0 with the CPU.
command=(env -u GGML_VK_VISIBLE_DEVICES "$TEST_BACKEND_OPS" test -b REMOTE0 -j "$JOBS" "$@")
ZERO_BUFFERS=$BUILD_DIR/lib/libggml_remote_backend_ops_zero_buffers.so
if [ "${CONFORMANCE_ZERO_BUFFERS:-1}" != 0 ]; then
    [ -e "$ZERO_BUFFERS" ] || fail "$ZERO_BUFFERS is missing (build the project, or set CONFORMANCE_ZERO_BUFFERS=0)"
    command=(env LD_PRELOAD="$ZERO_BUFFERS" "${command[@]}")
fi
echo "conformance: test-backend-ops test -b REMOTE0 -j $JOBS $*"
echo "  through $ENDPOINT${DEVICE:+, host device $DEVICE: $DESCRIPTION} (server log: $SERVER_LOG_COPY, test log: $LOG)"

started=$(date +%s)
# The full log goes to LOG; the terminal sees the backends, failures and the totals.
set +e
remote "$ENDPOINT" "${command[@]}" 2>&1 | sed -u 's/\x1b\[[0-9;]*m//g' | tee "$LOG" |
    grep --line-buffered -E "^Backend [0-9]+/|tests passed|Backend REMOTE0:|FAIL"
rc=${PIPESTATUS[0]}
set -e
duration=$(($(date +%s) - started))

verify_remote0_run "$LOG" "$rc" "$ENDPOINT" "$SERVER_LOG" 0 "$DESCRIPTION"
cp "$SERVER_LOG" "$SERVER_LOG_COPY"

echo
echo "== conformance summary (REMOTE0 through $ENDPOINT${DEVICE:+, host device $DEVICE})"
echo "passed:        $RUN_PASSED/$RUN_TOTAL"
echo "failed:        $((RUN_TOTAL - RUN_PASSED))"
if [ -n "$RUN_FAILING_TESTS" ]; then
    while IFS= read -r line; do echo "    ${line#"${line%%[! ]*}"}"; done <<<"$RUN_FAILING_TESTS"
fi
echo "not supported: $RUN_UNSUPPORTED (cases REMOTE0 declined; not in the total)"
while IFS= read -r line; do
    [ -z "$line" ] || echo "server:        ${line#*: }"
done <<<"$RUN_SESSIONS"
printf 'duration:      %dm %02ds\n' $((duration / 60)) $((duration % 60))
echo "logs:          $LOG, $SERVER_LOG_COPY"
if [ ${#RUN_PROBLEMS[@]} -gt 0 ]; then
    printf 'FAILED: %s\n' "${RUN_PROBLEMS[@]}"
    exit 1
fi
echo "PASSED"
