# llama_plugin_without_servers: loading the plugin with no server configured
# (GGML_REMOTE_SERVERS unset, or empty) does not get in the way: one warning line
# that says how to configure it, no remote device, and the very same tokens as
# without the plugin, with or without -ngl.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/llama_helpers.sh"

N=32
for spec in "tiny f16" "small f16"; do
    read -r preset type <<<"$spec"
    path=$(model "$preset" "$type")
    name=$preset-$type
    run_local "$name-local" "$path" "$N"

    # Unset: run_guest would set it, so spell the run out.
    rc=0
    env -u GGML_REMOTE_SERVERS GGML_BACKEND_PATH="$PLUGIN" timeout "$GUEST_TIMEOUT" \
        llama-simple -m "$path" -n "$N" -ngl 99 "$PROMPT" >"$WORK/$name-unset.out" 2>"$WORK/$name-unset.err" || rc=$?
    [ "$rc" = 0 ] || { tail -n 20 "$WORK/$name-unset.err" >&2; fail "$name-unset: llama-simple exited with $rc"; }
    grep -q 'loaded REMOTE backend' "$WORK/$name-unset.err" || fail "$name-unset: the plugin was not loaded at all"
    assert_one_plugin_line "$name-unset" "^ggml-remote: GGML_REMOTE_SERVERS is not set" "GGML_REMOTE_SERVERS=shm:/run/ggml-remote/ggml-remote.sock" "tcp://"
    assert_not_offloaded "$name-unset"
    assert_same_tokens "$name-local" "$name-unset"

    # Empty counts as unset; and without -ngl nothing changes either.
    run_guest_ok "$name-empty" "" "$path" "$N" -ngl 0
    assert_one_plugin_line "$name-empty" "^ggml-remote: GGML_REMOTE_SERVERS is not set"
    assert_not_offloaded "$name-empty"
    assert_same_tokens "$name-local" "$name-empty"
done
echo PASS
