#include "guest/graph_cache.h"

#include <cstring>

namespace ggml_remote::guest {

namespace {

// A fast 64-bit hash over 8-byte words; the bytes are compared in full on a match.
uint64_t hash_bytes(const std::vector<uint8_t> &bytes) {
    uint64_t hash = 0x9e3779b97f4a7c15ull ^ bytes.size();
    size_t i = 0;
    for (; i + 8 <= bytes.size(); i += 8) {
        uint64_t word;
        std::memcpy(&word, bytes.data() + i, 8);
        hash = (hash ^ word) * 0xff51afd7ed558ccdull;
        hash ^= hash >> 32;
    }
    for (; i < bytes.size(); ++i) hash = (hash ^ bytes[i]) * 0x100000001b3ull;
    return hash;
}

}  // namespace

GraphCache::Choice GraphCache::choose(const std::vector<uint8_t> &graph) {
    const uint64_t hash = hash_bytes(graph);
    ++clock_;
    uint32_t oldest = 0;
    for (uint32_t i = 0; i < slots_.size(); ++i) {
        Slot &slot = slots_[i];
        if (slot.filled && slot.hash == hash && slot.bytes == graph) {
            slot.last_used = clock_;
            return {i, protocol::kGraphReplay, slot.stamp};
        }
        const Slot &current = slots_[oldest];
        if (!slot.filled || (current.filled && slot.last_used < current.last_used)) oldest = i;
    }
    Slot &slot = slots_[oldest];
    const uint64_t held_after = bytes_held_ - (slot.filled ? slot.bytes.size() : 0) + graph.size();
    if (held_after > protocol::kGraphSlotBytes) return {0, protocol::kGraphRunOnce, 0};
    bytes_held_ = held_after;
    slot.filled = true;
    slot.hash = hash;
    slot.last_used = clock_;
    slot.stamp = ++stamps_;
    slot.bytes = graph;
    return {oldest, protocol::kGraphStore, slot.stamp};
}

bool GraphCache::holds(uint32_t slot, uint64_t stamp) {
    if (slot >= slots_.size() || !slots_[slot].filled || slots_[slot].stamp != stamp) return false;
    slots_[slot].last_used = ++clock_;
    return true;
}

void GraphCache::clear() {
    for (Slot &slot : slots_) {
        slot.filled = false;
        slot.bytes.clear();
    }
    bytes_held_ = 0;
}

}  // namespace ggml_remote::guest
