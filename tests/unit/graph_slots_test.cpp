// GraphSlots: the host's kept graphs, held to kGraphSlotBytes of encoded graphs.
#include "host/worker/session/graph_slots.h"

#include <gtest/gtest.h>

namespace ggml_remote::host {
namespace {

using protocol::kGraphSlotBytes;
using protocol::kGraphSlots;

TEST(GraphSlots, AStorePastTheSlotsBytesIsRefused) {
    GraphSlots slots;
    const uint64_t half = kGraphSlotBytes / 2 + 1;
    ASSERT_TRUE(slots.check_room(0, half).ok());
    EXPECT_NE(slots.store(0, BuiltTensors{}, half), nullptr);
    const Status refused = slots.check_room(1, half);
    EXPECT_EQ(refused.code(), Code::limit_exceeded);
    EXPECT_NE(refused.message().find("graph slots"), std::string::npos) << refused.message();
    EXPECT_TRUE(slots.check_room(0, half).ok()) << "replacing a slot's graph frees its bytes";
    EXPECT_TRUE(slots.check_room(kGraphSlots - 1, kGraphSlotBytes - half).ok());
}

TEST(GraphSlots, ClearedSlotsHoldNothingAndCountNoBytes) {
    GraphSlots slots;
    (void)slots.store(3, BuiltTensors{}, kGraphSlotBytes);
    EXPECT_NE(slots.at(3), nullptr);
    EXPECT_FALSE(slots.check_room(4, 1).ok());
    slots.clear(3);
    EXPECT_EQ(slots.at(3), nullptr);
    EXPECT_TRUE(slots.check_room(4, kGraphSlotBytes).ok());
    (void)slots.store(5, BuiltTensors{}, kGraphSlotBytes);
    slots.clear_all();
    EXPECT_EQ(slots.at(5), nullptr);
    EXPECT_TRUE(slots.check_room(6, kGraphSlotBytes).ok());
    EXPECT_EQ(slots.at(kGraphSlots), nullptr) << "a slot that does not exist";
}

}  // namespace
}  // namespace ggml_remote::host
