// ReplyRule: what a server's reply may hold, given the request (protocol/reply_rules.h).
#include "protocol/reply_rules.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace ggml_remote::protocol {
namespace {

using ::testing::HasSubstr;

TEST(ReplyRules, AHandshakeClaimingMoreDevicesThanTheCapIsRefused) {
    Hello::Request hello;
    EXPECT_TRUE(ReplyRule<Hello>::check(hello, {kProtocolVersion, kMaxServerDevices, 0}, 0).ok());
    Status status = ReplyRule<Hello>::check(hello, {kProtocolVersion, 1u << 31, 0}, 0);
    EXPECT_FALSE(status.ok());
    EXPECT_THAT(status.message(), HasSubstr("claims 2147483648 devices"));
}

TEST(ReplyRules, AHandshakeMustGrantOnlyWhatWasAskedInOurVersion) {
    Hello::Request hello;
    hello.capabilities = kSessionSharedMemory;
    EXPECT_TRUE(ReplyRule<Hello>::check(hello, {kProtocolVersion, 1, kSessionSharedMemory}, 0).ok());
    EXPECT_FALSE(ReplyRule<Hello>::check(hello, {kProtocolVersion, 1, kSessionSharedRing}, 0).ok());
    EXPECT_FALSE(ReplyRule<Hello>::check(hello, {kProtocolVersion + 1, 1, 0}, 0).ok());
    EXPECT_FALSE(ReplyRule<Hello>::check(hello, {kProtocolVersion, 1, 0}, 8).ok()) << "no tail";
}

TEST(ReplyRules, ABufferIsAtLeastTheSizeAskedAndNotFarMore) {
    const BufferAlloc::Request asked{0, 4096};
    EXPECT_TRUE(ReplyRule<BufferAlloc>::check(asked, {1, 4096, 0}, 0).ok());
    EXPECT_TRUE(ReplyRule<BufferAlloc>::check(asked, {1, 8192, 0}, 0).ok()) << "a device's rounding";
    Status status = ReplyRule<BufferAlloc>::check(asked, {1, 2048, 0}, 0);
    EXPECT_THAT(status.message(), HasSubstr("gives a buffer of 2048 bytes for 4096 asked"));
    EXPECT_FALSE(ReplyRule<BufferAlloc>::check(asked, {1, UINT64_MAX, 0}, 0).ok());
    const BufferAlloc::Request huge{0, UINT64_MAX - 1};
    EXPECT_TRUE(ReplyRule<BufferAlloc>::check(huge, {1, UINT64_MAX, 0}, 0).ok()) << "no overflow";
}

TEST(ReplyRules, ABufferOfAKnownKindCarriesTheTailOfThatKind) {
    const BufferAlloc::Request asked{0, 4096};
    EXPECT_EQ(ReplyRule<BufferAlloc>::max_tail(asked, 0), sizeof(uint64_t));
    EXPECT_TRUE(ReplyRule<BufferAlloc>::check(asked, {1, 4096, BufferAlloc::kSharedInRegion}, 8).ok());
    EXPECT_FALSE(ReplyRule<BufferAlloc>::check(asked, {1, 4096, BufferAlloc::kSharedInRegion}, 0).ok());
    EXPECT_FALSE(ReplyRule<BufferAlloc>::check(asked, {1, 4096, 0}, 8).ok());
    EXPECT_FALSE(ReplyRule<BufferAlloc>::check(asked, {1, 4096, 3}, 0).ok());
}

TEST(ReplyRules, ATensorReadIsExactlyTheBytesAsked) {
    const GetTensor::Request read{{1, 0, 64}};
    EXPECT_EQ(ReplyRule<GetTensor>::max_tail(read, 0), 64u);
    EXPECT_TRUE(ReplyRule<GetTensor>::check(read, {}, 64).ok());
    EXPECT_THAT(ReplyRule<GetTensor>::check(read, {}, 32).message(), HasSubstr("has 32 bytes for 64 asked"));
    const GetTensor2d::Request rows{{1, 0, 16}, 3, 32};
    EXPECT_EQ(ReplyRule<GetTensor2d>::max_tail(rows, 0), 48u);
    EXPECT_TRUE(ReplyRule<GetTensor2d>::check(rows, {}, 48).ok());
    EXPECT_FALSE(ReplyRule<GetTensor2d>::check(rows, {}, 47).ok());
    const GetTensor2d::Request overflowing{{1, 0, UINT64_MAX / 2}, 4, 0};
    EXPECT_FALSE(ReplyRule<GetTensor2d>::check(overflowing, {}, 0).ok());
}

TEST(ReplyRules, ADeviceAsksForAPowerOfTwoAlignmentWithinReason) {
    DeviceInfo::Reply info{};
    info.buffer_max_size = 1 << 30;
    info.buffer_alignment = 64;
    EXPECT_TRUE(ReplyRule<DeviceInfo>::check({0}, info, 12).ok());
    for (uint64_t alignment : {uint64_t(0), uint64_t(48), uint64_t(1) << 63}) {
        info.buffer_alignment = alignment;
        EXPECT_FALSE(ReplyRule<DeviceInfo>::check({0}, info, 12).ok()) << alignment;
    }
    EXPECT_EQ(ReplyRule<DeviceInfo>::max_tail({0}, 0), kMaxDeviceStrings);
}

TEST(ReplyRules, ANodeOrderHoldsExactlyItsCountsAndNoMoreThanTheGraphSent) {
    EXPECT_EQ(ReplyRule<GraphOptimize>::max_tail({1}, 100), 1200u);
    EXPECT_TRUE(ReplyRule<GraphOptimize>::check({1}, {1, 3, 1}, 20).ok());
    EXPECT_FALSE(ReplyRule<GraphOptimize>::check({1}, {1, 3, 1}, 12).ok());
    EXPECT_FALSE(ReplyRule<GraphOptimize>::check({1}, {0, 3, 0}, 12).ok()) << "no optimizer, no order";
    EXPECT_FALSE(ReplyRule<GraphOptimize>::check({1}, {1, UINT32_MAX, UINT32_MAX}, 0).ok());
}

TEST(ReplyRules, AStatusTableHoldsExactlyItsCounts) {
    ServerStatus::Reply reply{1, 4, 1, 1};
    EXPECT_TRUE(ReplyRule<ServerStatus>::check({0}, reply, sizeof(StatusDevice) + sizeof(StatusSession)).ok());
    EXPECT_FALSE(ReplyRule<ServerStatus>::check({0}, reply, sizeof(StatusDevice)).ok());
    reply.n_sessions = 1u << 30;
    EXPECT_FALSE(ReplyRule<ServerStatus>::check({0}, reply, 0).ok());
}

TEST(ReplyRules, AStatusReplyHoldsTheUploadTableOnlyWhenAskedFor) {
    const ServerStatus::Reply reply{1, 4, 1, 2};
    const uint64_t tables = sizeof(StatusDevice) + 2 * sizeof(StatusSession);
    const uint64_t with_uploads = tables + 2 * sizeof(StatusUpload);
    EXPECT_TRUE(ReplyRule<ServerStatus>::check({kStatusUploads}, reply, with_uploads).ok());
    EXPECT_TRUE(status_reply_has_uploads({kStatusUploads}, reply, with_uploads));
    EXPECT_TRUE(ReplyRule<ServerStatus>::check({kStatusUploads}, reply, tables).ok()) << "an older server";
    EXPECT_FALSE(status_reply_has_uploads({kStatusUploads}, reply, tables));
    EXPECT_FALSE(ReplyRule<ServerStatus>::check({0}, reply, with_uploads).ok()) << "not asked for";
    EXPECT_FALSE(ReplyRule<ServerStatus>::check({kStatusUploads}, reply, with_uploads - 1).ok());
}

TEST(ReplyRules, RepliesWithoutATailHaveNone) {
    EXPECT_TRUE(ReplyRule<DeviceMemory>::check({0}, {1, 2}, 0).ok());
    EXPECT_FALSE(ReplyRule<DeviceMemory>::check({0}, {1, 2}, 1).ok());
    EXPECT_FALSE(ReplyRule<Synchronize>::check({1}, {}, 4).ok());
    EXPECT_EQ(ReplyRule<Synchronize>::max_tail({1}, 1000), 0u);
}

}  // namespace
}  // namespace ggml_remote::protocol
