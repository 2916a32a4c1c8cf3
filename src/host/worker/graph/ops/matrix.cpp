// Matrix products: MUL_MAT, MUL_MAT_ID (the experts' product), OUT_PROD, and the
// replayed SOLVE_TRI.
#include "host/worker/graph/ops/checks.h"
#include "host/worker/graph/ops/families.h"

namespace ggml_remote::host::ops {
namespace {

// What ggml-cpu's matrix products (MUL_MAT, MUL_MAT_ID) compute, found by fuzzing:
// src[0] and src[1] dense along their rows, a result that is neither transposed nor
// permuted (it asserts all that), a float or quantized src[0] (other types have no
// dot product), and an F32 src[1] or one of src[0]'s float type (it converts any
// other src[1] as if it were F32).
Why check_mat_mul_kernel(const ggml_tensor *node) {
    const ggml_tensor *a = node->src[0], *b = node->src[1];
    if (!rows_are_dense(a)) return "src[0] rows are not dense";
    if (!rows_are_dense(b)) return "src[1] rows are not dense";
    if (!result_in_order(node)) return "the result is transposed or permuted";
    if (!is_float(a->type) && !ggml_is_quantized(a->type)) {
        return std::string("src[0] type ") + ggml_type_name(a->type) + " has no dot product";
    }
    if (b->type != GGML_TYPE_F32 && !(b->type == a->type && is_float(a->type))) {
        return std::string("src[1] type ") + ggml_type_name(b->type) + " should be f32";
    }
    return {};
}

// MUL_MAT, MUL_MAT_ID: op_params = {accumulator precision, hint, src[0] precision,
// src[1] precision}; values ggml does not define are refused. ggml-cpu's Hadamard
// hint (src[0] is a Hadamard matrix, applied as a fast transform) writes past the
// result unless src[0] is a square matrix of a power-of-two size (found by the
// write-set oracle with an 8 x 4 one): it is taken only for those.
Why check_mat_mul_params(const ggml_tensor *node) {
    const int32_t *p = node->op_params;
    auto precision = [](int32_t value, bool quantized) {
        return value == GGML_PREC_UNDEFINED || value == GGML_PREC_F32 || value == GGML_PREC_BF16 ||
               value == GGML_PREC_F16 || (quantized && (value == GGML_PREC_Q8 || value == GGML_PREC_Q4));
    };
    if (!precision(p[0], false)) return "accumulator precision " + std::to_string(p[0]) + " is not supported";
    const ggml_tensor *a = node->src[0];
    const bool hadamard_shape = node->op == GGML_OP_MUL_MAT && a->ne[0] == a->ne[1] && a->ne[0] >= 64 &&
                                (a->ne[0] & (a->ne[0] - 1)) == 0 && a->ne[2] == 1 && a->ne[3] == 1;
    if (p[1] != GGML_HINT_NONE && !(p[1] == GGML_HINT_SRC0_IS_HADAMARD && hadamard_shape)) {
        return "hint " + std::to_string(p[1]) + " is not supported for " + described("src[0]", a);
    }
    if (p[2] != GGML_PREC_UNDEFINED || !precision(p[3], true)) return "source precisions are not supported";
    for (int i = 4; i < GGML_MAX_OP_PARAMS / 4; ++i) {
        if (p[i] != 0) return "op_params[" + std::to_string(i) + "] is not used by this op";
    }
    return {};
}

// MUL_MAT: result[i, j] = src0 row i . src1 row j; src0 broadcasts over dims 2 and 3.
Why check_mul_mat(const ggml_tensor *node) {
    const ggml_tensor *a = node->src[0], *b = node->src[1];
    Why params = check_mat_mul_params(node);
    if (!params.empty()) return params;
    if (a->ne[0] != b->ne[0]) {
        return described("src[0]", a) + " and " + described("src[1]", b) + " differ in ne[0] (the dot product length)";
    }
    if (!divides(a->ne[2], b->ne[2]) || !divides(a->ne[3], b->ne[3])) {
        return described("src[0]", a) + " cannot be broadcast over " + described("src[1]", b) + " in dims 2 and 3";
    }
    if (ggml_is_transposed(a)) return "src[0] is transposed";
    return first({result_shape(node, a->ne[1], b->ne[1], b->ne[2], b->ne[3]), result_type(node, GGML_TYPE_F32),
                  check_mat_mul_kernel(node)});
}

// MUL_MAT_ID: as [cols, rows, n_expert], b [cols, n_used or 1, n_tokens], ids [n_used, n_tokens].
Why check_mul_mat_id(const ggml_tensor *node) {
    const ggml_tensor *as = node->src[0], *b = node->src[1], *ids = node->src[2];
    Why why = first({check_mat_mul_params(node), source_type(node, 2, GGML_TYPE_I32)});
    if (!why.empty()) return why;
    if (ggml_is_transposed(as)) return "src[0] is transposed";
    if (as->ne[3] != 1 || b->ne[3] != 1 || ids->ne[2] != 1 || ids->ne[3] != 1) {
        return "src[0] and src[1] must be 3-d and the ids 2-d";
    }
    if (as->ne[0] != b->ne[0]) {
        return described("src[0]", as) + " and " + described("src[1]", b) + " differ in ne[0] (the dot product length)";
    }
    if (ids->ne[1] != b->ne[2] || !divides(b->ne[1], ids->ne[0])) {
        return "ids " + shape_of(ids) + " do not fit " + described("src[1]", b);
    }
    return first({result_shape(node, as->ne[1], ids->ne[0], b->ne[2], 1), result_type(node, GGML_TYPE_F32),
                  check_mat_mul_kernel(node)});
}

Why check_out_prod(const ggml_tensor *node) {
    const ggml_tensor *a = node->src[0], *b = node->src[1];
    if (a->ne[1] != b->ne[1] || !divides(a->ne[2], b->ne[2]) || !divides(a->ne[3], b->ne[3])) {
        return described("src[0]", a) + " and " + described("src[1]", b) + " do not fit";
    }
    if (ggml_is_transposed(a)) return "src[0] is transposed";
    return result_shape(node, a->ne[0], b->ne[0], b->ne[2], b->ne[3]);
}

ggml_tensor *make_solve_tri(ggml_context *ctx, const ggml_tensor *node) {
    return ggml_solve_tri(ctx, src(node, 0), src(node, 1), true, true, false);  // the only variant ggml has
}

constexpr OpEntry kEntries[] = {
    ruled(GGML_OP_MUL_MAT, 2, "r", check_mul_mat),
    // Expert ids into src[0]'s matrices, which ggml-cpu checks only by assert().
    ruled(GGML_OP_MUL_MAT_ID, 3, "r", check_mul_mat_id).following_indexes(2, src_ne(0, 2)),
    ruled(GGML_OP_OUT_PROD, 2, "r", check_out_prod),
    replayed(GGML_OP_SOLVE_TRI, 2, "rc", make_solve_tri),
};

}  // namespace

const OpFamily kMatrixOps{kEntries};

}  // namespace ggml_remote::host::ops
