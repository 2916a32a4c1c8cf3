// LastGraph: the last graph a backend encoded, to tell whether the next one is
// the same.
//
// llama.cpp hands over the same decode graph for every token (the same tensors,
// changed only in their data), so a graph whose nodes and tensors are byte for
// byte what they were is named by its slot again without being encoded and
// hashed: encoding a small model's graph costs more than a fifth of its token.
#pragma once

#include <ggml.h>

#include <vector>

#include "guest/session/remote_session.h"

namespace ggml_remote::guest {

class LastGraph {
  public:
    // Whether `graph` is the graph recorded. Safe against tensors freed since:
    // nodes are compared by address first (they are the live graph's), and the
    // other tensors from users to sources, so each is read only after a user of
    // it, unchanged, showed that it is still referenced.
    bool same_as(ggml_cgraph *graph) const;
    // Records `graph`, whose encoding read the tensors `order` (sources first),
    // as sent under `ticket`.
    void record(ggml_cgraph *graph, const std::vector<const ggml_tensor *> &order,
                const RemoteSession::GraphTicket &ticket);
    // Nothing recorded: the next graph is encoded.
    void forget() { valid_ = false; }
    const RemoteSession::GraphTicket &ticket() const { return ticket_; }

    // The graph's first node, as recorded (null when nothing is).
    const ggml_tensor *first_node() const { return valid_ && !nodes_.empty() ? nodes_.front() : nullptr; }

  private:
    bool valid_ = false;
    std::vector<const ggml_tensor *> nodes_;
    std::vector<const ggml_tensor *> tensors_;  // every tensor the encoding read, sources first
    std::vector<ggml_tensor> contents_;         // what they held then
    RemoteSession::GraphTicket ticket_;
};

// The last graphs a backend encoded, a few of them: ggml's meta backend
// (llama.cpp's -sm tensor) hands each server the same sub-graphs, two a layer, in
// turn, every token; one LastGraph would hold only the last of them, and each
// would be encoded and hashed again.
class RecentGraphs {
  public:
    // The record of a graph that is `graph` (LastGraph::same_as), or null.
    const LastGraph *find(ggml_cgraph *graph);
    // Records `graph` (see LastGraph::record), in place of the record with the same
    // first node, else of the least recently used one.
    void record(ggml_cgraph *graph, const std::vector<const ggml_tensor *> &order,
                const RemoteSession::GraphTicket &ticket);
    // The record with `graph`'s first node goes.
    void forget(ggml_cgraph *graph);
    void forget_all() { entries_.clear(); }

  private:
    static constexpr size_t kMaxGraphs = protocol::kGraphSlots;
    struct Entry {
        LastGraph graph;
        uint64_t last_used = 0;
    };
    Entry *entry_for(const ggml_tensor *first_node);
    std::vector<Entry> entries_;
    uint64_t clock_ = 0;
};

}  // namespace ggml_remote::guest
