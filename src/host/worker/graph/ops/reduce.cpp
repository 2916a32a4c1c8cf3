// Reductions and sorting: sums, means, argmax, COUNT_EQUAL, ARGSORT, TOP_K, CUMSUM.
#include "host/worker/graph/ops/checks.h"
#include "host/worker/graph/ops/families.h"

namespace ggml_remote::host::ops {
namespace {

Why check_sum(const ggml_tensor *node) {
    if (elements(node) != 1) return described("result", node) + " should be a scalar";
    return {};
}

Why check_reduce_rows(const ggml_tensor *node) {  // SUM_ROWS, MEAN
    const ggml_tensor *a = node->src[0];
    return result_shape(node, 1, a->ne[1], a->ne[2], a->ne[3]);
}

Why check_argmax(const ggml_tensor *node) {
    const ggml_tensor *a = node->src[0];
    if (!ggml_is_matrix(a)) return described("src[0]", a) + " is not a matrix";
    return first({result_shape(node, a->ne[1], 1, 1, 1), result_type(node, GGML_TYPE_I32)});
}

Why check_count_equal(const ggml_tensor *node) {
    return first({sources_same_shape(node, 0, 1),
                  elements(node) == 1 ? Why() : described("result", node) + " should be a scalar",
                  result_type(node, GGML_TYPE_I64)});
}

Why check_argsort(const ggml_tensor *node) {
    const int32_t order = node->op_params[0];
    if (order != GGML_SORT_ORDER_ASC && order != GGML_SORT_ORDER_DESC) return "sort order " + std::to_string(order);
    return first({same_shape_as_source(node), result_type(node, GGML_TYPE_I32)});
}

Why check_top_k(const ggml_tensor *node) {
    const ggml_tensor *a = node->src[0];
    if (node->ne[0] > a->ne[0] || node->ne[1] != a->ne[1] || node->ne[2] != a->ne[2] || node->ne[3] != a->ne[3]) {
        return described("result", node) + " does not fit " + described("src[0]", a);
    }
    return result_type(node, GGML_TYPE_I32);
}

Why same_shape_as_src0(const ggml_tensor *node) { return same_shape_as_source(node); }

constexpr OpEntry kEntries[] = {
    // SUM walks src[0] through its strides.
    ruled(GGML_OP_SUM, 1, "rsr", check_sum),
    ruled(GGML_OP_SUM_ROWS, 1, "r", check_reduce_rows),
    ruled(GGML_OP_MEAN, 1, "r", check_reduce_rows),
    ruled(GGML_OP_ARGMAX, 1, "r", check_argmax),
    ruled(GGML_OP_COUNT_EQUAL, 2, "r", check_count_equal),
    // std::sort compares the values again and again: a copy that holds still.
    ruled(GGML_OP_ARGSORT, 1, "r", check_argsort).holding_values_still(0),
    ruled(GGML_OP_TOP_K, 1, "r", check_top_k),
    ruled(GGML_OP_CUMSUM, 1, "r", same_shape_as_src0),
};

}  // namespace

const OpFamily kReduceOps{kEntries};

}  // namespace ggml_remote::host::ops
