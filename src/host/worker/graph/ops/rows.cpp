// Row gathers and scatters: GET_ROWS, GET_ROWS_BACK, SET_ROWS. Their row ids are
// tensor data that exists only at compute time: index_guard.h copies and checks
// them (`following_indexes`), since ggml-cpu does not.
#include "host/worker/graph/ops/checks.h"
#include "host/worker/graph/ops/families.h"

namespace ggml_remote::host::ops {
namespace {

Why check_get_rows(const ggml_tensor *node) {
    const ggml_tensor *a = node->src[0], *rows = node->src[1];
    Why why = source_type(node, 1, GGML_TYPE_I32);
    if (!why.empty()) return why;
    if (a->ne[2] != rows->ne[1] || a->ne[3] != rows->ne[2] || rows->ne[3] != 1) {
        return "row ids " + shape_of(rows) + " do not fit " + described("src[0]", a);
    }
    return first({result_shape(node, a->ne[0], rows->ne[0], rows->ne[1], rows->ne[2]),
                  result_type(node, a->type == GGML_TYPE_I32 ? GGML_TYPE_I32 : GGML_TYPE_F32)});
}

Why check_get_rows_back(const ggml_tensor *node) {
    const ggml_tensor *a = node->src[0], *rows = node->src[1];
    if (!ggml_is_contiguous(node)) return "the result is not contiguous";
    Why why = source_type(node, 1, GGML_TYPE_I32);
    if (!why.empty()) return why;
    if (!ggml_is_matrix(a) || !ggml_is_vector(rows) || a->ne[1] < rows->ne[0]) {  // row i of src[0] per id
        return "row ids " + shape_of(rows) + " do not fit " + described("src[0]", a);
    }
    if (!ggml_is_matrix(node) || node->ne[0] != a->ne[0])
        return described("result", node) + " does not fit " + described("src[0]", a);
    return result_type(node, GGML_TYPE_F32);
}

// SET_ROWS: the result (a view of the destination, also src[2]) gets src[0]'s rows at
// the row ids in src[1].
Why check_set_rows(const ggml_tensor *node) {
    const ggml_tensor *values = node->src[0], *rows = node->src[1];
    Why why =
        first({source_type(node, 0, GGML_TYPE_F32, GGML_TYPE_F16), source_type(node, 1, GGML_TYPE_I64, GGML_TYPE_I32)});
    if (!why.empty()) return why;
    if (node->ne[0] != values->ne[0] || node->ne[2] != values->ne[2] || node->ne[3] != values->ne[3]) {
        return described("result", node) + " does not fit " + described("src[0]", values);
    }
    if (values->ne[1] != rows->ne[0] || !divides(rows->ne[1], values->ne[2]) || !divides(rows->ne[2], values->ne[3]) ||
        rows->ne[3] != 1) {
        return "row ids " + shape_of(rows) + " do not fit " + described("src[0]", values);
    }
    if (node->src[2] != nullptr) return same_shape_as_source(node, 2);
    return {};
}

constexpr OpEntry kEntries[] = {
    // Row ids into src[0]'s rows.
    ruled(GGML_OP_GET_ROWS, 2, "r", check_get_rows).following_indexes(1, src_ne(0, 1)),
    // Row ids into the result's rows (which ggml-cpu writes unchecked).
    ruled(GGML_OP_GET_ROWS_BACK, 2, "r", check_get_rows_back).following_indexes(1, result_ne(1)),
    // Row ids into the result's (the destination's) rows. src[2], the destination,
    // is optional (older ggml).
    ruled(GGML_OP_SET_ROWS, 2, "r", check_set_rows).following_indexes(1, result_ne(1)),
};

}  // namespace

const OpFamily kRowOps{kEntries};

}  // namespace ggml_remote::host::ops
