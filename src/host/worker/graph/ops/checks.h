// The pieces the family files build their rules from: shapes and types compared
// with the reason worded once, and the op_params range check of the replayed ops.
#pragma once

#include <initializer_list>
#include <string>

#include "host/worker/graph/ops/op_entry.h"

namespace ggml_remote::host::ops {

std::string shape_of(const ggml_tensor *t);
std::string src_label(int i);
std::string described(const char *what, const ggml_tensor *t);
// "<OP> node 'name': ", the prefix of every refusal of a node.
std::string node_label(const ggml_tensor *node);

// ggml_nelements without signed overflow (a guest's ne values are up to 2^63 - 1 each,
// and a tensor with zero strides can be that large and still fit its buffer).
bool element_count(const ggml_tensor *t, int64_t *count);
int64_t elements(const ggml_tensor *t);  // -1 when it overflows; validate_node refused those first

// `value` splits evenly into `divisor` parts (ggml writes value % divisor == 0, which
// a zero divisor turns into SIGFPE).
bool divides(int64_t divisor, int64_t value);

bool is_float(ggml_type type);
// Whether a tensor's elements are adjacent along its rows (nb[0] is one element).
bool rows_are_dense(const ggml_tensor *t);
// Whether a result is dense along its rows and neither transposed nor permuted.
bool result_in_order(const ggml_tensor *node);

// The arguments of a replayed constructor: ggml's constructors take non-const
// sources (they only read them) and int or float op_params.
inline ggml_tensor *src(const ggml_tensor *node, int i) { return node->src[i]; }
int32_t param(const ggml_tensor *node, int i);
float float_param(const ggml_tensor *node, int i);

Why result_shape(const ggml_tensor *node, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3);
Why result_type(const ggml_tensor *node, ggml_type type);
Why source_type(const ggml_tensor *node, int i, ggml_type type, ggml_type other = GGML_TYPE_COUNT);
Why same_shape_as_source(const ggml_tensor *node, int i = 0);
Why sources_same_shape(const ggml_tensor *node, int i, int j);
Why same_element_count(const ggml_tensor *node, int i);
// The first reason of several, in order.
Why first(std::initializer_list<Why> reasons);

// Ops whose ggml-cpu kernel asserts that the result and src[0] are contiguous
// (SCALE, GET_ROWS_BACK and SOFT_MAX_BACK among them; DIAG_MASK_*, ACC and SET too).
Why both_contiguous(const ggml_tensor *node);
// Element-wise ops of two same-shaped tensors whose result has their shape
// (SILU_BACK, RMS_NORM_BACK, SOFT_MAX_BACK, CROSS_ENTROPY_LOSS's inputs).
Why check_same_shape_pair(const ggml_tensor *node);

// The op_params that a replayed constructor takes on trust; out of range they
// overflow the constructor's own arithmetic or make kernels loop for ever. Strides,
// dilations and kernel sizes (`positive`) of at least 1, paddings (`non_negative`)
// of at least 0; everything far below the 2^31 where ggml's int arithmetic wraps.
Why params_in_range(const ggml_tensor *node, std::initializer_list<int> positive,
                    std::initializer_list<int> non_negative);

}  // namespace ggml_remote::host::ops
