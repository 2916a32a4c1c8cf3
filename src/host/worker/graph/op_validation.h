// Per-op validation of a guest's graph nodes: the rules that ggml's own op
// constructors (ggml_add, ggml_mul_mat, ...) assert, checked on the host before a
// kernel ever sees the node.
#pragma once

#include <ggml.h>

#include "protocol/status.h"

namespace ggml_remote::host {

// Checks that `node` has every source its op needs, and that the shapes and types
// of the node and its sources fit the op as ggml's constructor would have made them.
// Constant time per node; a bad_request "<OP> node 'name': why" when they do not.
Status validate_node(const ggml_tensor *node);

// Whether a guest may send `op` at all (it has a rule).
bool op_has_rule(ggml_op op);

// The sources that `op`'s kernel writes in place besides the result, bit i for
// src[i] (the optimizer steps update their moments). The write-set oracle of the
// fuzzers allows exactly these bytes, and the results', to change.
uint32_t sources_written_in_place(ggml_op op);

}  // namespace ggml_remote::host
