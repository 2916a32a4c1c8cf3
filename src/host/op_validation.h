// Per-op validation of a guest's graph nodes: the rules that ggml's own op
// constructors (ggml_add, ggml_mul_mat, ...) assert, checked on the host before a
// kernel ever sees the node.
#pragma once

#include "protocol/status.h"

#include <ggml.h>

namespace ggml_remote::host {

// Checks that `node` has every source its op needs, and that the shapes and types
// of the node and its sources fit the op as ggml's constructor would have made them.
// Constant time per node; a bad_request "<OP> node 'name': why" when they do not.
Status validate_node(const ggml_tensor *node);

}  // namespace ggml_remote::host
