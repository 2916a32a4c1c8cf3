// Views and copies. A view writes nothing (graph_builder.cpp bounds-checks it
// against its buffer); DUP, CPY and CONT walk the source and the result element by
// element, so any layout is safe for them.
#include "host/worker/graph/ops/checks.h"
#include "host/worker/graph/ops/families.h"

namespace ggml_remote::host::ops {
namespace {

// DUP, CPY, CONT: as many elements out as in (and as in the destination, for CPY).
Why check_copy(const ggml_tensor *node) {
    Why why = same_element_count(node, 0);
    if (!why.empty() || node->op != GGML_OP_CPY || node->src[1] == nullptr) return why;
    return same_element_count(node, 1);
}

constexpr OpEntry kEntries[] = {
    view(GGML_OP_NONE, 0),
    view(GGML_OP_VIEW, 1),
    view(GGML_OP_RESHAPE, 1),
    view(GGML_OP_PERMUTE, 1),
    view(GGML_OP_TRANSPOSE, 1),
    ruled(GGML_OP_DUP, 1, "s", check_copy),
    // src[1], the destination, is optional: ggml_cast points it at the node.
    ruled(GGML_OP_CPY, 1, "s", check_copy),
    ruled(GGML_OP_CONT, 1, "s", check_copy),
};

}  // namespace

const OpFamily kViewOps{kEntries};

}  // namespace ggml_remote::host::ops
