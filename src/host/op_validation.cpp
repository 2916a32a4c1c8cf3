// A guest describes each node field by field, so nothing guarantees that a node came
// out of ggml_add() or ggml_mul_mat(): a source may be missing, or the shapes may
// break the op's rules. ggml's CPU kernels do not check again (their shape checks are
// assert(), compiled out in release builds), so such a node would dereference a null
// source, read or write past its tensors, or abort the worker on a GGML_ASSERT.
//
// The rules below are those of ggml's op constructors (ggml.c of libggml 0.27.0),
// plus the few relations that the CPU kernels rely on without asserting them. Each
// tensor's own bytes are bounds-checked against its buffer in graph_builder.cpp;
// this file checks how the tensors of one node fit together.
//
// Not checked, because they are tensor data that exists only at compute time: the
// row ids of GET_ROWS, SET_ROWS, GET_ROWS_BACK, ADD_ID and MUL_MAT_ID, the expert ids
// of SSM_SCAN. ggml's kernels GGML_ASSERT most of them; what slips through ends in the
// guest's own worker process, which is the last line of defence.
#include "host/op_validation.h"

#include "protocol/printable.h"
#include "protocol/tensor_codec.h"

#include <cstring>
#include <string>

namespace ggml_remote::host {

namespace {

// Why a node breaks its op's rules; empty when it does not.
using Why = std::string;

std::string shape_of(const ggml_tensor *t) {
    return "[" + std::to_string(t->ne[0]) + ", " + std::to_string(t->ne[1]) + ", " + std::to_string(t->ne[2]) + ", " +
           std::to_string(t->ne[3]) + "]";
}

std::string src_label(int i) { return "src[" + std::to_string(i) + "]"; }

std::string described(const char *what, const ggml_tensor *t) { return std::string(what) + " " + shape_of(t); }

// ggml_nelements without signed overflow (a guest's ne values are up to 2^63 - 1 each,
// and a tensor with zero strides can be that large and still fit its buffer).
bool element_count(const ggml_tensor *t, int64_t *count) {
    int64_t n = 1;
    for (int d = 0; d < GGML_MAX_DIMS; ++d) {
        if (__builtin_mul_overflow(n, t->ne[d], &n)) return false;
    }
    *count = n;
    return true;
}

// decode_tensor_list refuses these first; validate_node does not rely on it.
bool known_type(const ggml_tensor *t) {
    return t->type >= 0 && t->type < GGML_TYPE_COUNT && ggml_blck_size(t->type) > 0 && ggml_type_size(t->type) > 0;
}

// Whether a tensor claims no more elements than the bytes its strides span can hold.
// ggml's tensors never do (their elements do not overlap); a guest's can, with zero or
// tiny strides, and ggml-cpu sizes its work buffer from element counts: a 4 KiB tensor
// that claims 2^50 elements makes it allocate petabytes (std::bad_alloc, which
// terminates the worker), and one of 2^36 makes it allocate and touch 100 GB.
bool elements_fit_span(const ggml_tensor *t, std::string *why) {
    for (int d = 0; d < GGML_MAX_DIMS; ++d) {
        if (t->ne[d] == 0) return true;  // no elements
    }
    protocol::WireTensor wire{};
    wire.type = t->type;
    for (int d = 0; d < GGML_MAX_DIMS; ++d) {
        wire.ne[d] = t->ne[d];
        wire.nb[d] = t->nb[d];
    }
    uint64_t span = 0, dense = ggml_type_size(t->type);
    bool overflow = !protocol::tensor_byte_span(wire, &span);
    for (int d = 0; d < GGML_MAX_DIMS && !overflow; ++d) {
        const uint64_t count = d == 0 ? uint64_t(t->ne[0] / ggml_blck_size(t->type)) : uint64_t(t->ne[d]);
        overflow = __builtin_mul_overflow(dense, count, &dense);
    }
    if (!overflow && dense <= span) return true;
    *why = shape_of(t) + " of " + ggml_type_name(t->type) + " claims more elements than the " +
           (overflow ? std::string("bytes") : std::to_string(span) + " bytes") + " its strides span";
    return false;
}

int64_t elements(const ggml_tensor *t) {
    int64_t n = 0;
    return element_count(t, &n) ? n : -1;  // callers checked every tensor of the node first
}

// `value` splits evenly into `divisor` parts (ggml writes value % divisor == 0, which
// a zero divisor turns into SIGFPE).
bool divides(int64_t divisor, int64_t value) { return divisor > 0 && value % divisor == 0; }

bool has_shape(const ggml_tensor *t, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3) {
    return t->ne[0] == ne0 && t->ne[1] == ne1 && t->ne[2] == ne2 && t->ne[3] == ne3;
}

std::string shape_text(int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3) {
    return "[" + std::to_string(ne0) + ", " + std::to_string(ne1) + ", " + std::to_string(ne2) + ", " +
           std::to_string(ne3) + "]";
}

Why result_shape(const ggml_tensor *node, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3) {
    if (has_shape(node, ne0, ne1, ne2, ne3)) return {};
    return described("result", node) + " should be " + shape_text(ne0, ne1, ne2, ne3);
}

Why result_type(const ggml_tensor *node, ggml_type type) {
    if (node->type == type) return {};
    return std::string("result type ") + ggml_type_name(node->type) + " should be " + ggml_type_name(type);
}

Why source_type(const ggml_tensor *node, int i, ggml_type type, ggml_type other = GGML_TYPE_COUNT) {
    const ggml_type actual = node->src[i]->type;
    if (actual == type || actual == other) return {};
    std::string expected = ggml_type_name(type);
    if (other != GGML_TYPE_COUNT) expected += " or " + std::string(ggml_type_name(other));
    return src_label(i) + " type " + ggml_type_name(actual) + " should be " + expected;
}

Why same_shape_as_source(const ggml_tensor *node, int i = 0) {
    if (ggml_are_same_shape(node, node->src[i])) return {};
    return described("result", node) + " differs from " + described(src_label(i).c_str(), node->src[i]);
}

Why sources_same_shape(const ggml_tensor *node, int i, int j) {
    if (ggml_are_same_shape(node->src[i], node->src[j])) return {};
    return described(src_label(i).c_str(), node->src[i]) + " differs from " +
           described(src_label(j).c_str(), node->src[j]);
}

Why same_element_count(const ggml_tensor *node, int i) {
    if (elements(node) == elements(node->src[i])) return {};
    return "result has " + std::to_string(elements(node)) + " elements, " + src_label(i) + " has " +
           std::to_string(elements(node->src[i]));
}

// The first reason of several, in order.
Why first(std::initializer_list<Why> reasons) {
    for (const Why &why : reasons) {
        if (!why.empty()) return why;
    }
    return {};
}

// The number of sources, src[0] to src[n - 1], that every node of `op` has (the
// sources ggml's constructor always sets; optional ones are checked per op when
// present). -1 for ops a guest may not send.
int required_sources(ggml_op op) {
    switch (op) {
        case GGML_OP_NONE:
        case GGML_OP_ARANGE:
            return 0;

        case GGML_OP_DUP:
        case GGML_OP_SQR:
        case GGML_OP_SQRT:
        case GGML_OP_LOG:
        case GGML_OP_SIN:
        case GGML_OP_COS:
        case GGML_OP_SUM:
        case GGML_OP_SUM_ROWS:
        case GGML_OP_CUMSUM:
        case GGML_OP_MEAN:
        case GGML_OP_ARGMAX:
        case GGML_OP_REPEAT:
        case GGML_OP_REPEAT_BACK:
        case GGML_OP_NORM:
        case GGML_OP_RMS_NORM:
        case GGML_OP_GROUP_NORM:
        case GGML_OP_L2_NORM:
        case GGML_OP_SCALE:
        case GGML_OP_CPY:  // src[1], the destination, is optional: ggml_cast points it at the node itself
        case GGML_OP_CONT:
        case GGML_OP_RESHAPE:
        case GGML_OP_VIEW:
        case GGML_OP_PERMUTE:
        case GGML_OP_TRANSPOSE:
        case GGML_OP_DIAG:
        case GGML_OP_DIAG_MASK_INF:
        case GGML_OP_DIAG_MASK_ZERO:
        case GGML_OP_SOFT_MAX:  // src[1] mask and src[2] sinks are optional
        case GGML_OP_CLAMP:
        case GGML_OP_COL2IM_1D:
        case GGML_OP_POOL_1D:
        case GGML_OP_POOL_2D:
        case GGML_OP_UPSCALE:
        case GGML_OP_PAD:
        case GGML_OP_PAD_REFLECT_1D:
        case GGML_OP_ROLL:
        case GGML_OP_TIMESTEP_EMBEDDING:
        case GGML_OP_ARGSORT:
        case GGML_OP_TOP_K:
        case GGML_OP_LEAKY_RELU:
        case GGML_OP_TRI:
        case GGML_OP_FILL:
        case GGML_OP_WIN_PART:
        case GGML_OP_WIN_UNPART:
        case GGML_OP_GET_REL_POS:
        case GGML_OP_UNARY:
        case GGML_OP_GLU:  // src[1] is optional: the split form of the gated unit
            return 1;

        case GGML_OP_ADD:
        case GGML_OP_ADD1:
        case GGML_OP_ACC:
        case GGML_OP_SUB:
        case GGML_OP_MUL:
        case GGML_OP_DIV:
        case GGML_OP_COUNT_EQUAL:
        case GGML_OP_CONCAT:
        case GGML_OP_SILU_BACK:
        case GGML_OP_RMS_NORM_BACK:
        case GGML_OP_MUL_MAT:
        case GGML_OP_OUT_PROD:
        case GGML_OP_SET:
        case GGML_OP_GET_ROWS:
        case GGML_OP_GET_ROWS_BACK:
        case GGML_OP_SET_ROWS:  // src[2], the destination, is optional (older ggml does not set it)
        case GGML_OP_SOFT_MAX_BACK:
        case GGML_OP_ROPE:  // src[2] frequency factors are optional
        case GGML_OP_ROPE_BACK:
        case GGML_OP_CONV_TRANSPOSE_1D:
        case GGML_OP_IM2COL:
        case GGML_OP_IM2COL_BACK:
        case GGML_OP_IM2COL_3D:
        case GGML_OP_CONV_2D:
        case GGML_OP_CONV_3D:
        case GGML_OP_CONV_2D_DW:
        case GGML_OP_CONV_TRANSPOSE_2D:
        case GGML_OP_POOL_2D_BACK:
        case GGML_OP_SSM_CONV:
        case GGML_OP_SOLVE_TRI:
        case GGML_OP_DSV4_HC_PRE:
        case GGML_OP_CROSS_ENTROPY_LOSS:
            return 2;

        case GGML_OP_ADD_ID:
        case GGML_OP_MUL_MAT_ID:
        case GGML_OP_FLASH_ATTN_EXT:  // src[3] mask and src[4] sinks are optional
        case GGML_OP_ADD_REL_POS:
        case GGML_OP_DSV4_HC_COMB:
        case GGML_OP_DSV4_HC_POST:  // src[3] (comb) is optional: left out for the identity mix
        case GGML_OP_CROSS_ENTROPY_LOSS_BACK:
        case GGML_OP_OPT_STEP_SGD:
            return 3;

        case GGML_OP_FLASH_ATTN_BACK:
        case GGML_OP_LIGHTNING_INDEXER:
            return 4;

        case GGML_OP_GATED_LINEAR_ATTN:
        case GGML_OP_OPT_STEP_ADAMW:
            return 5;

        case GGML_OP_RWKV_WKV6:
        case GGML_OP_GATED_DELTA_NET:
            return 6;

        case GGML_OP_SSM_SCAN:
        case GGML_OP_RWKV_WKV7:
            return 7;

        // Their function pointers would be the guest's addresses (decode_tensor_list
        // refuses them first; this is the second fence).
        case GGML_OP_MAP_CUSTOM1:
        case GGML_OP_MAP_CUSTOM2:
        case GGML_OP_MAP_CUSTOM3:
        case GGML_OP_CUSTOM:
        case GGML_OP_COUNT:
            return -1;
    }
    return -1;
}

bool is_float(ggml_type type) { return type == GGML_TYPE_F32 || type == GGML_TYPE_F16 || type == GGML_TYPE_BF16; }

// Whether a tensor's elements are adjacent along its rows (nb[0] is one element).
bool rows_are_dense(const ggml_tensor *t) { return t->nb[0] == ggml_type_size(t->type); }

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
    const bool half_and_f32 = (ta == GGML_TYPE_F16 || ta == GGML_TYPE_BF16) && tb == GGML_TYPE_F32 &&
                              (td == ta || td == GGML_TYPE_F32);
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

// SET and ACC write src[1] into a copy of src[0] at a byte offset with strides that
// travel in op_params (int32 each): the whole write must land inside the result.
Why check_set_or_acc(const ggml_tensor *node) {
    const ggml_tensor *a = node->src[0], *b = node->src[1];
    if (elements(b) > elements(a)) return described("src[1]", b) + " has more elements than " + described("src[0]", a);
    if (node->op == GGML_OP_ACC) {
        Why why = first({source_type(node, 0, GGML_TYPE_F32), source_type(node, 1, GGML_TYPE_F32)});
        if (!why.empty()) return why;
        if (!ggml_is_contiguous(a)) return "src[0] is not contiguous";
    }
    Why why = same_shape_as_source(node);
    if (!why.empty()) return why;
    const int32_t *params = node->op_params;  // nb1, nb2, nb3, offset, inplace
    for (int i = 0; i < 4; ++i) {
        if (params[i] < 0) return "negative stride or offset " + std::to_string(params[i]) + " in op_params";
    }
    const uint64_t element = ggml_element_size(node);
    uint64_t end = static_cast<uint64_t>(params[3]);  // one past the last byte written
    bool overflow = false;
    const uint64_t strides[4] = {element, uint64_t(params[0]), uint64_t(params[1]), uint64_t(params[2])};
    for (int d = 0; d < GGML_MAX_DIMS; ++d) {
        if (b->ne[d] == 0) return {};  // nothing is written
        uint64_t step = 0;
        overflow |= __builtin_mul_overflow(uint64_t(b->ne[d] - 1), strides[d], &step);
        overflow |= __builtin_add_overflow(end, step, &end);
    }
    overflow |= __builtin_add_overflow(end, element, &end);
    if (overflow || end > ggml_nbytes(node)) {
        return "src[1] written at op_params offset " + std::to_string(params[3]) + " would end past the result's " +
               std::to_string(ggml_nbytes(node)) + " bytes";
    }
    return {};
}

Why check_reduce_rows(const ggml_tensor *node) {  // SUM_ROWS, MEAN
    const ggml_tensor *a = node->src[0];
    return result_shape(node, 1, a->ne[1], a->ne[2], a->ne[3]);
}

Why check_sum(const ggml_tensor *node) {
    if (elements(node) != 1) return described("result", node) + " should be a scalar";
    return {};
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

Why check_repeat(const ggml_tensor *node) {
    if (!ggml_can_repeat(node->src[0], node))
        return described("src[0]", node->src[0]) + " cannot be repeated to " + described("result", node);
    return {};
}

Why check_repeat_back(const ggml_tensor *node) {
    if (!ggml_can_repeat(node, node->src[0]))
        return described("result", node) + " cannot be repeated to " + described("src[0]", node->src[0]);
    return {};
}

Why check_concat(const ggml_tensor *node) {
    const ggml_tensor *a = node->src[0], *b = node->src[1];
    const int32_t dim = node->op_params[0];
    if (dim < 0 || dim >= GGML_MAX_DIMS) return "dimension " + std::to_string(dim) + " does not exist";
    if (a->type != b->type || node->type != a->type) return "src[0], src[1] and the result differ in type";
    int64_t ne[GGML_MAX_DIMS];
    for (int d = 0; d < GGML_MAX_DIMS; ++d) {
        if (d != dim && a->ne[d] != b->ne[d]) {
            return described("src[0]", a) + " and " + described("src[1]", b) + " differ outside dimension " +
                   std::to_string(dim);
        }
        if (d == dim && __builtin_add_overflow(a->ne[d], b->ne[d], &ne[d])) return "concatenated size overflows";
        if (d != dim) ne[d] = a->ne[d];
    }
    return result_shape(node, ne[0], ne[1], ne[2], ne[3]);
}

// Element-wise ops of two same-shaped tensors whose result has their shape
// (SILU_BACK, RMS_NORM_BACK, SOFT_MAX_BACK, CROSS_ENTROPY_LOSS's inputs).
Why check_same_shape_pair(const ggml_tensor *node) {
    return first({sources_same_shape(node, 0, 1), same_shape_as_source(node)});
}

// MUL_MAT: result[i, j] = src0 row i . src1 row j; src0 broadcasts over dims 2 and 3.
// Whether a result is dense along its rows and neither transposed nor permuted.
bool result_in_order(const ggml_tensor *node) {
    return rows_are_dense(node) && node->nb[0] <= node->nb[1] && node->nb[1] <= node->nb[2] &&
           node->nb[2] <= node->nb[3];
}

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

Why check_mul_mat(const ggml_tensor *node) {
    const ggml_tensor *a = node->src[0], *b = node->src[1];
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
    Why why = source_type(node, 2, GGML_TYPE_I32);
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

// DUP, CPY, CONT: the kernels walk the source and the result element by element.
Why check_copy(const ggml_tensor *node) {
    Why why = same_element_count(node, 0);
    if (!why.empty() || node->op != GGML_OP_CPY || node->src[1] == nullptr) return why;
    return same_element_count(node, 1);
}

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

Why check_diag(const ggml_tensor *node) {
    const ggml_tensor *a = node->src[0];
    if (a->ne[1] != 1) return described("src[0]", a) + " is not a row";
    return result_shape(node, a->ne[0], a->ne[0], a->ne[2], a->ne[3]);
}

Why check_soft_max(const ggml_tensor *node) {
    const ggml_tensor *a = node->src[0], *mask = node->src[1], *sinks = node->src[2];
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
    float max_bias = 0.0f;
    std::memcpy(&max_bias, &node->op_params[1], sizeof(max_bias));
    if (max_bias > 0.0f && mask == nullptr) return "ALiBi (max_bias > 0) needs a mask";
    if (sinks != nullptr) {
        Why why = source_type(node, 2, GGML_TYPE_F32);
        if (!why.empty()) return why;
        if (sinks->ne[0] != a->ne[2]) return "sinks " + shape_of(sinks) + " do not fit " + described("src[0]", a);
    }
    return same_shape_as_source(node);
}

// ROPE, ROPE_BACK: op_params = {n_past, n_dims, mode, n_ctx, n_ctx_orig, 6 floats,
// 4 mrope sections, n_offs}.
Why check_rope(const ggml_tensor *node) {
    const ggml_tensor *a = node->src[0], *positions = node->src[1], *factors = node->src[2];
    const int32_t n_dims = node->op_params[1], mode = node->op_params[2], n_offs = node->op_params[15];
    if ((mode & 1) != 0) return "mode " + std::to_string(mode) + " is not supported";
    Why why = source_type(node, 1, GGML_TYPE_I32);
    if (!why.empty()) return why;
    const int64_t per_token = (mode & GGML_ROPE_TYPE_MROPE) != 0 ? 4 : 1;  // mrope: 4 positions per token
    if (!ggml_is_vector(positions) || positions->ne[0] / per_token != a->ne[2] || positions->ne[0] % per_token != 0) {
        return "positions " + shape_of(positions) + " do not fit " + described("src[0]", a) + " (" +
               std::to_string(per_token) + " per row of dim 2)";
    }
    if (n_dims < 0 || n_dims % 2 != 0 || n_offs < 0 || n_offs % 2 != 0 || int64_t(n_dims) + n_offs > a->ne[0]) {
        return "n_dims " + std::to_string(n_dims) + " at offset " + std::to_string(n_offs) + " does not fit " +
               described("src[0]", a);
    }
    if (factors != nullptr) {
        why = source_type(node, 2, GGML_TYPE_F32);
        if (!why.empty()) return why;
        if (factors->ne[0] < n_dims / 2) return "frequency factors " + shape_of(factors) + " are fewer than n_dims / 2";
    }
    return same_shape_as_source(node);
}

// FLASH_ATTN_EXT: q [d_k, n_q, n_head, n_seq], k [d_k, n_kv, n_head_kv, n_seq],
// v [d_v, n_kv, n_head_kv, n_seq], mask [>= n_kv, >= n_q, ...] -> [d_v, n_head, n_q, n_seq].
Why check_flash_attn_ext(const ggml_tensor *node) {
    const ggml_tensor *q = node->src[0], *k = node->src[1], *v = node->src[2], *mask = node->src[3],
                      *sinks = node->src[4];
    if (k->ne[0] != q->ne[0]) return described("k", k) + " and " + described("q", q) + " differ in head size";
    if (!divides(k->ne[2], q->ne[2]) || !divides(v->ne[2], q->ne[2])) {
        return "the heads of " + described("q", q) + " cannot be shared among those of k and v";
    }
    if (q->ne[3] != k->ne[3] || q->ne[3] != v->ne[3]) return "q, k and v differ in ne[3]";
    if (k->ne[1] != v->ne[1]) return described("k", k) + " and " + described("v", v) + " differ in length";
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
    float max_bias = 0.0f;
    std::memcpy(&max_bias, &node->op_params[1], sizeof(max_bias));
    if (max_bias > 0.0f && mask == nullptr) return "ALiBi (max_bias > 0) needs a mask";
    if (sinks != nullptr) {
        Why why = source_type(node, 4, GGML_TYPE_F32);
        if (!why.empty()) return why;
        if (sinks->ne[0] != q->ne[2]) return "sinks " + shape_of(sinks) + " do not fit " + described("q", q);
    }
    return first({result_shape(node, v->ne[0], q->ne[2], q->ne[1], q->ne[3]), result_type(node, GGML_TYPE_F32)});
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

Why check_argsort(const ggml_tensor *node) {
    return first({same_shape_as_source(node), result_type(node, GGML_TYPE_I32)});
}

Why check_top_k(const ggml_tensor *node) {
    const ggml_tensor *a = node->src[0];
    if (node->ne[0] > a->ne[0] || node->ne[1] != a->ne[1] || node->ne[2] != a->ne[2] || node->ne[3] != a->ne[3]) {
        return described("result", node) + " does not fit " + described("src[0]", a);
    }
    return result_type(node, GGML_TYPE_I32);
}

Why check_cross_entropy_loss(const ggml_tensor *node) {
    if (elements(node) != 1) return described("result", node) + " should be a scalar";
    return sources_same_shape(node, 0, 1);
}

Why check_shapes(const ggml_tensor *node) {
    switch (node->op) {
        case GGML_OP_ADD:
        case GGML_OP_SUB:
        case GGML_OP_MUL:
        case GGML_OP_DIV:
            return check_binary(node);
        case GGML_OP_ADD_ID:
            return check_add_id(node);
        case GGML_OP_ADD1:
            return check_add1(node);
        case GGML_OP_ACC:
        case GGML_OP_SET:
            return check_set_or_acc(node);
        case GGML_OP_SQR:
        case GGML_OP_SQRT:
        case GGML_OP_LOG:
        case GGML_OP_SIN:
        case GGML_OP_COS:
        case GGML_OP_CUMSUM:
        case GGML_OP_NORM:
        case GGML_OP_RMS_NORM:
        case GGML_OP_GROUP_NORM:
        case GGML_OP_L2_NORM:
        case GGML_OP_SCALE:
        case GGML_OP_DIAG_MASK_INF:
        case GGML_OP_DIAG_MASK_ZERO:
        case GGML_OP_CLAMP:
        case GGML_OP_LEAKY_RELU:
        case GGML_OP_TRI:
        case GGML_OP_FILL:
            return same_shape_as_source(node);
        case GGML_OP_SUM:
            return check_sum(node);
        case GGML_OP_SUM_ROWS:
        case GGML_OP_MEAN:
            return check_reduce_rows(node);
        case GGML_OP_ARGMAX:
            return check_argmax(node);
        case GGML_OP_COUNT_EQUAL:
            return check_count_equal(node);
        case GGML_OP_REPEAT:
            return check_repeat(node);
        case GGML_OP_REPEAT_BACK:
            return check_repeat_back(node);
        case GGML_OP_CONCAT:
            return check_concat(node);
        case GGML_OP_SILU_BACK:
        case GGML_OP_RMS_NORM_BACK:
        case GGML_OP_SOFT_MAX_BACK:
            return check_same_shape_pair(node);
        case GGML_OP_MUL_MAT:
            return check_mul_mat(node);
        case GGML_OP_MUL_MAT_ID:
            return check_mul_mat_id(node);
        case GGML_OP_OUT_PROD:
            return check_out_prod(node);
        case GGML_OP_DUP:
        case GGML_OP_CPY:
        case GGML_OP_CONT:
            return check_copy(node);
        case GGML_OP_GET_ROWS:
            return check_get_rows(node);
        case GGML_OP_GET_ROWS_BACK:
            return check_get_rows_back(node);
        case GGML_OP_SET_ROWS:
            return check_set_rows(node);
        case GGML_OP_DIAG:
            return check_diag(node);
        case GGML_OP_SOFT_MAX:
            return check_soft_max(node);
        case GGML_OP_ROPE:
        case GGML_OP_ROPE_BACK:
            return check_rope(node);
        case GGML_OP_FLASH_ATTN_EXT:
            return check_flash_attn_ext(node);
        case GGML_OP_UNARY:
            return check_unary(node);
        case GGML_OP_GLU:
            return check_glu(node);
        case GGML_OP_ARGSORT:
            return check_argsort(node);
        case GGML_OP_TOP_K:
            return check_top_k(node);
        case GGML_OP_CROSS_ENTROPY_LOSS:
            return check_cross_entropy_loss(node);
        default:
            // Views (RESHAPE, VIEW, PERMUTE, TRANSPOSE) write nothing and are bounds-checked
            // against their buffer in graph_builder.cpp; the remaining ops, which llama.cpp
            // does not use, get the arity check only.
            return {};
    }
}

}  // namespace

Status validate_node(const ggml_tensor *node) {
    const std::string name = " node '" + printable(node->name) + "': ";
    if (node->op < 0 || node->op >= GGML_OP_COUNT) {
        return error(Code::bad_request, "op " + std::to_string(node->op) + name + "unknown op");
    }
    const char *op = ggml_op_name(node->op);
    const auto refuse = [&](const std::string &why) { return error(Code::bad_request, op + name + why); };

    const int required = required_sources(node->op);
    if (required < 0) return refuse("op is not accepted from a guest");
    for (int i = 0; i < required; ++i) {
        if (node->src[i] == nullptr) {
            return refuse(src_label(i) + " is missing (" + op + " needs " + std::to_string(required) + " sources)");
        }
    }
    int64_t count = 0;
    std::string overlap;
    if (!known_type(node)) return refuse("type " + std::to_string(node->type) + " does not exist");
    if (!element_count(node, &count)) return refuse("the result's element count overflows");
    if (!elements_fit_span(node, &overlap)) return refuse("result " + overlap);
    for (int i = 0; i < GGML_MAX_SRC; ++i) {
        if (node->src[i] == nullptr) continue;
        if (!known_type(node->src[i]))
            return refuse(src_label(i) + " type " + std::to_string(node->src[i]->type) + " does not exist");
        if (!element_count(node->src[i], &count)) return refuse(src_label(i) + "'s element count overflows");
        if (!elements_fit_span(node->src[i], &overlap)) return refuse(src_label(i) + " " + overlap);
    }
    const Why why = check_shapes(node);
    if (!why.empty()) return refuse(why);
    return Status::success();
}

}  // namespace ggml_remote::host
