// Element-wise ops: binary ops with broadcasting, the unary functions, the gated
// linear units, SET and ACC, SCALE and FILL.
#include "host/worker/graph/ops/checks.h"
#include "host/worker/graph/ops/families.h"

namespace ggml_remote::host::ops {
namespace {

// What ggml-cpu's binary kernels compute, found by fuzzing: anything else ends in
// a GGML_ASSERT or GGML_ABORT inside the kernel. The result and src[0] dense along
// their rows, src[1] too unless it has src[0]'s very shape; the same float type
// throughout, or an F16/BF16 src[0] with an F32 src[1]; and for ADD, a quantized
// src[0] with a dense F32 src[1] of the same shape, into a float result.
Why check_binary_kernel(const ggml_tensor *node) {
    const ggml_tensor *a = node->src[0], *b = node->src[1];
    if (!rows_are_dense(node)) return "the result's rows are not dense";
    if (!rows_are_dense(a)) return "src[0] rows are not dense";
    if (!rows_are_dense(b) && !ggml_are_same_shape(a, b)) return "src[1] rows are not dense and it is broadcast";
    const ggml_type ta = a->type, tb = b->type, td = node->type;
    const bool same_float = is_float(ta) && ta == tb && tb == td;
    const bool half_and_f32 =
        (ta == GGML_TYPE_F16 || ta == GGML_TYPE_BF16) && tb == GGML_TYPE_F32 && (td == ta || td == GGML_TYPE_F32);
    if (same_float || half_and_f32) return {};
    if (node->op == GGML_OP_ADD && ggml_is_quantized(ta) && tb == GGML_TYPE_F32 && is_float(td)) {
        if (!rows_are_dense(b) || !ggml_are_same_shape(a, b)) {
            return "a quantized src[0] needs a dense src[1] of its shape";
        }
        return {};
    }
    return std::string("types ") + ggml_type_name(ta) + ", " + ggml_type_name(tb) + " into " + ggml_type_name(td) +
           " are not supported";
}

// ADD, SUB, MUL, DIV: src[1] broadcasts over src[0]; the result has src[0]'s shape
// (its type may differ: ggml_add_cast).
Why check_binary(const ggml_tensor *node) {
    const ggml_tensor *a = node->src[0], *b = node->src[1];
    if (!ggml_can_repeat(b, a)) return described("src[1]", b) + " cannot be broadcast to " + described("src[0]", a);
    return first({same_shape_as_source(node), check_binary_kernel(node)});
}

Why check_add_id(const ggml_tensor *node) {
    const ggml_tensor *a = node->src[0], *b = node->src[1], *ids = node->src[2];
    if (a->ne[0] != b->ne[0] || a->ne[1] != ids->ne[0] || a->ne[2] != ids->ne[1]) {
        return described("src[0]", a) + ", " + described("src[1]", b) + " and ids " + shape_of(ids) + " do not fit";
    }
    return first({source_type(node, 2, GGML_TYPE_I32), same_shape_as_source(node)});
}

Why check_add1(const ggml_tensor *node) {
    if (!ggml_is_scalar(node->src[1])) return described("src[1]", node->src[1]) + " is not a scalar";
    return same_shape_as_source(node);
}

// The byte just past the last one that SET or ACC writes, from the op_params
// offset and strides; false when that overflows.
bool set_or_acc_end(const ggml_tensor *node, uint64_t *end) {
    const ggml_tensor *b = node->src[1];
    const int32_t *params = node->op_params;  // nb1, nb2, nb3, offset, inplace
    const uint64_t element = ggml_element_size(node);
    const uint64_t strides[4] = {element, uint64_t(params[0]), uint64_t(params[1]), uint64_t(params[2])};
    *end = static_cast<uint64_t>(params[3]);
    bool overflow = false;
    for (int d = 0; d < GGML_MAX_DIMS; ++d) {
        uint64_t step = 0;
        overflow |= __builtin_mul_overflow(uint64_t(b->ne[d] - 1), strides[d], &step);
        overflow |= __builtin_add_overflow(*end, step, end);
    }
    overflow |= __builtin_add_overflow(*end, element, end);
    return !overflow;
}

// SET and ACC write src[1] into a copy of src[0] at a byte offset with strides that
// travel in op_params (int32 each): the whole write must land inside the result.
Why check_set_or_acc(const ggml_tensor *node) {
    const ggml_tensor *a = node->src[0], *b = node->src[1];
    Why layout = both_contiguous(node);
    if (!layout.empty()) return layout;
    if (elements(b) > elements(a)) return described("src[1]", b) + " has more elements than " + described("src[0]", a);
    if (node->op == GGML_OP_ACC) {
        Why why = first({source_type(node, 0, GGML_TYPE_F32), source_type(node, 1, GGML_TYPE_F32)});
        if (!why.empty()) return why;
        if (!ggml_is_contiguous(a)) return "src[0] is not contiguous";
    }
    Why why = same_shape_as_source(node);
    if (!why.empty()) return why;
    const int32_t *params = node->op_params;
    for (int i = 0; i < 4; ++i) {
        if (params[i] < 0) return "negative stride or offset " + std::to_string(params[i]) + " in op_params";
    }
    for (int d = 0; d < GGML_MAX_DIMS; ++d) {
        if (b->ne[d] == 0) return {};  // nothing is written
    }
    uint64_t end = 0;
    if (!set_or_acc_end(node, &end) || end > ggml_nbytes(node)) {
        return "src[1] written at op_params offset " + std::to_string(params[3]) + " would end past the result's " +
               std::to_string(ggml_nbytes(node)) + " bytes";
    }
    return {};
}

Why check_unary(const ggml_tensor *node) {
    const int32_t unary = node->op_params[0];
    if (unary < 0 || unary >= GGML_UNARY_OP_COUNT) return "unary op " + std::to_string(unary) + " does not exist";
    if (!ggml_is_contiguous_rows(node->src[0])) return "src[0] rows are not contiguous";
    return same_shape_as_source(node);
}

// GLU: a gated linear unit over src[0]'s two halves, or over src[0] and src[1].
Why check_glu(const ggml_tensor *node) {
    const ggml_tensor *a = node->src[0], *b = node->src[1];
    const int32_t glu = node->op_params[0];
    if (glu < 0 || glu >= GGML_GLU_OP_COUNT) return "glu op " + std::to_string(glu) + " does not exist";
    if (!ggml_is_contiguous_1(a)) return "src[0] is not contiguous";
    if (b == nullptr) return result_shape(node, a->ne[0] / 2, a->ne[1], a->ne[2], a->ne[3]);
    if (!ggml_is_contiguous_1(b)) return "src[1] is not contiguous";
    if (a->type != b->type) return "src[0] and src[1] differ in type";
    return first({sources_same_shape(node, 0, 1), same_shape_as_source(node)});
}

Why same_shape_as_src0(const ggml_tensor *node) { return same_shape_as_source(node); }

Why check_scale(const ggml_tensor *node) { return first({both_contiguous(node), same_shape_as_source(node)}); }

// The binary kernels walk src[1] through its strides when it has src[0]'s shape
// (check_binary_kernel): its rows need not be dense.
constexpr const char *kBinaryLayout = "rrsr";

constexpr OpEntry kEntries[] = {
    ruled(GGML_OP_ADD, 2, kBinaryLayout, check_binary),
    ruled(GGML_OP_SUB, 2, kBinaryLayout, check_binary),
    ruled(GGML_OP_MUL, 2, kBinaryLayout, check_binary),
    ruled(GGML_OP_DIV, 2, kBinaryLayout, check_binary),
    // ids into src[1]'s rows
    ruled(GGML_OP_ADD_ID, 3, "r", check_add_id).following_indexes(2, src_ne(1, 1)),
    ruled(GGML_OP_ADD1, 2, "r", check_add1),
    ruled(GGML_OP_ACC, 2, "r", check_set_or_acc),
    ruled(GGML_OP_SET, 2, "r", check_set_or_acc),
    ruled(GGML_OP_SQR, 1, "r", same_shape_as_src0),
    ruled(GGML_OP_SQRT, 1, "r", same_shape_as_src0),
    ruled(GGML_OP_LOG, 1, "r", same_shape_as_src0),
    ruled(GGML_OP_SIN, 1, "r", same_shape_as_src0),
    ruled(GGML_OP_COS, 1, "r", same_shape_as_src0),
    ruled(GGML_OP_CLAMP, 1, "r", same_shape_as_src0),
    ruled(GGML_OP_LEAKY_RELU, 1, "r", same_shape_as_src0),
    ruled(GGML_OP_FILL, 1, "r", same_shape_as_src0),
    ruled(GGML_OP_SCALE, 1, "r", check_scale),
    // Every unary function (op_params[0]) under the same rule.
    ruled(GGML_OP_UNARY, 1, "r", check_unary),
    // src[1] is optional: the split form of the gated unit.
    ruled(GGML_OP_GLU, 1, "r", check_glu),
};

}  // namespace

const OpFamily kElementwiseOps{kEntries};

}  // namespace ggml_remote::host::ops
