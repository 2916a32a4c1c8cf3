// HandleTable: per-session objects named by numbers that are never reused.
#include "host/worker/session/handle_table.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

namespace ggml_remote::host {
namespace {

TEST(HandleTable, FirstHandleIsOneAndHandlesCountUp) {
    HandleTable<std::string> table;
    EXPECT_EQ(table.insert("a"), 1u);
    EXPECT_EQ(table.insert("b"), 2u);
    EXPECT_EQ(table.insert("c"), 3u);
    EXPECT_EQ(table.size(), 3u);
}

TEST(HandleTable, FindReturnsTheInsertedObject) {
    HandleTable<std::string> table;
    const uint64_t a = table.insert("alpha");
    const uint64_t b = table.insert("beta");
    ASSERT_NE(table.find(a), nullptr);
    ASSERT_NE(table.find(b), nullptr);
    EXPECT_EQ(*table.find(a), "alpha");
    EXPECT_EQ(*table.find(b), "beta");
}

TEST(HandleTable, ZeroIsNeverAValidHandle) {
    HandleTable<int> table;
    table.insert(7);
    EXPECT_EQ(table.find(0), nullptr);
    EXPECT_FALSE(table.erase(0));
}

TEST(HandleTable, UnknownHandleFindsNothing) {
    HandleTable<int> table;
    EXPECT_EQ(table.find(1), nullptr);
    table.insert(7);
    EXPECT_EQ(table.find(2), nullptr);
    EXPECT_EQ(table.find(UINT64_MAX), nullptr);
}

TEST(HandleTable, ErasedHandleIsStaleAndFindsNothing) {
    HandleTable<int> table;
    const uint64_t handle = table.insert(7);
    EXPECT_TRUE(table.erase(handle));
    EXPECT_EQ(table.find(handle), nullptr);
    EXPECT_FALSE(table.erase(handle));
    EXPECT_EQ(table.size(), 0u);
}

TEST(HandleTable, HandlesAreNeverReusedAfterErase) {
    HandleTable<int> table;
    const uint64_t first = table.insert(1);
    const uint64_t second = table.insert(2);
    EXPECT_TRUE(table.erase(second));
    EXPECT_TRUE(table.erase(first));
    const uint64_t third = table.insert(3);
    EXPECT_EQ(third, 3u);
    EXPECT_EQ(table.find(first), nullptr);
    EXPECT_EQ(table.find(second), nullptr);
    ASSERT_NE(table.find(third), nullptr);
    EXPECT_EQ(*table.find(third), 3);
}

TEST(HandleTable, ClearDropsEveryObjectButKeepsCounting) {
    HandleTable<int> table;
    table.insert(1);
    table.insert(2);
    table.clear();
    EXPECT_EQ(table.size(), 0u);
    EXPECT_EQ(table.find(1), nullptr);
    EXPECT_EQ(table.insert(3), 3u);
}

TEST(HandleTable, EraseDestroysTheObject) {
    auto alive = std::make_shared<int>(42);
    HandleTable<std::shared_ptr<int>> table;
    const uint64_t handle = table.insert(alive);
    EXPECT_EQ(alive.use_count(), 2);
    table.erase(handle);
    EXPECT_EQ(alive.use_count(), 1);
}

TEST(HandleTable, HoldsMoveOnlyObjects) {
    HandleTable<std::unique_ptr<int>> unique_table;
    const uint64_t unique_handle = unique_table.insert(std::make_unique<int>(5));
    ASSERT_NE(unique_table.find(unique_handle), nullptr);
    EXPECT_EQ(**unique_table.find(unique_handle), 5);
}

TEST(HandleTable, IterationVisitsHandlesInAscendingOrder) {
    HandleTable<char> table;
    table.insert('a');
    table.insert('b');
    table.insert('c');
    table.erase(2);
    std::string seen;
    for (auto &entry : table) seen += std::to_string(entry.first) + entry.second;
    EXPECT_EQ(seen, "1a3c");
}

}  // namespace
}  // namespace ggml_remote::host
