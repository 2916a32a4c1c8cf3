#include "guest/node_order.h"

namespace ggml_remote::guest {

using namespace protocol;

Status parse_node_order(const GraphOptimize::Reply &reply, ByteView tail, uint32_t n_nodes, uint32_t n_tensors,
                        NodeOrder *order) {
    if (reply.n_nodes != n_nodes) {
        return Status(Code::bad_request, "graph_optimize: the host ordered " + std::to_string(reply.n_nodes) +
                                             " nodes of " + std::to_string(n_nodes));
    }
    const uint64_t expected = (uint64_t{reply.n_nodes} + 2 * uint64_t{reply.n_alloc_deps}) * sizeof(int32_t);
    if (tail.size != expected) return Status(Code::bad_request, "graph_optimize: the reply's size is wrong");
    NodeOrder parsed;
    std::vector<bool> placed(n_nodes, false);
    size_t offset = 0;
    for (uint32_t i = 0; i < n_nodes; ++i, offset += sizeof(int32_t)) {
        int32_t node = -1;
        (void)read_pod(tail, offset, &node);
        if (node < 0 || static_cast<uint32_t>(node) >= n_nodes || placed[node]) {
            return Status(Code::bad_request, "graph_optimize: the new order is no permutation of the nodes");
        }
        placed[node] = true;
        parsed.nodes.push_back(node);
    }
    for (uint32_t i = 0; i < reply.n_alloc_deps; ++i, offset += 2 * sizeof(int32_t)) {
        int32_t tensor = -1, until = -1;
        (void)read_pod(tail, offset, &tensor);
        (void)read_pod(tail, offset + sizeof(int32_t), &until);
        if (tensor < 0 || until < 0 || static_cast<uint32_t>(tensor) >= n_tensors ||
            static_cast<uint32_t>(until) >= n_tensors) {
            return Status(Code::bad_request, "graph_optimize: an allocation dependency names no tensor sent");
        }
        parsed.alloc_deps.emplace_back(tensor, until);
    }
    *order = std::move(parsed);
    return Status::success();
}

void apply_node_order(ggml_cgraph *graph, const NodeOrder &order) {
    ggml_tensor **nodes = ggml_graph_nodes(graph);
    const std::vector<ggml_tensor *> original(nodes, nodes + order.nodes.size());
    for (size_t i = 0; i < order.nodes.size(); ++i) nodes[i] = original[order.nodes[i]];
}

const NodeOrder *NodeOrderCache::find(const std::string &encoded) const {
    auto found = orders_.find(encoded);
    return found != orders_.end() ? &found->second : nullptr;
}

void NodeOrderCache::remember(const std::string &encoded, NodeOrder order) {
    if (orders_.size() >= kMaxGraphs) orders_.clear();
    orders_[encoded] = std::move(order);
}

}  // namespace ggml_remote::guest
