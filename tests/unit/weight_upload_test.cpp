// WeightUpload: the weights_* figures of `status` and /metrics.
#include "host/worker/session/weight_upload.h"

#include <gtest/gtest.h>

namespace ggml_remote::host {
namespace {

constexpr uint64_t kSize = 1000;

TEST(WeightUpload, AFlaggedBufferIsExpectedAndCountsWhatArrives) {
    WeightUpload upload;
    BufferUpload buffer;
    upload.set_weights(&buffer, kSize, true);
    EXPECT_EQ(upload.expected(), kSize);
    upload.count_received(&buffer, kSize, 300);
    upload.count_found(&buffer, kSize, 500);
    EXPECT_EQ(upload.received(), 300u);
    EXPECT_EQ(upload.found(), 500u);
}

TEST(WeightUpload, BuffersThatHoldNoWeightsCountNowhere) {
    WeightUpload upload;
    BufferUpload scratch;
    upload.count_received(&scratch, kSize, 400);
    EXPECT_EQ(upload.expected(), 0u);
    EXPECT_EQ(upload.received(), 0u);
}

TEST(WeightUpload, BytesSentBeforeTheFlagCountOnceItComes) {
    WeightUpload upload;
    BufferUpload buffer;
    upload.count_received(&buffer, kSize, 400);
    upload.set_weights(&buffer, kSize, true);
    EXPECT_EQ(upload.received(), 400u) << "a guest that flags its weights only at its first graph";
    upload.set_weights(&buffer, kSize, true);
    EXPECT_EQ(upload.expected(), kSize) << "flagged twice, counted once";
}

TEST(WeightUpload, ABufferCountsAtMostItsSize) {
    WeightUpload upload;
    BufferUpload buffer;
    upload.set_weights(&buffer, kSize, true);
    upload.count_found(&buffer, kSize, 700);
    upload.count_received(&buffer, kSize, 700);
    upload.count_received(&buffer, kSize, 700);
    EXPECT_EQ(upload.found(), 700u);
    EXPECT_EQ(upload.received(), 300u);
}

TEST(WeightUpload, AFreedOrUnflaggedBufferTakesItsShareAlong) {
    WeightUpload upload;
    BufferUpload kept, freed;
    upload.set_weights(&kept, kSize, true);
    upload.set_weights(&freed, 2 * kSize, true);
    upload.count_received(&kept, kSize, 100);
    upload.count_received(&freed, 2 * kSize, 200);
    upload.count_found(&freed, 2 * kSize, 50);
    upload.forget(freed, 2 * kSize);
    EXPECT_EQ(upload.expected(), kSize);
    EXPECT_EQ(upload.received(), 100u);
    EXPECT_EQ(upload.found(), 0u);
    upload.set_weights(&kept, kSize, false);
    EXPECT_EQ(upload.expected(), 0u);
    EXPECT_EQ(upload.received(), 0u);
    upload.forget(kept, kSize);
    EXPECT_EQ(upload.expected(), 0u) << "an unflagged buffer's freeing changes nothing";
}

TEST(WeightUpload, OnceTheGuestComputesWhatArrivedIsWhatWasExpected) {
    WeightUpload upload;
    BufferUpload buffer, scratch;
    upload.set_weights(&buffer, kSize, true);
    upload.count_received(&buffer, kSize, 900);
    upload.count_found(&buffer, kSize, 64);
    EXPECT_TRUE(upload.any_unsettled());
    upload.settle(&buffer, kSize);
    upload.settle(&scratch, kSize);
    EXPECT_FALSE(upload.any_unsettled());
    EXPECT_EQ(upload.expected(), 964u) << "the padding between tensors never comes";
    upload.count_received(&buffer, kSize, 10);
    EXPECT_EQ(upload.expected(), 974u) << "a write after the first graph keeps it complete";
    EXPECT_EQ(upload.received() + upload.found(), upload.expected());
    upload.forget(buffer, kSize);
    EXPECT_EQ(upload.expected(), 0u);
    EXPECT_EQ(upload.received(), 0u);
}

}  // namespace
}  // namespace ggml_remote::host
