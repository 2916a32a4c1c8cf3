# test-backend-ops runs every op of llama.cpp's graphs for synthetic llama models, and a
# selection of ops from llama.cpp's other paths, on REMOTE0 and compares each result
# with the local CPU.
# usage: backend_ops.sh unix|tcp [vulkan]
#
# With `vulkan`, the server serves only the host's Vulkan0 (lavapipe here: the server
# runs with GGML_VK_VISIBLE_DEVICES=0), and a smaller subset runs: the ops of llama's
# graph for the tiny model (flash attention on and off) and whisper's own (1-D IM2COL,
# GELU, NORM), a few shapes each, since every run there pays Vulkan's start and
# pipeline compiles. The test is skipped (exit 77) only where no Vulkan device shows up.
#
# test-backend-ops prints OK even when REMOTE0 is not registered, so every run must
# also prove that REMOTE0 ran (backend_ops_lib.sh): it was tested, through this test's
# own server and over the chosen transport (and, with vulkan, it is the host's Vulkan0
# by its description), passed every one of N > 0 cases, and its server session ran
# graph computes.
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck source=backend_ops_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/backend_ops_lib.sh"
# shellcheck source=vulkan_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/vulkan_lib.sh"

TRANSPORT=${1:?usage: backend_ops.sh unix|tcp [vulkan]}
HOST_DEVICE=${2:-cpu}
EXPORT_GRAPH_OPS=/usr/libexec/x86_64-linux-gnu/llama.cpp-tests/test-export-graph-ops
LOAD_ALL_BACKENDS=$BUILD/lib/libggml_remote_load_all_backends.so
ZERO_BUFFERS=$BUILD/lib/libggml_remote_backend_ops_zero_buffers.so
for file in "$EXPORT_GRAPH_OPS" "$TEST_BACKEND_OPS" "$LOAD_ALL_BACKENDS" "$ZERO_BUFFERS"; do
    [ -e "$file" ] || fail "$file is missing (build the project; install llama.cpp-tests and libggml0)"
done

# Graph variants "MODEL TYPE [FLAGS]": weight types, grouped-query attention, flash
# attention on and off, quantized KV caches (these add SOFT_MAX/CONT, quantizing
# SET_ROWS and the Hadamard-rotated K of llama.cpp).
GRAPH_VARIANTS=(
    "tiny f16"
    "tiny q8_0"
    "tiny f32"
    "small f16"
    "small q8_0"
    "tiny-gqa f16"
    "tiny-gqa f16 -fa off"
    "tiny f16 -fa off"
    "tiny q8_0 -fa off"
    "small f16 -fa on -ctk q8_0 -ctv q8_0"
    "small f16 -fa off -ctk q8_0"
    "small f16 -fa on -ctk q4_0 -ctv q4_0"
)

# Ops that llama.cpp uses on other paths (other models, samplers, MoE, KV types), each
# run as "LABEL|OPS|PARAMS REGEX", filtered to keep the whole test within minutes.
EXTRA_RUNS=(
    'get-rows|GET_ROWS|^type=(f32|f16|q8_0|q4_0|q4_K),n=256,m=5,r=4,be1=(1|7),'
    'set-rows|SET_ROWS|type_dst=(f32|f16|bf16|q8_0|q4_0),type_idx=i64'
    'cpy|CPY|type_src=(f32|f16),type_dst=(f32|f16|q8_0|q4_0)'
    'cont|CONT|ne=\[(2|10|1000),'
    'soft-max|SOFT_MAX|ne=\[(16|32|64),'
    'norms|RMS_NORM,NORM,L2_NORM|'
    'rope|ROPE|ne_a=\[128,32,2,1\]'
    'mul-mat|MUL_MAT|type_a=(f32|f16|bf16|q4_0|q4_1|q5_0|q5_1|q8_0|q2_K|q3_K|q4_K|q5_K|q6_K|iq4_nl|iq4_xs|mxfp4),type_b=f32,m=16,n=(1|16),k=256,bs=\[1,1\],nr=\[1,1\]'
    'mul-mat-batched|MUL_MAT|type_a=(f16|q8_0),type_b=f32,m=16,n=1,k=256,'
    'mul-mat-large|MUL_MAT|type_a=(f16|q4_0|q8_0|q4_K),type_b=f32,m=(32|129|4096),'
    'mul-mat-id|MUL_MAT_ID|type_a=(f32|f16|q8_0|q4_0|q4_K|q6_K|mxfp4),type_b=f32,n_mats=4,n_used=2,b=0,m=512,n=(1|32)'
    'flash-attn|FLASH_ATTN_EXT|^hsk=(64|128),hsv=(64|128),nh=4,nr23=\[1,1\],kv=512,nb=(1|8),mask=1,sinks=0,max_bias=0.000000,logit_softcap=0.000000,prec=f32,type_K=(f16|bf16|q8_0|q4_0)'
    'sampling|ARGSORT,TOP_K,ARGMAX|ne=\[[0-9]{1,4},1,1,1\]'
    'glu|SWIGLU,GEGLU,GEGLU_ERF,GEGLU_QUICK,REGLU,SWIGLU_OAI|'
    'unary|ABS,SGN,NEG,STEP,TANH,ELU,RELU,SIGMOID,HARDSIGMOID,HARDSWISH,EXP,SILU,GELU,GELU_QUICK,GELU_ERF,SQR,SQRT,LOG,SIN,COS,CLAMP,MEAN,SOFTPLUS,SCALE,SUM_ROWS,DUP|'
    'binary|ADD,MUL|^type=f32,ne=\[(1|10|16|128),'
    'add-id|ADD_ID|'
    'concat|CONCAT|type=(f32|f16|q8_0),ne_a=\[(11|128),'
    'recurrent|SSM_CONV,SSM_SCAN,RWKV_WKV6,RWKV_WKV7,GATED_LINEAR_ATTN|'
)

# On Vulkan: llama's graph with flash attention and without, and whisper's ops beyond
# llama's (its convolutions are 1-D IM2COL then MUL_MAT; GELU, NORM) in one run.
VULKAN_GRAPH_VARIANTS=(
    "tiny f16"
    "tiny f16 -fa off"
)
VULKAN_EXTRA_RUNS=(
    'whisper|IM2COL,GELU,NORM|(is_2D=0|^type=f32,ne_a=|^type=f32,ne=\[64,)'
)

# graph_model NAME TYPE: prints the path of a synthetic model; tiny-gqa is tiny with
# 4 query heads sharing 2 key/value heads.
graph_model() {
    local name=$1 type=$2
    if [ "$name" = tiny-gqa ]; then
        local path=$WORK/tiny-gqa-$type.gguf
        [ -s "$path" ] || "$MODEL_TOOL" --preset tiny --n-head-kv 2 --type "$type" -o "$path" >/dev/null
        echo "$path"
    else
        model "$name" "$type"
    fi
}

export_llama_graph_ops() {
    local out=$1 variant preset type extra model_path
    : >"$out.all"
    for variant in "${GRAPH_VARIANTS[@]}"; do
        read -r preset type extra <<<"$variant"
        model_path=$(graph_model "$preset" "$type")
        rm -f "$WORK/variant.txt"
        # shellcheck disable=SC2086 # $extra holds the variant's flags
        LD_PRELOAD=$LOAD_ALL_BACKENDS "$EXPORT_GRAPH_OPS" -m "$model_path" $extra -o "$WORK/variant.txt" \
            >"$WORK/export.log" 2>&1 || { cat "$WORK/export.log" >&2; fail "test-export-graph-ops failed for: $variant"; }
        [ -s "$WORK/variant.txt" ] || fail "test-export-graph-ops wrote no ops for: $variant"
        cat "$WORK/variant.txt" >>"$out.all"
    done
    sort -u "$out.all" >"$out"
}

DESCRIPTION=""  # on vulkan, the host device description REMOTE0 must have
case $HOST_DEVICE in
    cpu) start_server ops ;;
    vulkan)
        require_vulkan0
        DESCRIPTION=$VULKAN0_DESCRIPTION
        GRAPH_VARIANTS=("${VULKAN_GRAPH_VARIANTS[@]}")
        EXTRA_RUNS=("${VULKAN_EXTRA_RUNS[@]}")
        start_vulkan_server ops -d Vulkan0 ;;
    *) fail "unknown host device '$HOST_DEVICE' (vulkan, or none for the CPU)" ;;
esac
# shellcheck disable=SC2154 # start_server sets ops_UNIX, ops_TCP, ops_LOG
case $TRANSPORT in
    unix) ENDPOINT=$ops_UNIX ;;
    tcp) ENDPOINT=$ops_TCP ;;
    *) fail "unknown transport '$TRANSPORT' (unix or tcp)" ;;
esac
RUNS=0
TOTAL_CASES=0

# backend_ops LABEL ARGS...: runs test-backend-ops test on REMOTE0 through ENDPOINT and
# checks that REMOTE0 itself ran every case and passed (backend_ops_lib.sh).
backend_ops() {
    local label=$1; shift
    local log=$WORK/$label.log status=0 started=$SECONDS ends_before
    # shellcheck disable=SC2154
    ends_before=$(session_ends "$ops_LOG")
    # (the guest sees no local Vulkan device: test-backend-ops compares with the CPU)
    remote "$ENDPOINT" env -u GGML_VK_VISIBLE_DEVICES LD_PRELOAD="$ZERO_BUFFERS" \
        "$TEST_BACKEND_OPS" test -b REMOTE0 "$@" >"$log" 2>&1 || status=$?
    strip_colors "$log"
    RUNS=$((RUNS + 1))
    verify_remote0_run "$log" "$status" "$ENDPOINT" "$ops_LOG" "$ends_before" "$DESCRIPTION"
    if [ ${#RUN_PROBLEMS[@]} -gt 0 ]; then
        echo "---- test-backend-ops test -b REMOTE0 $* (last lines)" >&2
        tail -n 25 "$log" >&2
        [ -z "$RUN_FAILED_CASES" ] || { echo "---- failing cases" >&2; head -n 40 <<<"$RUN_FAILED_CASES" >&2; }
        echo "---- server log" >&2
        cat "$ops_LOG" >&2
        fail "$label: $(printf '%s; ' "${RUN_PROBLEMS[@]}")"
    fi
    TOTAL_CASES=$((TOTAL_CASES + RUN_TOTAL))
    note "$label: $RUN_PASSED/$RUN_TOTAL passed on REMOTE0, $RUN_UNSUPPORTED not supported, $RUN_COMPUTES graph computes, $((SECONDS - started)) s"
    note "  $(sed -n 's/^  \([A-Z][A-Z0-9_]*\)(.*: OK$/\1/p' "$log" | sort | uniq -c | awk '{printf "%s%s:%s", sep, $2, $1; sep=" "}')"
}

export_llama_graph_ops "$WORK/llama-ops.txt"
note "llama graph ops: $(wc -l <"$WORK/llama-ops.txt") unique ops from ${#GRAPH_VARIANTS[@]} graph variants"
# MUL_MAT with op_params[1] = GGML_HINT_SRC0_IS_HADAMARD (the rotation of a quantized
# K cache) lets a backend skip src0 and apply a fast Walsh-Hadamard transform; the
# test file does not keep src0 a Hadamard matrix, and test-backend-ops' CPU reference
# (use_ref) ignores the hint, so these cases cannot match on any backend that uses it.
backend_ops llama-graphs --test-file "$WORK/llama-ops.txt" -p '^(?!.*op_params=\[1:1\])'

for run in "${EXTRA_RUNS[@]}"; do
    IFS='|' read -r label ops params <<<"$run"
    if [ -n "$params" ]; then
        backend_ops "$label" -o "$ops" -p "$params"
    else
        backend_ops "$label" -o "$ops"
    fi
done
note "$TOTAL_CASES cases passed on REMOTE0${DESCRIPTION:+ (host device: $DESCRIPTION)} over $TRANSPORT in $RUNS runs"
