// Constructor replay: a node is accepted only if ggml's own constructor, called
// with the node's sources and the arguments its op_params encode, makes exactly
// that node (shape, type, strides, op_params, sources).
//
// For the ops llama.cpp rarely uses (convolutions, pooling, padding, the recurrent
// state ops, ...) this takes every assertion ggml makes about them as our rule,
// without restating each one: a failed GGML_ASSERT inside the replay is caught and
// becomes a refusal, so it never reaches a kernel and never aborts the worker.
// Each such op's row in the op table (ops/op_entry.h) names its constructor, and
// the op_params ranges to check before the constructor runs.
#pragma once

#include <ggml.h>

#include <string>

#include "host/worker/graph/ops/op_entry.h"

namespace ggml_remote::host {

// Empty when `make` makes the same node from its arguments; otherwise why not.
std::string replay_constructor(const ggml_tensor *node, ops::Constructor make);

}  // namespace ggml_remote::host
