// GraphSlots: the graphs a session keeps for replay (GraphCompute's slots), and
// the encoded bytes they came in, held to protocol::kGraphSlotBytes in all: more
// slots then cost no more memory than a few large graphs would.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "host/worker/graph/graph_builder.h"
#include "protocol/commands.h"
#include "protocol/status.h"

namespace ggml_remote::host {

class GraphSlots {
  public:
    // The graph in `slot`, or null (empty, or no such slot).
    BuiltTensors *at(uint32_t slot) const { return slot < kept_.size() ? kept_[slot].graph.get() : nullptr; }
    // Empties `slot` (a store that fails leaves it empty: see GraphCompute).
    void clear(uint32_t slot) {
        if (slot >= kept_.size()) return;
        bytes_held_ -= kept_[slot].encoded_bytes;
        kept_[slot] = {};
    }
    // Whether a graph of `encoded_bytes` may go into `slot` (as the guest's
    // GraphCache reckons: the slot's old graph no longer counts).
    Status check_room(uint32_t slot, uint64_t encoded_bytes) const {
        const uint64_t after = bytes_held_ - (slot < kept_.size() ? kept_[slot].encoded_bytes : 0) + encoded_bytes;
        if (after <= protocol::kGraphSlotBytes) return Status::success();
        return error(Code::limit_exceeded, "the graph slots would hold " + std::to_string(after) +
                                               " bytes of graphs, past " + std::to_string(protocol::kGraphSlotBytes));
    }
    // Keeps `graph` in `slot` (check_room first); returns it.
    BuiltTensors *store(uint32_t slot, BuiltTensors graph, uint64_t encoded_bytes) {
        clear(slot);
        kept_[slot] = {std::make_unique<BuiltTensors>(std::move(graph)), encoded_bytes};
        bytes_held_ += encoded_bytes;
        return kept_[slot].graph.get();
    }
    // Every slot empty (a buffer was freed: kept graphs may point into it).
    void clear_all() {
        for (Kept &kept : kept_) kept = {};
        bytes_held_ = 0;
    }

  private:
    struct Kept {
        std::unique_ptr<BuiltTensors> graph;
        uint64_t encoded_bytes = 0;
    };
    std::array<Kept, protocol::kGraphSlots> kept_;
    uint64_t bytes_held_ = 0;
};

}  // namespace ggml_remote::host
