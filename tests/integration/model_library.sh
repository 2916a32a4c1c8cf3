# model_library (issue 27): a server with --models DIR and no --weight-store. A
# tcp guest that never loaded the model (no digests kept) sends none of its
# weights: the server finds each one in DIR, and the guest generates the tokens
# of a local run. A guest of another tenant (a unix socket's user) gets the same.
# A model that differs from DIR's in one byte sends the bytes of the tensor that
# holds it, finds the others, and generates that model's own tokens.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/llama_helpers.sh"

path=$(model small f16)
mkdir "$WORK/models"
cp "$path" "$WORK/models/small.gguf"
start_server srv --models "$WORK/models"
indexed=$(wait_for_line "$srv_LOG" 'models: .* indexed in' 60) || fail "the server did not index --models"
note "${indexed#*ggml-remote-server: }"
export GGML_REMOTE_CACHE_DIR=$WORK/cache
N=16
failures=()
model_bytes=$(stat -c %s "$path")

# store_line SESSION: what the session's closing line says of the store (and library).
store_line() { session_end "$srv_LOG" "$1" | sed -n 's/.*weight store: \(.*\)/\1/p'; }
bytes_in() { session_end "$srv_LOG" "$1" | sed -n 's/.* graph computes, \(.*\) in, .*/\1/p'; }
# to_bytes "12.5 MiB": the bytes a figure of the closing line says.
to_bytes() { awk '{ m = $2 == "GiB" ? 2^30 : $2 == "MiB" ? 2^20 : $2 == "KiB" ? 1024 : 1; printf "%d\n", $1 * m }' <<<"$1"; }

# tensor_offset FILE NAME: where tensor NAME's bytes start in GGUF file FILE.
tensor_offset() {
    python3 - "$1" "$2" <<'PY'
import struct, sys
f = open(sys.argv[1], "rb")
def number(fmt):
    return struct.unpack("<" + fmt, f.read(struct.calcsize("<" + fmt)))[0]
def text():
    return f.read(number("Q")).decode()
SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
def value(kind):
    if kind == 8:
        return text()
    if kind == 9:
        element, count = number("I"), number("Q")
        return [value(element) for _ in range(count)]
    return number(SCALARS[kind])
assert f.read(4) == b"GGUF"
version, tensor_count, key_count = number("I"), number("Q"), number("Q")
alignment = 32
for _ in range(key_count):
    key = text()
    kind = number("I")
    found = value(kind)
    if key == "general.alignment":
        alignment = found
offsets = {}
for _ in range(tensor_count):
    name = text()
    for _ in range(number("I")):
        number("Q")
    number("I")
    offsets[name] = number("Q")
data = (f.tell() + alignment - 1) // alignment * alignment
print(data + offsets[sys.argv[2]])
PY
}

run_local local "$path" "$N"
found=0
for run in tcp unix; do
    session=$(($(sessions_connected "$srv_LOG") + 1))
    endpoint=$srv_TCP
    [ "$run" = unix ] && endpoint=$srv_UNIX
    run_guest_ok "$run" "$endpoint" "$path" "$N"
    assert_same_tokens local "$run"
    line=$(store_line "$session") in=$(bytes_in "$session")
    note "$run guest: $in in, weight store: $line"
    if [[ $line =~ ^([0-9]+)\ found\ \(.*\),\ 0\ not\ found$ ]] && [ "${BASH_REMATCH[1]}" -gt 0 ]; then
        found=${BASH_REMATCH[1]}
    else
        failures+=("the $run guest should find all its weights in --models: '$line'")
    fi
    [ "$(to_bytes "$in")" -lt $((model_bytes / 100)) ] ||
        failures+=("the $run guest sent $in, 1% or more of the model's $model_bytes bytes")
done

# One byte of blk.0.ffn_gate.weight changed (the lowest bit of an F16's mantissa).
changed=$WORK/changed.gguf
cp "$path" "$changed"
at=$(($(tensor_offset "$changed" blk.0.ffn_gate.weight) + 4096))
python3 -c 'import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(int(sys.argv[2])); byte = f.read(1)[0]; f.seek(int(sys.argv[2])); f.write(bytes([byte ^ 1]))' "$changed" "$at"
cmp -s "$path" "$changed" && fail "the copy did not change"
run_local local_changed "$changed" "$N"
session=$(($(sessions_connected "$srv_LOG") + 1))
run_guest_ok changed "$srv_TCP" "$changed" "$N"
assert_same_tokens local_changed changed
line=$(store_line "$session")
note "the changed model's guest: $(bytes_in "$session") in, weight store: $line"
[[ $line =~ ^$((found - 1))\ found\ .*,\ 1\ not\ found$ ]] ||
    failures+=("the changed model's guest should send one tensor and find $((found - 1)): '$line'")
finish "$srv_LOG"
