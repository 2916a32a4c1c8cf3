#include "guest/last_graph.h"

#include <cstring>

namespace ggml_remote::guest {

bool LastGraph::same_as(ggml_cgraph *graph) const {
    if (!valid_ || static_cast<size_t>(ggml_graph_n_nodes(graph)) != nodes_.size()) return false;
    for (size_t i = 0; i < nodes_.size(); ++i) {
        if (ggml_graph_node(graph, static_cast<int>(i)) != nodes_[i]) return false;
    }
    for (size_t k = tensors_.size(); k-- > 0;) {
        if (std::memcmp(tensors_[k], &contents_[k], sizeof(ggml_tensor)) != 0) return false;
    }
    return true;
}

void LastGraph::record(ggml_cgraph *graph, const std::vector<const ggml_tensor *> &order,
                       const RemoteSession::GraphTicket &ticket) {
    nodes_.resize(static_cast<size_t>(ggml_graph_n_nodes(graph)));
    for (size_t i = 0; i < nodes_.size(); ++i) nodes_[i] = ggml_graph_node(graph, static_cast<int>(i));
    tensors_ = order;
    contents_.resize(order.size());
    for (size_t k = 0; k < order.size(); ++k) std::memcpy(&contents_[k], order[k], sizeof(ggml_tensor));
    ticket_ = ticket;
    valid_ = true;
}

}  // namespace ggml_remote::guest
