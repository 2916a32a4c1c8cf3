# config_refused: the server refuses to start, with a message naming both paths,
# where a directory its session workers may write (--weight-store, --shader-cache,
# GGML_REMOTE_RECORD_DIR) overlaps another such directory (nested either way, or
# through a link) or what workers load (the server's own directory), or holds what
# others trust (the key file, a listening socket).
# Nothing is made or served first: the socket and the store's directory are not
# there afterwards. Directories apart from each other start as ever.
source "$(dirname "$0")/lib.sh"

mkdir -p "$WORK/store" "$WORK/cache"
ln -s "$WORK/store" "$WORK/innocent"
psktool -u guest -p "$WORK/store/keys.psk" >/dev/null

failures=()
# refused NAME EXPECTED [ENV=VALUE...] -- SERVER ARGS...: the server must exit 2 at
# once, saying EXPECTED (a grep -E pattern), without listening on its socket.
refused() {
    local name=$1 expected=$2 sock=$WORK/$1.sock rc=0
    shift 2
    local environment=()
    while [ "$1" != -- ]; do environment+=("$1"); shift; done
    shift
    env "${environment[@]}" timeout 10 "$SERVER_BIN" --listen "unix:$sock" "$@" >"$WORK/$name.log" 2>&1 || rc=$?
    note "$name: exit $rc: $(grep -m1 'refusing' "$WORK/$name.log" || tail -n1 "$WORK/$name.log")"
    [ "$rc" = 2 ] || failures+=("$name: the server exited with $rc, not 2 (124: it started and served)")
    grep -qE -- "$expected" "$WORK/$name.log" || failures+=("$name: no /$expected/ in: $(cat "$WORK/$name.log")")
    [ ! -e "$sock" ] || failures+=("$name: the server made its socket before refusing")
}

refused cache-in-store "refusing to start: --shader-cache $WORK/store/shaders lies inside --weight-store $WORK/store" \
    -- --weight-store "$WORK/store" --shader-cache "$WORK/store/shaders"
refused store-in-cache "--weight-store $WORK/cache/new-store contains --shader-cache $WORK/cache|--shader-cache $WORK/cache contains --weight-store|--weight-store $WORK/cache/new-store lies inside --shader-cache $WORK/cache" \
    -- --shader-cache "$WORK/cache" --weight-store "$WORK/cache/new-store"
[ ! -e "$WORK/cache/new-store" ] || failures+=("store-in-cache: the store's directory was made before the refusal")
refused same-directory "is the same directory as" -- --weight-store "$WORK/cache" --shader-cache "$WORK/cache"
refused through-a-link "--shader-cache $WORK/innocent/shaders \\($WORK/store/shaders\\) lies inside --weight-store" \
    -- --weight-store "$WORK/store" --shader-cache "$WORK/innocent/shaders"
refused record-in-store "GGML_REMOTE_RECORD_DIR $WORK/store/frames lies inside --weight-store" \
    "GGML_REMOTE_RECORD_DIR=$WORK/store/frames" -- --weight-store "$WORK/store"
refused key-in-store "--tls-psk $WORK/store/keys.psk lies inside --weight-store $WORK/store" \
    -- --weight-store "$WORK/store" --tls-psk "$WORK/store/keys.psk" --listen tcp://127.0.0.1:0
refused socket-in-cache "the socket of --listen $WORK/cache/guests.sock lies inside --shader-cache $WORK/cache" \
    -- --shader-cache "$WORK/cache" --listen "unix:$WORK/cache/guests.sock"
# (the server's own directory: on a server without the check this one does no harm)
refused store-is-server-directory "--weight-store $BUILD/bin is the same directory as the path workers load from $BUILD/bin" \
    -- --weight-store "$BUILD/bin"

# Apart from each other: served as ever.
start_server apart --weight-store "$WORK/store" --shader-cache "$WORK/cache"
grep -q 'refusing' "$apart_LOG" && failures+=("separate directories were refused: $(cat "$apart_LOG")")

[ "${#failures[@]}" = 0 ] || { printf 'FAIL: %s\n' "${failures[@]}" >&2; exit 1; }
echo PASS
