#include "guest/graph_retry.h"

#include <cstring>
#include <unordered_set>

#include "guest/buffer.h"

namespace ggml_remote::guest {

namespace {

struct Range {
    uintptr_t begin, end;
    bool overlaps(const Range &other) const { return begin < other.end && other.begin < end; }
};

Range range_of(const ggml_tensor *tensor) {
    const auto begin = reinterpret_cast<uintptr_t>(tensor->data);
    return {begin, begin + ggml_nbytes(tensor)};
}

bool in_buffer_of_usage(const ggml_tensor *tensor, bool compute) {
    const RemoteBuffer *owner = remote_buffer_of(tensor);
    if (owner == nullptr || owner->owner == nullptr || tensor->data == nullptr) return false;
    return (ggml_backend_buffer_get_usage(owner->owner) == GGML_BACKEND_BUFFER_USAGE_COMPUTE) == compute;
}

bool only_names_memory(ggml_op op) {
    return op == GGML_OP_NONE || op == GGML_OP_VIEW || op == GGML_OP_RESHAPE || op == GGML_OP_PERMUTE ||
           op == GGML_OP_TRANSPOSE;
}

// The source a plain store (SET_ROWS, CPY) writes into: the one whose bytes the
// node, a view of it, are (ggml's source order differs between the two ops and
// has changed before); -1 for any other op, or when none is.
int destination_source(const ggml_tensor *node) {
    if (node->op != GGML_OP_SET_ROWS && node->op != GGML_OP_CPY) return -1;
    for (int s = 0; s < GGML_MAX_SRC; ++s) {
        const ggml_tensor *source = node->src[s];
        if (source == nullptr || source->data != node->data) continue;
        const ggml_tensor *storage = source->view_src != nullptr ? source->view_src : source;
        if (storage == node->view_src) return s;
    }
    return -1;
}

}  // namespace

void GraphRetry::plan(ggml_cgraph *graph) {
    forget();
    safe_ = true;
    std::vector<Range> persistent_reads;
    std::unordered_set<const ggml_tensor *> inputs_seen;
    const int n_nodes = ggml_graph_n_nodes(graph);
    for (int i = 0; i < n_nodes && safe_; ++i) {
        const ggml_tensor *node = ggml_graph_node(graph, i);
        if (only_names_memory(node->op)) continue;  // a view reads nothing: its users do
        const int destination = destination_source(node);
        for (int s = 0; s < GGML_MAX_SRC; ++s) {
            const ggml_tensor *source = node->src[s];
            if (source == nullptr || s == destination) continue;
            const ggml_tensor *storage = source->view_src != nullptr ? source->view_src : source;
            if (storage->op == GGML_OP_NONE && in_buffer_of_usage(storage, true) &&
                inputs_seen.insert(storage).second) {
                inputs_.push_back({static_cast<uint8_t *>(storage->data), ggml_nbytes(storage)});
            }
            if (in_buffer_of_usage(source, false)) persistent_reads.push_back(range_of(source));
        }
        if (!in_buffer_of_usage(node, false)) continue;
        if (destination < 0) {
            safe_ = false;  // computed in place into persistent memory
            break;
        }
        for (const Range &read : persistent_reads) {
            if (read.overlaps(range_of(node))) safe_ = false;  // read before it was written
        }
    }
    if (!safe_) inputs_.clear();
}

void GraphRetry::save_inputs() {
    saved_.clear();
    for (const Bytes &input : inputs_) saved_.insert(saved_.end(), input.data, input.data + input.size);
}

void GraphRetry::restore_inputs() {
    size_t at = 0;
    for (const Bytes &input : inputs_) {
        std::memcpy(input.data, saved_.data() + at, input.size);
        at += input.size;
    }
}

}  // namespace ggml_remote::guest
