// Start budgets (--max-starts-per-peer, --max-starts) and the refusal log's rate:
// what keeps a connection flood from costing a fork and an exec per connection, or
// a log line per connection.
#include "host/listener/start_budget.h"

#include <gtest/gtest.h>

#include <string>

namespace ggml_remote::host {
namespace {

using Clock = RateBucket::Clock;
using std::chrono::milliseconds;

const Clock::time_point kStart = Clock::time_point() + std::chrono::hours(1);

TEST(RateBucket, SpendsItsBurstThenRefillsAtItsRate) {
    RateBucket bucket(3, 2, kStart);
    for (int i = 0; i < 3; ++i) EXPECT_TRUE(bucket.spend(kStart));
    EXPECT_FALSE(bucket.spend(kStart));
    EXPECT_FALSE(bucket.spend(kStart + milliseconds(400)));  // 0.8 of a token
    EXPECT_TRUE(bucket.spend(kStart + milliseconds(500)));
    EXPECT_FALSE(bucket.full(kStart + milliseconds(500)));
    EXPECT_TRUE(bucket.full(kStart + milliseconds(2000)));
}

TEST(RateBucket, NeverHoldsMoreThanItsBurstAfterALongQuiet) {
    RateBucket bucket(2, 10, kStart);
    const auto later = kStart + std::chrono::hours(24);
    EXPECT_TRUE(bucket.spend(later));
    EXPECT_TRUE(bucket.spend(later));
    EXPECT_FALSE(bucket.spend(later));
}

TEST(RateBucket, SaysHowLongUntilTheNextToken) {
    RateBucket bucket(1, 4, kStart);
    EXPECT_EQ(bucket.until_next(kStart), Clock::duration::zero());
    ASSERT_TRUE(bucket.spend(kStart));
    EXPECT_NEAR(std::chrono::duration<double>(bucket.until_next(kStart)).count(), 0.25, 1e-6);
}

TEST(StartBudget, APeerOverItsBudgetIsRefusedWhileAnotherPeerStarts) {
    StartBudget budget({2, 100}, kStart);
    const int burst = 2 * kStartBurstSeconds;
    for (int i = 0; i < burst; ++i) ASSERT_EQ(budget.spend("address 127.0.0.2", kStart), StartBudget::Verdict::start);
    EXPECT_EQ(budget.spend("address 127.0.0.2", kStart), StartBudget::Verdict::peer_over);
    EXPECT_EQ(budget.spend("address 127.0.0.1", kStart), StartBudget::Verdict::start);
    // Its rate: one start every half second.
    EXPECT_EQ(budget.spend("address 127.0.0.2", kStart + milliseconds(500)), StartBudget::Verdict::start);
    EXPECT_EQ(budget.spend("address 127.0.0.2", kStart + milliseconds(500)), StartBudget::Verdict::peer_over);
}

TEST(StartBudget, ThePeersTogetherShareTheServersBudget) {
    StartBudget budget({100, 1}, kStart);
    for (int i = 0; i < kStartBurstSeconds; ++i) {
        ASSERT_EQ(budget.spend("address 10.0.0." + std::to_string(i), kStart), StartBudget::Verdict::start);
    }
    EXPECT_EQ(budget.spend("address 10.0.0.99", kStart), StartBudget::Verdict::server_over);
    EXPECT_EQ(budget.spend("address 10.0.0.99", kStart + std::chrono::seconds(1)), StartBudget::Verdict::start);
}

TEST(StartBudget, ARefusalByTheServerSpendsNothingOfThePeers) {
    StartBudget budget({1, 1}, kStart);
    for (int i = 0; i < kStartBurstSeconds; ++i) ASSERT_EQ(budget.spend("a", kStart), StartBudget::Verdict::start);
    // The server's budget is spent; b's own stays whole for when the server's returns.
    for (int i = 0; i < 10; ++i) EXPECT_EQ(budget.spend("b", kStart), StartBudget::Verdict::server_over);
    const auto later = kStart + std::chrono::seconds(kStartBurstSeconds);
    for (int i = 0; i < kStartBurstSeconds; ++i) EXPECT_EQ(budget.spend("b", later), StartBudget::Verdict::start);
}

TEST(StartBudget, TracksABoundedNumberOfPeersAndForgetsQuietOnes) {
    StartBudget budget({1, 1000000}, kStart);
    for (size_t i = 0; i < kMaxTrackedPeers; ++i) {
        ASSERT_EQ(budget.spend("peer " + std::to_string(i), kStart), StartBudget::Verdict::start);
    }
    EXPECT_EQ(budget.tracked_peers(), kMaxTrackedPeers);
    // Every tracked peer spent a start just now: a new one is refused, not tracked.
    EXPECT_EQ(budget.spend("one more", kStart), StartBudget::Verdict::server_over);
    EXPECT_EQ(budget.tracked_peers(), kMaxTrackedPeers);
    // Once they are whole again they are forgotten, and the new peer is served.
    const auto later = kStart + std::chrono::seconds(kStartBurstSeconds);
    EXPECT_EQ(budget.spend("one more", later), StartBudget::Verdict::start);
    EXPECT_LT(budget.tracked_peers(), kMaxTrackedPeers);
}

TEST(RefusalLog, AFewLinesAPeerThenOneASecondThatCountsTheRest) {
    RefusalLog log;
    uint64_t unlogged = 99;
    for (int i = 0; i < kRefusalLinesBurst; ++i) {
        EXPECT_TRUE(log.should_log("address 127.0.0.2", kStart, &unlogged));
        EXPECT_EQ(unlogged, 0u);
    }
    for (int i = 0; i < 7; ++i) EXPECT_FALSE(log.should_log("address 127.0.0.2", kStart + milliseconds(i), &unlogged));
    EXPECT_TRUE(log.should_log("address 127.0.0.1", kStart, &unlogged)) << "another peer's lines are its own";
    EXPECT_TRUE(log.should_log("address 127.0.0.2", kStart + std::chrono::seconds(1), &unlogged));
    EXPECT_EQ(unlogged, 7u);
    EXPECT_FALSE(log.should_log("address 127.0.0.2", kStart + std::chrono::seconds(1), &unlogged));
}

}  // namespace
}  // namespace ggml_remote::host
