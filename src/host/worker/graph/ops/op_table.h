// The op table: every op a guest may send, indexed by ggml_op, assembled from the
// family files (ops/*.cpp); and the ops refused on purpose, each with its reason.
// Every op of ggml is one or the other (tests/unit/op_table_test.cpp), so a new
// ggml op is refused until someone writes its row.
#pragma once

#include <string>

#include "host/worker/graph/ops/op_entry.h"

namespace ggml_remote::host::ops {

// The row of `op`, found in constant time; null when the op is refused (or not an op).
const OpEntry *op_entry(ggml_op op);

// Why `op` is refused on purpose; null for an op with a row, or one nobody decided.
const char *refusal_reason(ggml_op op);

// What is wrong with the table itself: an op with two rows, a row for an op that
// does not exist, a layout with a letter other than s, r, c. Empty when nothing.
std::string op_table_problems();

}  // namespace ggml_remote::host::ops
