// The recurrent state ops: Mamba's SSM_CONV and SSM_SCAN, RWKV's WKV6 and WKV7,
// gated linear attention and the gated delta net, all checked by replaying ggml's
// constructor, plus what ggml-cpu needs beyond it.
#include <ggml-backend.h>

#include "host/worker/graph/ops/checks.h"
#include "host/worker/graph/ops/families.h"

namespace ggml_remote::host::ops {
namespace {

ggml_tensor *make_ssm_conv(ggml_context *ctx, const ggml_tensor *node) {
    return ggml_ssm_conv(ctx, src(node, 0), src(node, 1));
}

ggml_tensor *make_ssm_scan(ggml_context *ctx, const ggml_tensor *node) {
    return ggml_ssm_scan(ctx, src(node, 0), src(node, 1), src(node, 2), src(node, 3), src(node, 4), src(node, 5),
                         src(node, 6), param(node, 0));
}

Why first_param_positive(const ggml_tensor *node) { return params_in_range(node, {0}, {}); }

// SSM_SCAN's sequence ids (src[6]) are unchecked by ggml-cpu, which reads one per
// sequence however few the guest gave. Only ids in CPU memory can be checked; a
// GPU backend's own kernels are their own, but those ids are refused there too.
Status refuse_sequence_ids(const ggml_tensor *node, const ggml_tensor *ids) {
    if (ids->buffer == nullptr || !ggml_backend_buffer_is_host(ids->buffer)) {
        return error(Code::bad_request, node_label(node) + "its sequence ids must be in CPU memory");
    }
    if (ggml_nelements(ids) < node->src[1]->ne[3]) {
        return error(Code::bad_request, node_label(node) + "fewer sequence ids than sequences");
    }
    return Status::success();
}

ggml_tensor *make_rwkv_wkv6(ggml_context *ctx, const ggml_tensor *node) {
    return ggml_rwkv_wkv6(ctx, src(node, 0), src(node, 1), src(node, 2), src(node, 3), src(node, 4), src(node, 5));
}

ggml_tensor *make_rwkv_wkv7(ggml_context *ctx, const ggml_tensor *node) {
    return ggml_rwkv_wkv7(ctx, src(node, 0), src(node, 1), src(node, 2), src(node, 3), src(node, 4), src(node, 5),
                          src(node, 6));
}

ggml_tensor *make_gated_linear_attn(ggml_context *ctx, const ggml_tensor *node) {
    return ggml_gated_linear_attn(ctx, src(node, 0), src(node, 1), src(node, 2), src(node, 3), src(node, 4),
                                  float_param(node, 0));
}

// RWKV_WKV6, RWKV_WKV7, GATED_LINEAR_ATTN: ggml-cpu's vector loops step through a
// head in whole groups of SIMD registers (64 floats on AVX-512), so a head of 4 or
// 16 floats, which the constructor accepts, makes RWKV_WKV7 write past the result
// (found by the write-set oracle). Models use heads of 64.
Why check_recurrent_heads(const ggml_tensor *node) {
    const int64_t head_size = node->op == GGML_OP_RWKV_WKV7 ? node->src[2]->ne[0] : node->src[0]->ne[0];
    if (head_size % 64 != 0) return "head size " + std::to_string(head_size) + " is not a multiple of 64";
    return {};
}

ggml_tensor *make_gated_delta_net(ggml_context *ctx, const ggml_tensor *node) {
    return ggml_gated_delta_net(ctx, src(node, 0), src(node, 1), src(node, 2), src(node, 3), src(node, 4), src(node, 5),
                                param(node, 0));
}

// GATED_DELTA_NET: ggml-cpu divides v's sequences and heads among q's and k's.
Why check_gated_delta_net(const ggml_tensor *node) {
    const ggml_tensor *q = node->src[0], *k = node->src[1], *v = node->src[2];
    if (!ggml_are_same_shape(q, k) || q->ne[2] != v->ne[2] || !divides(q->ne[1], v->ne[1]) ||
        !divides(q->ne[3], v->ne[3])) {
        return described("q", q) + " and " + described("k", k) + " do not broadcast over " + described("v", v);
    }
    return {};
}

constexpr OpEntry kEntries[] = {
    replayed(GGML_OP_SSM_CONV, 2, "rc", make_ssm_conv),
    // Sequence ids into src[0]'s states.
    replayed(GGML_OP_SSM_SCAN, 7, "rc", make_ssm_scan)
        .with_geometry(first_param_positive)
        .following_indexes(6, src_ne(0, 3), refuse_sequence_ids),
    replayed(GGML_OP_RWKV_WKV6, 6, "rc", make_rwkv_wkv6).then(check_recurrent_heads),
    replayed(GGML_OP_RWKV_WKV7, 7, "rc", make_rwkv_wkv7).then(check_recurrent_heads),
    replayed(GGML_OP_GATED_LINEAR_ATTN, 5, "rc", make_gated_linear_attn).then(check_recurrent_heads),
    // q, k and v are read row by row, the rest as blocks.
    replayed(GGML_OP_GATED_DELTA_NET, 6, "rrrrc", make_gated_delta_net)
        .with_geometry(first_param_positive)
        .then(check_gated_delta_net),
};

}  // namespace

const OpFamily kRecurrentOps{kEntries};

}  // namespace ggml_remote::host::ops
