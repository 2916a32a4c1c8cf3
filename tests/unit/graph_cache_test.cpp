// GraphCache: the guest's record of what the host keeps in its graph slots.
#include "guest/graph_cache.h"

#include <gtest/gtest.h>

namespace ggml_remote::guest {
namespace {

using protocol::kGraphReplay;
using protocol::kGraphRunOnce;
using protocol::kGraphSlotBytes;
using protocol::kGraphSlots;
using protocol::kGraphStore;

// 64 bytes that differ for each tag.
std::vector<uint8_t> graph_bytes(uint32_t tag) {
    std::vector<uint8_t> bytes(64, 0);
    for (size_t i = 0; i < sizeof(tag); ++i) bytes[i] = static_cast<uint8_t>(tag >> (8 * i));
    return bytes;
}

TEST(GraphCache, TheSameBytesAreReplayedFromTheSlotTheyWereStoredIn) {
    GraphCache cache;
    const GraphCache::Choice first = cache.choose(graph_bytes(1));
    EXPECT_EQ(first.mode, kGraphStore);
    const GraphCache::Choice again = cache.choose(graph_bytes(1));
    EXPECT_EQ(again.mode, kGraphReplay);
    EXPECT_EQ(again.slot, first.slot);
    EXPECT_EQ(again.stamp, first.stamp);
}

TEST(GraphCache, ATicketHoldsUntilItsSlotIsReusedOrCleared) {
    GraphCache cache;
    const GraphCache::Choice kept = cache.choose(graph_bytes(0));
    EXPECT_TRUE(cache.holds(kept.slot, kept.stamp));
    // Fill every other slot, touching the kept one so it stays the most recent.
    for (uint32_t tag = 1; tag < kGraphSlots; ++tag) {
        cache.choose(graph_bytes(tag));
        EXPECT_TRUE(cache.holds(kept.slot, kept.stamp));
    }
    // One more graph evicts the least recently used slot: not the kept one.
    cache.choose(graph_bytes(1000));
    EXPECT_TRUE(cache.holds(kept.slot, kept.stamp));
    // Without touching it, enough new graphs evict it, and the ticket is void
    // even though the slot number is reused.
    for (uint32_t tag = 1001; tag < 1001 + kGraphSlots; ++tag) cache.choose(graph_bytes(tag));
    EXPECT_FALSE(cache.holds(kept.slot, kept.stamp));

    const GraphCache::Choice fresh = cache.choose(graph_bytes(7));
    cache.clear();  // a buffer was freed: the host forgot every graph
    EXPECT_FALSE(cache.holds(fresh.slot, fresh.stamp));
    EXPECT_FALSE(cache.holds(kGraphSlots, fresh.stamp)) << "a slot that does not exist";
}

TEST(GraphCache, AGraphThatWouldTakeTheSlotsPastTheirBytesRunsOnce) {
    GraphCache cache;
    const std::vector<uint8_t> half(kGraphSlotBytes / 2 + 1, 1);
    EXPECT_EQ(cache.choose(half).mode, kGraphStore);
    std::vector<uint8_t> other = half;
    other[0] = 2;
    const GraphCache::Choice once = cache.choose(other);
    EXPECT_EQ(once.mode, kGraphRunOnce) << "the host refuses a store past kGraphSlotBytes";
    EXPECT_FALSE(cache.holds(once.slot, once.stamp));
    EXPECT_EQ(cache.choose(half).mode, kGraphReplay) << "the kept graph stays";
    EXPECT_EQ(cache.choose(graph_bytes(3)).mode, kGraphStore) << "a small graph still fits";
    cache.clear();
    EXPECT_EQ(cache.choose(other).mode, kGraphStore) << "cleared slots hold no bytes";
}

}  // namespace
}  // namespace ggml_remote::guest
