// Attention: SOFT_MAX and its gradient, the causal masks, FLASH_ATTN_EXT, and the
// replayed LIGHTNING_INDEXER.
#include "host/worker/graph/ops/checks.h"
#include "host/worker/graph/ops/families.h"

namespace ggml_remote::host::ops {
namespace {

// SOFT_MAX and FLASH_ATTN_EXT: ALiBi (op_params[1], max_bias > 0) needs the mask,
// the source before the sinks; the sinks are one F32 value per head of `heads`.
Why bias_and_sinks(const ggml_tensor *node, int sinks_index, const char *what, const ggml_tensor *heads) {
    const float max_bias = float_param(node, 1);
    if (max_bias > 0.0f && node->src[sinks_index - 1] == nullptr) return "ALiBi (max_bias > 0) needs a mask";
    const ggml_tensor *sinks = node->src[sinks_index];
    if (sinks == nullptr) return {};
    Why why = source_type(node, sinks_index, GGML_TYPE_F32);
    if (!why.empty()) return why;
    if (sinks->ne[0] != heads->ne[2]) return "sinks " + shape_of(sinks) + " do not fit " + described(what, heads);
    return {};
}

Why check_soft_max(const ggml_tensor *node) {
    const ggml_tensor *a = node->src[0], *mask = node->src[1];
    if (!ggml_is_contiguous(a)) return "src[0] is not contiguous";
    if (mask != nullptr) {
        Why why = source_type(node, 1, GGML_TYPE_F16, GGML_TYPE_F32);
        if (!why.empty()) return why;
        if (!ggml_is_contiguous(mask)) return "the mask is not contiguous";
        if (mask->ne[0] != a->ne[0] || mask->ne[1] < a->ne[1] || !divides(mask->ne[2], a->ne[2]) ||
            !divides(mask->ne[3], a->ne[3])) {
            return "mask " + shape_of(mask) + " does not fit " + described("src[0]", a);
        }
    }
    return first({bias_and_sinks(node, 2, "src[0]", a), same_shape_as_source(node)});
}

Why check_soft_max_back(const ggml_tensor *node) {
    // op_params = {scale, max_bias}; ggml-cpu asserts max_bias == 0
    if (float_param(node, 1) != 0.0f) return "max_bias must be 0";
    if (!ggml_is_contiguous(node->src[1])) return "src[1] is not contiguous";
    return first({both_contiguous(node), check_same_shape_pair(node)});
}

Why check_diag_mask(const ggml_tensor *node) {  // op_params = {n_past}, which ggml-cpu asserts >= 0
    if (node->op_params[0] < 0) return "n_past " + std::to_string(node->op_params[0]) + " is negative";
    return first({both_contiguous(node), same_shape_as_source(node)});
}

// q [d_k, n_q, n_head, n_seq], k [d_k, n_kv, n_head_kv, n_seq], v [d_v, n_kv, n_head_kv, n_seq].
Why check_qkv_shapes(const ggml_tensor *node) {
    const ggml_tensor *q = node->src[0], *k = node->src[1], *v = node->src[2];
    if (k->ne[0] != q->ne[0]) return described("k", k) + " and " + described("q", q) + " differ in head size";
    if (!divides(k->ne[2], q->ne[2]) || !divides(v->ne[2], q->ne[2])) {
        return "the heads of " + described("q", q) + " cannot be shared among those of k and v";
    }
    if (q->ne[3] != k->ne[3] || q->ne[3] != v->ne[3]) return "q, k and v differ in ne[3]";
    if (k->ne[1] != v->ne[1]) return described("k", k) + " and " + described("v", v) + " differ in length";
    return {};
}

// FLASH_ATTN_EXT: q, k, v as above, mask [>= n_kv, >= n_q, ...] -> [d_v, n_head, n_q, n_seq].
Why check_flash_attn_ext(const ggml_tensor *node) {
    const ggml_tensor *q = node->src[0], *k = node->src[1], *v = node->src[2], *mask = node->src[3];
    Why shapes = check_qkv_shapes(node);
    if (!shapes.empty()) return shapes;
    if (mask != nullptr) {
        Why why = source_type(node, 3, GGML_TYPE_F16);
        if (!why.empty()) return why;
        if (!ggml_is_contiguous(mask)) return "the mask is not contiguous";
        if (mask->ne[0] < k->ne[1] || mask->ne[1] < q->ne[1] || !divides(mask->ne[2], q->ne[2]) ||
            !divides(mask->ne[3], q->ne[3])) {
            return "mask " + shape_of(mask) + " does not fit " + described("q", q) + " and " + described("k", k);
        }
    }
    // ggml-cpu's kernel asserts dense rows and a result in order, and finds no dot
    // product or conversion for k and v of other than float or quantized types.
    for (int i = 0; i < 3; ++i) {
        if (!rows_are_dense(node->src[i])) return src_label(i) + " rows are not dense";
    }
    if (!result_in_order(node)) return "the result is transposed or permuted";
    for (const ggml_tensor *t : {k, v}) {
        if (!is_float(t->type) && !ggml_is_quantized(t->type)) {
            return std::string("k and v cannot be of type ") + ggml_type_name(t->type);
        }
    }
    // The accumulator precision (ggml_prec_set_acc): ggml-cpu computes the default and
    // F32 (what llama.cpp asks for) and aborts on any other value, BF16 and F16 included.
    const int32_t precision = node->op_params[3];
    if (precision != GGML_PREC_UNDEFINED && precision != GGML_PREC_F32) {
        return "accumulator precision " + std::to_string(precision) + " is not supported";
    }
    return first({bias_and_sinks(node, 4, "q", q), result_shape(node, v->ne[0], q->ne[2], q->ne[1], q->ne[3]),
                  result_type(node, GGML_TYPE_F32)});
}

// ggml-cpu copies each result row as nb[1] bytes, so the result must be exactly as
// dense as ggml makes it.
Why check_attention(const ggml_tensor *node) {
    if (!ggml_is_contiguous(node)) return "the result is not contiguous";
    return check_flash_attn_ext(node);
}

ggml_tensor *make_lightning_indexer(ggml_context *ctx, const ggml_tensor *node) {
    return ggml_lightning_indexer(ctx, src(node, 0), src(node, 1), src(node, 2), src(node, 3));
}

constexpr OpEntry kEntries[] = {
    // src[1] mask and src[2] sinks are optional.
    ruled(GGML_OP_SOFT_MAX, 1, "r", check_soft_max),
    ruled(GGML_OP_SOFT_MAX_BACK, 2, "r", check_soft_max_back),
    ruled(GGML_OP_DIAG_MASK_INF, 1, "r", check_diag_mask),
    ruled(GGML_OP_DIAG_MASK_ZERO, 1, "r", check_diag_mask),
    // src[3] mask and src[4] sinks are optional.
    ruled(GGML_OP_FLASH_ATTN_EXT, 3, "r", check_attention),
    replayed(GGML_OP_LIGHTNING_INDEXER, 4, "rc", make_lightning_indexer),
};

}  // namespace

const OpFamily kAttentionOps{kEntries};

}  // namespace ggml_remote::host::ops
