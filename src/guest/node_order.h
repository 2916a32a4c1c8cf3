// NodeOrder: the order a host backend wants a graph's nodes in (GraphOptimize).
//
// ggml's scheduler lets a backend reorder each graph before it is allocated
// (graph_optimize); ggml-vulkan groups independent nodes for parallelism and
// keeps fusable ones together. Allocation and fusion then follow that order, and
// so do the results: a remote Vulkan device that kept the guest's order computed
// a different whisper transcript than the local one. The host's backend decides
// the order; the guest checks the answer and applies it.
#pragma once

#include <ggml.h>

#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "protocol/commands.h"
#include "protocol/status.h"
#include "protocol/wire.h"

namespace ggml_remote::guest {

struct NodeOrder {
    std::vector<int32_t> nodes;  // for each new place, the node's place in the graph sent
    // (tensor, until) as indexes into the tensor list sent: keep tensor allocated
    // until node `until` has run.
    std::vector<std::pair<int32_t, int32_t>> alloc_deps;
};

// Reads a GraphOptimize reply for a graph of n_nodes nodes and n_tensors list
// entries: the nodes must be a permutation of [0, n_nodes) and every dependency
// within the list, or it is refused (a bad_request status) and nothing applies.
Status parse_node_order(const protocol::GraphOptimize::Reply &reply, protocol::ByteView tail, uint32_t n_nodes,
                        uint32_t n_tensors, NodeOrder *order);

// Puts the graph's nodes in `order` (already checked against this graph).
void apply_node_order(ggml_cgraph *graph, const NodeOrder &order);

// The answers for graphs seen before, by their data-less encoding: llama.cpp
// hands over graphs of the same shapes token after token.
class NodeOrderCache {
  public:
    const NodeOrder *find(const std::string &encoded) const;
    void remember(const std::string &encoded, NodeOrder order);

  private:
    // A few graphs at once (a model's prompt, decode and reserve graphs); shapes
    // that keep changing (whisper's growing decoder) start it over.
    static constexpr size_t kMaxGraphs = 16;
    std::unordered_map<std::string, NodeOrder> orders_;
};

}  // namespace ggml_remote::guest
