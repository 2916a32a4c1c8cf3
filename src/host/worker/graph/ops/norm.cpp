// The normalizations, and RMS_NORM_BACK (their gradient shares their rule).
#include "host/worker/graph/ops/checks.h"
#include "host/worker/graph/ops/families.h"

namespace ggml_remote::host::ops {
namespace {

// A float of op_params that ggml-cpu asserts is >= 0 (NaN is not).
Why non_negative_float_param(const ggml_tensor *node, int index, const char *what) {
    const float value = float_param(node, index);
    if (value >= 0.0f) return {};
    return std::string(what) + " " + std::to_string(value) + " is not >= 0";
}

// NORM, RMS_NORM, L2_NORM, RMS_NORM_BACK: op_params = {eps}; GROUP_NORM: {groups, eps}.
Why check_norm(const ggml_tensor *node) {
    const int eps_index = node->op == GGML_OP_GROUP_NORM ? 1 : 0;
    Why why = non_negative_float_param(node, eps_index, "eps");
    if (!why.empty()) return why;
    if (node->op == GGML_OP_GROUP_NORM && node->op_params[0] <= 0) return "group count must be positive";
    return node->op == GGML_OP_RMS_NORM_BACK ? check_same_shape_pair(node) : same_shape_as_source(node);
}

constexpr OpEntry kEntries[] = {
    // NORM and L2_NORM walk src[0] through its strides.
    ruled(GGML_OP_NORM, 1, "rsr", check_norm),        ruled(GGML_OP_RMS_NORM, 1, "r", check_norm),
    ruled(GGML_OP_GROUP_NORM, 1, "r", check_norm),    ruled(GGML_OP_L2_NORM, 1, "rsr", check_norm),
    ruled(GGML_OP_RMS_NORM_BACK, 2, "r", check_norm),
};

}  // namespace

const OpFamily kNormOps{kEntries};

}  // namespace ggml_remote::host::ops
