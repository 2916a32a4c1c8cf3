# tls_keys_per_server: one guest reaches two TLS servers that hold different keys,
# each named with its own key file (tls://host:port?psk-file=PATH[&psk-identity=NAME]);
# the global GGML_REMOTE_TLS_PSK_FILE serves the servers without one. A wrong key
# for one server costs that server only, in one line that names it; the other keeps
# its device name. A malformed option is refused before anything connects.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/llama_helpers.sh"

tiny=$(model tiny)
N=16
run_local local "$tiny" "$N"

psktool -u alpha -p "$WORK/alpha.psk" >/dev/null
psktool -u beta -p "$WORK/beta.psk" >/dev/null
psktool -u alpha -p "$WORK/alpha-wrong.psk" >/dev/null
cat "$WORK/alpha.psk" "$WORK/beta.psk" >"$WORK/both.psk"
chmod 600 "$WORK"/*.psk
start_server one --tls-psk "$WORK/alpha.psk"
start_server two --tls-psk "$WORK/beta.psk"
ONE=tls://${one_TCP#tcp://}
TWO=tls://${two_TCP#tcp://}

failures=()
# said NAME: what the plugin logged in run NAME (llama-cli puts a timestamp first).
said() { grep -o 'ggml-remote: .*' "$WORK/$1.err" | tr '\n' ' ' || true; }
# listed NAME SERVERS DEVICE@ENDPOINT...: llama-cli --list-devices through the
# plugin lists exactly these remote devices.
listed() {
    local name=$1 servers=$2 wanted rc=0
    shift 2
    GGML_REMOTE_CONNECT_TIMEOUT_MS=2000 GGML_REMOTE_RECONNECT=0 timeout 60 \
        env GGML_BACKEND_PATH="$PLUGIN" GGML_REMOTE_SERVERS="$servers" llama-cli --list-devices \
        >"$WORK/$name.out" 2>"$WORK/$name.err" || rc=$?
    [ "$rc" = 0 ] || { failures+=("$name: llama-cli --list-devices exited with $rc"); return; }
    cat "$WORK/$name.out" "$WORK/$name.err" | sed -n 's/^ *\(REMOTE[0-9.]*\): .* @ \([^ ]*\) .*$/\1@\2/p' \
        >"$WORK/$name.devices"
    note "$name: $(tr '\n' ' ' <"$WORK/$name.devices")$(said "$name")"
    [ "$(grep -c . "$WORK/$name.devices" || true)" = $# ] ||
        failures+=("$name: listed $(tr '\n' ' ' <"$WORK/$name.devices") instead of $*")
    for wanted in "$@"; do
        grep -qxF "$wanted" "$WORK/$name.devices" || failures+=("$name: $wanted was not listed")
    done
}

# Each server with its own key file; no global key at all.
PER_SERVER="$ONE?psk-file=$WORK/alpha.psk,$TWO?psk-file=$WORK/beta.psk"
listed own-keys "$PER_SERVER" "REMOTE0@$ONE" "REMOTE1@$TWO"
grep -q "TLS as 'alpha'" "$one_LOG" || failures+=("server one logged no session as 'alpha'")
grep -q "TLS as 'beta'" "$two_LOG" || failures+=("server two logged no session as 'beta'")

# One file of both keys, a line picked per server by psk-identity=.
listed by-identity "$ONE?psk-file=$WORK/both.psk&psk-identity=alpha,$TWO?psk-file=$WORK/both.psk&psk-identity=beta" \
    "REMOTE0@$ONE" "REMOTE1@$TWO"

# The global key serves a server without a key of its own.
GGML_REMOTE_TLS_PSK_FILE=$WORK/alpha.psk listed global-default "$ONE,$TWO?psk-file=$WORK/beta.psk" \
    "REMOTE0@$ONE" "REMOTE1@$TWO"

# A wrong key for server one: one line naming it and the reason; server two is still REMOTE1.
listed wrong-key "$ONE?psk-file=$WORK/alpha-wrong.psk,$TWO?psk-file=$WORK/beta.psk" "REMOTE1@$TWO"
grep -qF "ggml-remote: $ONE: TLS handshake failed: wrong pre-shared key for identity 'alpha'" "$WORK/wrong-key.err" ||
    failures+=("wrong-key: no clear error naming $ONE: $(said wrong-key)")
# A key file that is not there: named, before anything is sent.
listed missing-file "$ONE?psk-file=$WORK/nowhere.psk"
grep -qF "$ONE: psk-file: key file $WORK/nowhere.psk: No such file or directory" "$WORK/missing-file.err" ||
    failures+=("missing-file: no clear error: $(said missing-file)")
# An unknown option: the list is refused as a whole, naming the options there are.
listed unknown-option "$ONE?psk=$WORK/alpha.psk,$TWO?psk-file=$WORK/beta.psk"
grep -qE "GGML_REMOTE_SERVERS: invalid endpoint .*unknown option 'psk' \(psk-file=, psk-identity=\)" \
    "$WORK/unknown-option.err" || failures+=("unknown-option: no clear error: $(said unknown-option)")
listed tcp-option "${one_TCP}?psk-file=$WORK/alpha.psk"
grep -q "options after '?' go with tls:// only" "$WORK/tcp-option.err" ||
    failures+=("tcp-option: no clear error: $(said tcp-option)")

# Tokens through both servers at once, each with its own key: the CPU's tokens.
run_guest_ok split "$PER_SERVER" "$tiny" "$N"
assert_same_tokens local split
grep -q 'assigned to device REMOTE1' "$WORK/split.err" || failures+=("split: no layer went to REMOTE1")

finish "$two_LOG"
