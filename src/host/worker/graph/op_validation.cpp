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
// Not checked here, because they are tensor data that exists only at compute time:
// the row ids of GET_ROWS, SET_ROWS, GET_ROWS_BACK, ADD_ID and MUL_MAT_ID, the
// sequence ids of SSM_SCAN. index_guard.h checks them, in a private copy that the
// kernel then reads, before each compute (or between segments of it).
#include "host/worker/graph/op_validation.h"

#include "host/worker/graph/op_replay.h"
#include "protocol/printable.h"
#include "protocol/tensor_codec.h"

#include <ggml-backend.h>

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
    uint64_t span = 0, dense = ggml_type_size(t->type);
    bool overflow = !protocol::tensor_byte_span(t, &span);
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

// Ops whose ggml-cpu kernel asserts that the result and src[0] are contiguous
// (SCALE, GET_ROWS_BACK and SOFT_MAX_BACK among them; DIAG_MASK_*, ACC and SET too).
Why both_contiguous(const ggml_tensor *node) {
    if (!ggml_is_contiguous(node)) return "the result is not contiguous";
    if (!ggml_is_contiguous(node->src[0])) return "src[0] is not contiguous";
    return {};
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

Why check_diag(const ggml_tensor *node) {
    const ggml_tensor *a = node->src[0];
    if (a->ne[1] != 1) return described("src[0]", a) + " is not a row";
    return result_shape(node, a->ne[0], a->ne[0], a->ne[2], a->ne[3]);
}

// SOFT_MAX and FLASH_ATTN_EXT: ALiBi (op_params[1], max_bias > 0) needs the mask,
// the source before the sinks; the sinks are one F32 value per head of `heads`.
Why bias_and_sinks(const ggml_tensor *node, int sinks_index, const char *what, const ggml_tensor *heads) {
    float max_bias = 0.0f;
    std::memcpy(&max_bias, &node->op_params[1], sizeof(max_bias));
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

// ROPE, ROPE_BACK: op_params = {n_past, n_dims, mode, n_ctx, n_ctx_orig, 6 floats,
// 4 mrope sections, n_offs}. Beyond ggml's own asserts, ggml-cpu divides by the
// sum of the sections, writes rows in pairs of elements, and reads ne[0] / 2
// frequency factors however few n_dims asks for.
Why check_rope_mode(const ggml_tensor *node) {
    const ggml_tensor *a = node->src[0];
    const int32_t n_dims = node->op_params[1], mode = node->op_params[2], n_offs = node->op_params[15];
    switch (mode) {
        case GGML_ROPE_TYPE_NORMAL:
        case GGML_ROPE_TYPE_NEOX:
        case GGML_ROPE_TYPE_MROPE:
        case GGML_ROPE_TYPE_IMROPE:
        case GGML_ROPE_TYPE_VISION:
            break;
        default:
            return "mode " + std::to_string(mode) + " is not supported";
    }
    // n_dims = 0 makes ggml-cpu's loop over the unrotated pairs step back for ever
    // (found by the session fuzzer).
    if (n_dims <= 0 || n_dims % 2 != 0 || n_offs < 0 || n_offs % 2 != 0 || int64_t(n_dims) + n_offs > a->ne[0]) {
        return "n_dims " + std::to_string(n_dims) + " at offset " + std::to_string(n_offs) + " does not fit " +
               described("src[0]", a);
    }
    if (mode == GGML_ROPE_TYPE_VISION && (int64_t(n_dims) * 2 != a->ne[0] || n_offs != 0)) {
        return "vision rope needs n_dims = ne[0] / 2 and no offset";
    }
    if ((mode & GGML_ROPE_TYPE_MROPE) == 0) return {};
    int64_t section_sum = 0;
    for (int i = 11; i < 15; ++i) {
        if (node->op_params[i] < 0) return "negative rope section " + std::to_string(node->op_params[i]);
        section_sum += node->op_params[i];
    }
    if (section_sum == 0 || section_sum > a->ne[0]) {
        return "rope sections adding up to " + std::to_string(section_sum) + " do not fit " + described("src[0]", a);
    }
    return {};
}

// Whether `count` elements of `t`, read as one dense array from its first byte,
// stay inside its buffer (the bytes past the tensor are the guest's own).
bool dense_read_fits_buffer(const ggml_tensor *t, int64_t count) {
    if (!ggml_is_contiguous(t)) return false;
    // A shape-only query (supports_op) is never computed; a compute checks again.
    if (t->buffer == nullptr || t->data == nullptr) return true;
    const auto *base = static_cast<const char *>(ggml_backend_buffer_get_base(t->buffer));
    const uint64_t offset = static_cast<uint64_t>(static_cast<const char *>(t->data) - base);
    const uint64_t bytes = static_cast<uint64_t>(count) * ggml_type_size(t->type);
    return offset <= ggml_backend_buffer_get_size(t->buffer) && bytes <= ggml_backend_buffer_get_size(t->buffer) - offset;
}

Why check_rope(const ggml_tensor *node) {
    const ggml_tensor *a = node->src[0], *positions = node->src[1], *factors = node->src[2];
    Why why = first({source_type(node, 0, GGML_TYPE_F32, GGML_TYPE_F16), source_type(node, 1, GGML_TYPE_I32),
                     result_type(node, a->type), check_rope_mode(node)});
    if (!why.empty()) return why;
    if (a->ne[0] % 2 != 0) return described("src[0]", a) + " has an odd row length";
    if (!rows_are_dense(a) || !rows_are_dense(node)) return "src[0] or the result has rows that are not dense";
    const int64_t per_token = (node->op_params[2] & GGML_ROPE_TYPE_MROPE) != 0 ? 4 : 1;  // mrope: 4 positions
    if (!ggml_is_vector(positions) || positions->ne[0] / per_token != a->ne[2] || positions->ne[0] % per_token != 0) {
        return "positions " + shape_of(positions) + " do not fit " + described("src[0]", a) + " (" +
               std::to_string(per_token) + " per row of dim 2)";
    }
    if (factors != nullptr) {
        why = source_type(node, 2, GGML_TYPE_F32);
        if (!why.empty()) return why;
        if (factors->ne[0] < node->op_params[1] / 2 || !dense_read_fits_buffer(factors, a->ne[0] / 2)) {
            return "frequency factors " + shape_of(factors) + " are fewer than ne[0] / 2 within their buffer";
        }
    }
    return same_shape_as_source(node);
}

// FLASH_ATTN_EXT: q [d_k, n_q, n_head, n_seq], k [d_k, n_kv, n_head_kv, n_seq],
// v [d_v, n_kv, n_head_kv, n_seq], mask [>= n_kv, >= n_q, ...] -> [d_v, n_head, n_q, n_seq].
Why check_flash_attn_ext(const ggml_tensor *node) {
    const ggml_tensor *q = node->src[0], *k = node->src[1], *v = node->src[2], *mask = node->src[3];
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
    return first({bias_and_sinks(node, 4, "q", q), result_shape(node, v->ne[0], q->ne[2], q->ne[1], q->ne[3]), result_type(node, GGML_TYPE_F32)});
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

Why same_shape_as_source_0(const ggml_tensor *node) { return same_shape_as_source(node); }

// A float of op_params that ggml-cpu asserts is >= 0 (NaN is not).
Why non_negative_float_param(const ggml_tensor *node, int index, const char *what) {
    float value = 0.0f;
    std::memcpy(&value, &node->op_params[index], sizeof(value));
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

Why check_scale(const ggml_tensor *node) { return first({both_contiguous(node), same_shape_as_source(node)}); }

Why check_diag_mask(const ggml_tensor *node) {  // op_params = {n_past}, which ggml-cpu asserts >= 0
    if (node->op_params[0] < 0) return "n_past " + std::to_string(node->op_params[0]) + " is negative";
    return first({both_contiguous(node), same_shape_as_source(node)});
}

Why check_soft_max_back(const ggml_tensor *node) {
    float max_bias = 0.0f;  // op_params = {scale, max_bias}; ggml-cpu asserts max_bias == 0
    std::memcpy(&max_bias, &node->op_params[1], sizeof(max_bias));
    if (max_bias != 0.0f) return "max_bias must be 0";
    if (!ggml_is_contiguous(node->src[1])) return "src[1] is not contiguous";
    return first({both_contiguous(node), check_same_shape_pair(node)});
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

Why check_cross_entropy_loss(const ggml_tensor *node) {
    if (elements(node) != 1) return described("result", node) + " should be a scalar";
    return sources_same_shape(node, 0, 1);
}

Why check_view(const ggml_tensor *) {
    return {};  // writes nothing; graph_builder.cpp bounds-checks it against its buffer
}

Why check_by_replay(const ggml_tensor *node) { return replay_constructor(node); }

// RWKV_WKV6, RWKV_WKV7, GATED_LINEAR_ATTN: ggml-cpu's vector loops step through a
// head in whole groups of SIMD registers (64 floats on AVX-512), so a head of 4 or
// 16 floats, which the constructor accepts, makes RWKV_WKV7 write past the result
// (found by the write-set oracle). Models use heads of 64.
Why check_recurrent_heads(const ggml_tensor *node) {
    Why why = replay_constructor(node);
    if (!why.empty()) return why;
    const int64_t head_size = node->op == GGML_OP_RWKV_WKV7 ? node->src[2]->ne[0] : node->src[0]->ne[0];
    if (head_size % 64 != 0) return "head size " + std::to_string(head_size) + " is not a multiple of 64";
    return {};
}

// GATED_DELTA_NET: ggml-cpu divides v's sequences and heads among q's and k's.
Why check_gated_delta_net(const ggml_tensor *node) {
    Why why = replay_constructor(node);
    if (!why.empty()) return why;
    const ggml_tensor *q = node->src[0], *k = node->src[1], *v = node->src[2];
    if (!ggml_are_same_shape(q, k) || q->ne[2] != v->ne[2] || !divides(q->ne[1], v->ne[1]) ||
        !divides(q->ne[3], v->ne[3])) {
        return described("q", q) + " and " + described("k", k) + " do not broadcast over " + described("v", v);
    }
    return {};
}

// CONV_2D_DW: ggml-cpu computes a dense kernel over an input that is either
// contiguous or channels-first contiguous (CWHN), and aborts on anything else.
Why check_conv_2d_dw(const ggml_tensor *node) {
    Why why = replay_constructor(node);
    if (!why.empty()) return why;
    const ggml_tensor *kernel = node->src[0], *input = node->src[1];
    const size_t element = ggml_type_size(kernel->type);
    // The CWHN kernel: channels (dim 3) innermost, then x, then y.
    const bool cwhn_kernel = kernel->nb[3] == element && kernel->nb[0] == size_t(kernel->ne[3]) * element &&
                             kernel->nb[1] == kernel->nb[0] * size_t(kernel->ne[0]);
    if (!ggml_is_contiguous(kernel) && !cwhn_kernel) return "the kernel is neither contiguous nor CWHN";
    if (!ggml_is_contiguous(input) && !ggml_is_contiguous_channels(input)) return "the input is neither WHCN nor CWHN";
    return {};
}

// FLASH_ATTN_EXT: ggml-cpu copies each result row as nb[1] bytes, so the result
// must be exactly as dense as ggml makes it.
Why check_attention(const ggml_tensor *node) {
    if (!ggml_is_contiguous(node)) return "the result is not contiguous";
    return check_flash_attn_ext(node);
}

// Every op a guest may send, once: its sources (src[0] to src[sources - 1] must be
// there; optional ones are checked by the rule when present), the rule for its
// shapes, types and op_params, and the sources its kernel writes in place besides
// the result. An op without a row is refused, and supports_op says no to it.
struct OpRule {
    ggml_op op;
    int sources;
    Why (*check)(const ggml_tensor *node);
    uint32_t written_sources;  // bit i: the kernel also writes src[i]
    // The tensors whose elements the kernel walks one by one through every stride
    // (bit i: src[i]; kResultStrided: the result). The others it walks as rows of
    // adjacent elements, and ggml-cpu asserts that their rows are dense: a node
    // whose rows are not is refused here instead.
    uint32_t strided = 0;
};

constexpr uint32_t kResultStrided = 1u << 31;
constexpr uint32_t kAllStrided = ~0u;

constexpr OpRule kOpRules[] = {
    // Views and element-wise ops.
    {GGML_OP_NONE, 0, check_view, 0, kAllStrided},
    {GGML_OP_VIEW, 1, check_view, 0, kAllStrided},
    {GGML_OP_RESHAPE, 1, check_view, 0, kAllStrided},
    {GGML_OP_PERMUTE, 1, check_view, 0, kAllStrided},
    {GGML_OP_TRANSPOSE, 1, check_view, 0, kAllStrided},
    {GGML_OP_DUP, 1, check_copy, 0, kAllStrided},
    {GGML_OP_CPY, 1, check_copy, 0, kAllStrided},  // src[1], the destination, is optional: ggml_cast points it at the node
    {GGML_OP_CONT, 1, check_copy, 0, kAllStrided},
    {GGML_OP_ADD, 2, check_binary, 0, 1u << 1},  // check_binary_kernel: src[1]
    {GGML_OP_SUB, 2, check_binary, 0, 1u << 1},  // check_binary_kernel: src[1]
    {GGML_OP_MUL, 2, check_binary, 0, 1u << 1},  // check_binary_kernel: src[1]
    {GGML_OP_DIV, 2, check_binary, 0, 1u << 1},  // check_binary_kernel: src[1]
    {GGML_OP_ADD_ID, 3, check_add_id, 0},
    {GGML_OP_ADD1, 2, check_add1, 0},
    {GGML_OP_ACC, 2, check_set_or_acc, 0},
    {GGML_OP_SET, 2, check_set_or_acc, 0},
    {GGML_OP_SQR, 1, same_shape_as_source_0, 0},
    {GGML_OP_SQRT, 1, same_shape_as_source_0, 0},
    {GGML_OP_LOG, 1, same_shape_as_source_0, 0},
    {GGML_OP_SIN, 1, same_shape_as_source_0, 0},
    {GGML_OP_COS, 1, same_shape_as_source_0, 0},
    {GGML_OP_CUMSUM, 1, same_shape_as_source_0, 0},
    {GGML_OP_NORM, 1, check_norm, 0, 1u << 0},
    {GGML_OP_RMS_NORM, 1, check_norm, 0},
    {GGML_OP_GROUP_NORM, 1, check_norm, 0},
    {GGML_OP_L2_NORM, 1, check_norm, 0, 1u << 0},
    {GGML_OP_SCALE, 1, check_scale, 0},
    {GGML_OP_DIAG_MASK_INF, 1, check_diag_mask, 0},
    {GGML_OP_DIAG_MASK_ZERO, 1, check_diag_mask, 0},
    {GGML_OP_CLAMP, 1, same_shape_as_source_0, 0},
    {GGML_OP_LEAKY_RELU, 1, same_shape_as_source_0, 0},
    {GGML_OP_TRI, 1, check_by_replay, 0},
    {GGML_OP_FILL, 1, same_shape_as_source_0, 0},
    {GGML_OP_UNARY, 1, check_unary, 0},
    {GGML_OP_GLU, 1, check_glu, 0},  // src[1] is optional: the split form of the gated unit
    // Reductions, rearrangements.
    {GGML_OP_SUM, 1, check_sum, 0, 1u << 0},
    {GGML_OP_SUM_ROWS, 1, check_reduce_rows, 0},
    {GGML_OP_MEAN, 1, check_reduce_rows, 0},
    {GGML_OP_ARGMAX, 1, check_argmax, 0},
    {GGML_OP_COUNT_EQUAL, 2, check_count_equal, 0},
    {GGML_OP_REPEAT, 1, check_repeat, 0},
    {GGML_OP_REPEAT_BACK, 1, check_repeat_back, 0},
    {GGML_OP_CONCAT, 2, check_concat, 0},
    {GGML_OP_ARGSORT, 1, check_argsort, 0},
    {GGML_OP_TOP_K, 1, check_top_k, 0},
    {GGML_OP_DIAG, 1, check_diag, 0},
    {GGML_OP_GET_ROWS, 2, check_get_rows, 0},
    {GGML_OP_GET_ROWS_BACK, 2, check_get_rows_back, 0},
    {GGML_OP_SET_ROWS, 2, check_set_rows, 0},  // src[2], the destination, is optional (older ggml)
    // Matrix products and attention.
    {GGML_OP_MUL_MAT, 2, check_mul_mat, 0},
    {GGML_OP_MUL_MAT_ID, 3, check_mul_mat_id, 0},
    {GGML_OP_OUT_PROD, 2, check_out_prod, 0},
    {GGML_OP_SOFT_MAX, 1, check_soft_max, 0},  // src[1] mask and src[2] sinks are optional
    {GGML_OP_ROPE, 2, check_rope, 0},          // src[2] frequency factors are optional
    {GGML_OP_ROPE_BACK, 2, check_rope, 0},
    {GGML_OP_FLASH_ATTN_EXT, 3, check_attention, 0},  // src[3] mask and src[4] sinks are optional
    // Training.
    {GGML_OP_SILU_BACK, 2, check_same_shape_pair, 0},
    {GGML_OP_RMS_NORM_BACK, 2, check_norm, 0},
    {GGML_OP_SOFT_MAX_BACK, 2, check_soft_max_back, 0},
    {GGML_OP_CROSS_ENTROPY_LOSS, 2, check_cross_entropy_loss, 0},
    {GGML_OP_CROSS_ENTROPY_LOSS_BACK, 3, check_by_replay, 0},
    {GGML_OP_OPT_STEP_ADAMW, 5, check_by_replay, (1u << 2) | (1u << 3)},  // the moments m and v
    {GGML_OP_OPT_STEP_SGD, 3, check_by_replay, 0},
    // Everything else llama.cpp, whisper.cpp and test-backend-ops use: checked by
    // replaying ggml's own constructor (op_replay.h).
    {GGML_OP_ARANGE, 0, check_by_replay, 0},
    {GGML_OP_TIMESTEP_EMBEDDING, 1, check_by_replay, 0},
    {GGML_OP_CONV_TRANSPOSE_1D, 2, check_by_replay, 0},
    {GGML_OP_CONV_TRANSPOSE_2D, 2, check_by_replay, 0},
    {GGML_OP_IM2COL, 2, check_by_replay, 0},
    {GGML_OP_IM2COL_3D, 2, check_by_replay, 0},
    {GGML_OP_CONV_2D, 2, check_by_replay, 0, kAllStrided},
    {GGML_OP_CONV_2D_DW, 2, check_conv_2d_dw, 0, kAllStrided},
    {GGML_OP_CONV_3D, 2, check_by_replay, 0},
    {GGML_OP_COL2IM_1D, 1, check_by_replay, 0},
    {GGML_OP_POOL_1D, 1, check_by_replay, 0},
    {GGML_OP_POOL_2D, 1, check_by_replay, 0},
    {GGML_OP_UPSCALE, 1, check_by_replay, 0, kAllStrided},
    {GGML_OP_PAD, 1, check_by_replay, 0, kAllStrided},
    {GGML_OP_PAD_REFLECT_1D, 1, check_by_replay, 0},
    {GGML_OP_ROLL, 1, check_by_replay, 0, kAllStrided},
    {GGML_OP_SSM_CONV, 2, check_by_replay, 0},
    {GGML_OP_SSM_SCAN, 7, check_by_replay, 0},
    {GGML_OP_RWKV_WKV6, 6, check_recurrent_heads, 0},
    {GGML_OP_RWKV_WKV7, 7, check_recurrent_heads, 0},
    {GGML_OP_GATED_LINEAR_ATTN, 5, check_recurrent_heads, 0},
    {GGML_OP_GATED_DELTA_NET, 6, check_gated_delta_net, 0},
    {GGML_OP_SOLVE_TRI, 2, check_by_replay, 0},
    {GGML_OP_LIGHTNING_INDEXER, 4, check_by_replay, 0},
    {GGML_OP_DSV4_HC_COMB, 3, check_by_replay, 0},
    {GGML_OP_DSV4_HC_PRE, 2, check_by_replay, 0},
    {GGML_OP_DSV4_HC_POST, 3, check_by_replay, 0},  // src[3] (comb) is optional: left out for the identity mix
};
// Not in the table, so refused: the custom ops (their function pointers would be
// the guest's addresses), and ops no application we serve sends (WIN_PART,
// WIN_UNPART, GET_REL_POS, ADD_REL_POS, IM2COL_BACK, POOL_2D_BACK, FLASH_ATTN_BACK).

const OpRule *rule_for(ggml_op op) {
    for (const OpRule &rule : kOpRules) {
        if (rule.op == op) return &rule;
    }
    return nullptr;
}
}  // namespace

bool op_has_rule(ggml_op op) { return rule_for(op) != nullptr; }

uint32_t sources_written_in_place(ggml_op op) {
    const OpRule *rule = rule_for(op);
    return rule == nullptr ? 0 : rule->written_sources;
}

Status validate_node(const ggml_tensor *node) {
    const std::string name = " node '" + printable(node->name) + "': ";
    // Read as a number: an id outside the enum is not a value of ggml_op.
    static_assert(sizeof(ggml_op) == sizeof(int32_t), "op ids are 32-bit on the wire");
    int32_t op_id;
    std::memcpy(&op_id, &node->op, sizeof op_id);
    if (op_id < 0 || op_id >= GGML_OP_COUNT) {
        return error(Code::bad_request, "op " + std::to_string(op_id) + name + "unknown op");
    }
    const char *op = ggml_op_name(node->op);
    const auto refuse = [&](const std::string &why) { return error(Code::bad_request, op + name + why); };

    const OpRule *rule = rule_for(node->op);
    if (rule == nullptr) return refuse("op is not accepted from a guest");
    const int required = rule->sources;
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
    if ((rule->strided & kResultStrided) == 0 && !rows_are_dense(node)) return refuse("the result's rows are not dense");
    for (int i = 0; i < GGML_MAX_SRC; ++i) {
        if (node->src[i] != nullptr && ((rule->strided >> i) & 1u) == 0 && !rows_are_dense(node->src[i])) {
            return refuse(src_label(i) + " rows are not dense");
        }
    }
    const Why why = rule->check(node);
    if (!why.empty()) return refuse(why);
    return Status::success();
}

}  // namespace ggml_remote::host
