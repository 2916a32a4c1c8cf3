// RegionHeap: an ivshmem region's heap, kept by the host: aligned ranges, first
// fit, merged when given back, and nothing but its own ranges taken back.
#include "host/worker/session/region_heap.h"

#include <gtest/gtest.h>

namespace ggml_remote::host {
namespace {

constexpr uint64_t kPage = 4096;

TEST(RegionHeap, HandsOutAlignedRangesInsideTheHeap) {
    RegionHeap heap(4 * kPage + 100, 16 * kPage, kPage);
    EXPECT_EQ(heap.size(), 15 * kPage);  // the unaligned head and tail are left out
    uint64_t a = 0, b = 0;
    ASSERT_TRUE(heap.allocate(1, &a).ok());
    ASSERT_TRUE(heap.allocate(kPage + 1, &b).ok());
    EXPECT_EQ(a, 5 * kPage);
    EXPECT_EQ(b, 6 * kPage);
    EXPECT_EQ(heap.bytes_free(), 12 * kPage);
}

TEST(RegionHeap, RefusesWhatDoesNotFit) {
    RegionHeap heap(0, 4 * kPage, kPage);
    uint64_t offset = 0;
    EXPECT_EQ(heap.allocate(0, &offset).code(), Code::out_of_memory);
    EXPECT_EQ(heap.allocate(5 * kPage, &offset).code(), Code::out_of_memory);
    EXPECT_EQ(heap.allocate(~0ull, &offset).code(), Code::out_of_memory);
    ASSERT_TRUE(heap.allocate(3 * kPage, &offset).ok());
    EXPECT_EQ(heap.allocate(2 * kPage, &offset).code(), Code::out_of_memory);
}

TEST(RegionHeap, MergesRangesGivenBackSoThatLargeOnesFitAgain) {
    RegionHeap heap(0, 4 * kPage, kPage);
    uint64_t r[4];
    for (uint64_t &offset : r) ASSERT_TRUE(heap.allocate(kPage, &offset).ok());
    ASSERT_TRUE(heap.release(r[1]).ok());
    ASSERT_TRUE(heap.release(r[3]).ok());
    uint64_t big = 0;
    EXPECT_FALSE(heap.allocate(2 * kPage, &big).ok());  // two free pages, apart
    ASSERT_TRUE(heap.release(r[2]).ok());
    ASSERT_TRUE(heap.allocate(3 * kPage, &big).ok());
    EXPECT_EQ(big, r[1]);
    ASSERT_TRUE(heap.release(r[0]).ok());
    ASSERT_TRUE(heap.release(big).ok());
    EXPECT_EQ(heap.bytes_free(), 4 * kPage);
    ASSERT_TRUE(heap.allocate(4 * kPage, &big).ok());
}

TEST(RegionHeap, TakesBackOnlyRangesItHandedOut) {
    RegionHeap heap(0, 4 * kPage, kPage);
    uint64_t offset = 0;
    ASSERT_TRUE(heap.allocate(2 * kPage, &offset).ok());
    EXPECT_EQ(heap.release(offset + kPage).code(), Code::bad_request);
    EXPECT_EQ(heap.release(3 * kPage).code(), Code::bad_request);  // free, never handed out
    ASSERT_TRUE(heap.release(offset).ok());
    EXPECT_EQ(heap.release(offset).code(), Code::bad_request);  // twice
    EXPECT_EQ(heap.bytes_free(), 4 * kPage);
}

}  // namespace
}  // namespace ggml_remote::host
