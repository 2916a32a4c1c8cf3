// GraphCache: the guest's half of the host's graph slots (see GraphCompute).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "protocol/commands.h"

namespace ggml_remote::guest {

class GraphCache {
  public:
    struct Choice {
        uint32_t slot;
        // kGraphReplay on a hit, kGraphStore on a miss, kGraphRunOnce for a miss
        // that would take the slots past kGraphSlotBytes
        protocol::GraphMode mode;
        uint64_t stamp;  // names what the slot holds now (see holds()); 0 when run once
    };

    // Picks the slot for an encoded graph: the one holding the same bytes, or the
    // least recently used one, which from then on holds these bytes, if the
    // slots' bytes stay within kGraphSlotBytes (the host holds them to it).
    Choice choose(const std::vector<uint8_t> &graph);
    // Whether `slot` still holds the graph `stamp` named (not replaced, not
    // cleared); then it counts as used now.
    bool holds(uint32_t slot, uint64_t stamp);
    // Every slot empty, as on the host after a buffer is freed.
    void clear();

  private:
    struct Slot {
        bool filled = false;
        uint64_t hash = 0;
        uint64_t last_used = 0;
        uint64_t stamp = 0;
        std::vector<uint8_t> bytes;
    };
    std::array<Slot, protocol::kGraphSlots> slots_;
    uint64_t clock_ = 0;
    uint64_t stamps_ = 0;
    uint64_t bytes_held_ = 0;  // of every filled slot, as the host counts them
};

}  // namespace ggml_remote::guest
