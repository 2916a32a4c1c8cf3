// DeepSeek V4's hyper-connections: the mixing matrix (DSV4_HC_COMB), and the
// streams' mix before (DSV4_HC_PRE) and after (DSV4_HC_POST) each layer. All are
// checked by replaying ggml's constructor.
#include "host/worker/graph/ops/checks.h"
#include "host/worker/graph/ops/families.h"

namespace ggml_remote::host::ops {
namespace {

ggml_tensor *make_dsv4_hc_comb(ggml_context *ctx, const ggml_tensor *node) {
    return ggml_dsv4_hc_comb(ctx, src(node, 0), src(node, 1), src(node, 2), float_param(node, 0), param(node, 1));
}

// op_params[1] is an iteration count: a huge one would spin the worker.
Why dsv4_hc_comb_geometry(const ggml_tensor *node) { return params_in_range(node, {1}, {}); }

// The gated form makes the same op from a gate, with op_params = {scale, 1}.
ggml_tensor *make_dsv4_hc_pre(ggml_context *ctx, const ggml_tensor *node) {
    if (node->op_params[1] != 0) return ggml_dsv4_hc_pre_gated(ctx, src(node, 0), src(node, 1), float_param(node, 0));
    return ggml_dsv4_hc_pre(ctx, src(node, 0), src(node, 1));
}

ggml_tensor *make_dsv4_hc_post(ggml_context *ctx, const ggml_tensor *node) {
    return ggml_dsv4_hc_post(ctx, src(node, 0), src(node, 1), src(node, 2), src(node, 3));
}

constexpr OpEntry kEntries[] = {
    replayed(GGML_OP_DSV4_HC_COMB, 3, "rc", make_dsv4_hc_comb).with_geometry(dsv4_hc_comb_geometry),
    replayed(GGML_OP_DSV4_HC_PRE, 2, "rc", make_dsv4_hc_pre),
    // src[3] (comb) is optional: left out for the identity mix.
    replayed(GGML_OP_DSV4_HC_POST, 3, "rc", make_dsv4_hc_post),
};

}  // namespace

const OpFamily kHyperConnectionOps{kEntries};

}  // namespace ggml_remote::host::ops
