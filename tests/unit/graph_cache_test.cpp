// GraphCache: the guest's record of what the host keeps in its graph slots.
#include "guest/graph_cache.h"

#include <gtest/gtest.h>

namespace ggml_remote::guest {
namespace {

using protocol::kGraphReplay;
using protocol::kGraphSlots;
using protocol::kGraphStore;

std::vector<uint8_t> graph_bytes(uint8_t tag) { return std::vector<uint8_t>(64, tag); }

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
    for (uint8_t tag = 1; tag < kGraphSlots; ++tag) {
        cache.choose(graph_bytes(tag));
        EXPECT_TRUE(cache.holds(kept.slot, kept.stamp));
    }
    // One more graph evicts the least recently used slot: not the kept one.
    cache.choose(graph_bytes(200));
    EXPECT_TRUE(cache.holds(kept.slot, kept.stamp));
    // Without touching it, enough new graphs evict it, and the ticket is void
    // even though the slot number is reused.
    for (uint8_t tag = 201; tag < 201 + kGraphSlots; ++tag) cache.choose(graph_bytes(tag));
    EXPECT_FALSE(cache.holds(kept.slot, kept.stamp));

    const GraphCache::Choice fresh = cache.choose(graph_bytes(7));
    cache.clear();  // a buffer was freed: the host forgot every graph
    EXPECT_FALSE(cache.holds(fresh.slot, fresh.stamp));
    EXPECT_FALSE(cache.holds(kGraphSlots, fresh.stamp)) << "a slot that does not exist";
}

}  // namespace
}  // namespace ggml_remote::guest
