// Training: SILU_BACK, the cross-entropy loss and its gradient, the optimizer steps.
#include "host/worker/graph/ops/checks.h"
#include "host/worker/graph/ops/families.h"

namespace ggml_remote::host::ops {
namespace {

Why check_cross_entropy_loss(const ggml_tensor *node) {
    if (elements(node) != 1) return described("result", node) + " should be a scalar";
    return sources_same_shape(node, 0, 1);
}

ggml_tensor *make_cross_entropy_loss_back(ggml_context *ctx, const ggml_tensor *node) {
    return ggml_cross_entropy_loss_back(ctx, src(node, 0), src(node, 1), src(node, 2));
}

ggml_tensor *make_opt_step_adamw(ggml_context *ctx, const ggml_tensor *node) {
    return ggml_opt_step_adamw(ctx, src(node, 0), src(node, 1), src(node, 2), src(node, 3), src(node, 4));
}

ggml_tensor *make_opt_step_sgd(ggml_context *ctx, const ggml_tensor *node) {
    return ggml_opt_step_sgd(ctx, src(node, 0), src(node, 1), src(node, 2));
}

constexpr OpEntry kEntries[] = {
    ruled(GGML_OP_SILU_BACK, 2, "r", check_same_shape_pair),
    ruled(GGML_OP_CROSS_ENTROPY_LOSS, 2, "r", check_cross_entropy_loss),
    replayed(GGML_OP_CROSS_ENTROPY_LOSS_BACK, 3, "rc", make_cross_entropy_loss_back),
    // AdamW updates its moments m and v (src[2], src[3]) in place.
    replayed(GGML_OP_OPT_STEP_ADAMW, 5, "rc", make_opt_step_adamw).writing_sources((1u << 2) | (1u << 3)),
    replayed(GGML_OP_OPT_STEP_SGD, 3, "rc", make_opt_step_sgd),
};

}  // namespace

const OpFamily kTrainingOps{kEntries};

}  // namespace ggml_remote::host::ops
