#include "guest/last_graph.h"

#include <algorithm>
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

const ggml_tensor *first_node_of(ggml_cgraph *graph) {
    return ggml_graph_n_nodes(graph) > 0 ? ggml_graph_node(graph, 0) : nullptr;
}

RecentGraphs::Entry *RecentGraphs::entry_for(const ggml_tensor *first_node) {
    for (Entry &entry : entries_) {
        if (first_node != nullptr && entry.graph.first_node() == first_node) return &entry;
    }
    return nullptr;
}

const LastGraph *RecentGraphs::find(ggml_cgraph *graph) {
    Entry *entry = entry_for(first_node_of(graph));
    if (entry == nullptr || !entry->graph.same_as(graph)) return nullptr;
    entry->last_used = ++clock_;
    return &entry->graph;
}

void RecentGraphs::record(ggml_cgraph *graph, const std::vector<const ggml_tensor *> &order,
                          const RemoteSession::GraphTicket &ticket) {
    Entry *entry = entry_for(first_node_of(graph));
    if (entry == nullptr && entries_.size() < kMaxGraphs) entry = &entries_.emplace_back();
    if (entry == nullptr) {
        entry = &*std::min_element(entries_.begin(), entries_.end(),
                                   [](const Entry &a, const Entry &b) { return a.last_used < b.last_used; });
    }
    entry->graph.record(graph, order, ticket);
    entry->last_used = ++clock_;
}

void RecentGraphs::forget(ggml_cgraph *graph) {
    if (Entry *entry = entry_for(first_node_of(graph))) entry->graph.forget();
}

}  // namespace ggml_remote::guest
