// CoreSchedule: how many threads a session's compute gets beside the others, and
// when the host's cores are contended (no side may spin then).
#include "host/worker/session/core_schedule.h"

#include <gtest/gtest.h>
#include <sys/utsname.h>
#include <time.h>

#include <cstdint>
#include <cstdio>
#include <thread>

#include "transport/spin_policy.h"

namespace ggml_remote::host {
namespace {

TEST(ShareCores, ALoneSessionGetsWhatItWants) {
    const CoreShare share = share_cores(16, 4, {});
    EXPECT_EQ(share.threads, 4);
    EXPECT_FALSE(share.contended);
}

TEST(ShareCores, ALoneSessionGetsNoMoreThanTheCores) {
    EXPECT_EQ(share_cores(2, 8, {}).threads, 2);
    EXPECT_FALSE(share_cores(2, 8, {}).contended);  // alone, it keeps the spins it had
}

TEST(ShareCores, TwoSessionsOnTwoCoresGetOneThreadEach) {
    const CoreShare share = share_cores(2, 2, {2});
    EXPECT_EQ(share.threads, 1);
    EXPECT_TRUE(share.contended);
}

TEST(ShareCores, MoreSessionsThanCoresStillComputeWithOneThread) {
    const CoreShare share = share_cores(2, 2, {2, 2, 2});
    EXPECT_EQ(share.threads, 1);
    EXPECT_TRUE(share.contended);
}

TEST(ShareCores, EqualWantsSplitTheCoresEvenly) {
    EXPECT_EQ(share_cores(16, 8, {8, 8, 8}).threads, 4);
    EXPECT_EQ(share_cores(16, 16, {16, 16}).threads, 5);  // 16 / 3, rounded down
}

TEST(ShareCores, WhatASmallWantLeavesGoesToTheLargerOnes) {
    // 16 cores: the session that wants 2 gets 2, the other two split the 14 left.
    EXPECT_EQ(share_cores(16, 2, {16, 16}).threads, 2);
    EXPECT_EQ(share_cores(16, 16, {2, 16}).threads, 7);
}

TEST(ShareCores, NeverMoreThanTheGuestAskedFor) { EXPECT_EQ(share_cores(16, 3, {2}).threads, 3); }

TEST(ShareCores, TheSharesOfAllSessionsNeverExceedTheCores) {
    const std::vector<std::vector<int>> boards = {{1, 2, 3}, {8, 8, 8, 8, 8}, {16, 1}, {4, 4, 4, 4}, {3, 5, 7, 9}};
    for (int cores : {2, 4, 7, 16}) {
        for (const std::vector<int> &wants : boards) {
            int total = 0;
            for (size_t i = 0; i < wants.size(); ++i) {
                std::vector<int> others = wants;
                others.erase(others.begin() + static_cast<long>(i));
                total += share_cores(cores, wants[i], others).threads;
            }
            // (one thread each at least, even when there are more sessions than cores)
            EXPECT_LE(total, std::max(cores, static_cast<int>(wants.size()))) << cores << " cores";
        }
    }
}

TEST(ShareCores, SparesForEveryWaiterAreNotContended) {
    // 16 cores, 4 sessions of 2 threads: 8 compute, 4 may spin, 4 stay idle.
    EXPECT_FALSE(share_cores(16, 2, {2, 2, 2}).contended);
    // Eight such sessions take all 16 cores: their waiters would spin on someone's.
    EXPECT_TRUE(share_cores(16, 2, {2, 2, 2, 2, 2, 2, 2}).contended);
}

TEST(ShareCores, ASessionThatOnlyWaitsTakesNoThreadsButCountsAsAWaiter) {
    // Another session computes on both cores: this one's wait would take one.
    EXPECT_TRUE(share_cores(2, 0, {2}).contended);
    // It has 14 cores to itself beside a compute of 2.
    EXPECT_FALSE(share_cores(16, 0, {2}).contended);
}

TEST(ShareCores, ForgedWantsAreClampedToTheCores) {
    EXPECT_EQ(share_cores(4, 4, {1 << 30, 1 << 30}).threads, 1);
    EXPECT_EQ(share_cores(4, 4, {-5}).threads, 4);
}

// SessionPace: what a worker measures of its own session.
constexpr uint64_t kMs = 1'000'000;

// `computes` computes of `compute_ms` each, `gap_ms` apart, from `start_ns`; the end.
uint64_t pace_for(SessionPace *pace, int computes, uint64_t compute_ms, uint64_t gap_ms, uint64_t start_ns) {
    uint64_t at = start_ns;
    for (int i = 0; i < computes; ++i) {
        pace->note_compute(at, at + compute_ms * kMs);
        at += (compute_ms + gap_ms) * kMs;
    }
    return at;
}

TEST(SessionPace, ANewSessionStartsHeavy) {
    SessionPace pace;
    EXPECT_FALSE(pace.light());
    EXPECT_EQ(pace.duty_milli(), 500u);
    EXPECT_EQ(pace.active_window_ns(), kActiveWindowNs);
}

TEST(SessionPace, ASessionThatComputesBackToBackStaysHeavy) {
    SessionPace pace;
    pace_for(&pace, 200, 100, 0, kMs);  // 20 s of prompts, nothing between them
    EXPECT_FALSE(pace.light());
    EXPECT_GT(pace.duty_milli(), 990u);
}

TEST(SessionPace, ASessionThatComputesAFifthOfItsTimeTurnsLight) {
    SessionPace pace;
    pace_for(&pace, 1000, 2, 8, kMs);  // tokens of 2 ms, 8 ms of the guest's own work
    EXPECT_TRUE(pace.light());
    EXPECT_NEAR(pace.duty_milli(), 200u, 10u);
}

TEST(SessionPace, BurstsBetweenPausesAreLight) {
    SessionPace pace;
    uint64_t at = kMs;
    for (int request = 0; request < 10; ++request) {
        at = pace_for(&pace, 64, 2, 0, at);  // 64 tokens back to back
        at += 1000 * kMs;                    // a second to read them
    }
    EXPECT_TRUE(pace.light());
    // The pauses are not the guest's work between two tokens: the window stays short.
    EXPECT_EQ(pace.active_window_ns(), kMinActiveWindowNs);
}

TEST(SessionPace, ALightSessionNearHalfItsTimeDoesNotFlip) {
    SessionPace pace;
    uint64_t at = pace_for(&pace, 1000, 2, 8, kMs);
    ASSERT_TRUE(pace.light());
    at = pace_for(&pace, 2000, 5, 5, at);  // half its time: inside the margin
    EXPECT_TRUE(pace.light());
    pace_for(&pace, 2000, 9, 1, at);  // nine tenths: heavy
    EXPECT_FALSE(pace.light());
}

TEST(SessionPace, TheWindowIsAFewOfTheGuestsGapsWithinBounds) {
    SessionPace slow, fast, slower;
    pace_for(&slow, 100, 1, 10, kMs);
    EXPECT_EQ(slow.active_window_ns(), kWindowGaps * 10 * kMs);
    pace_for(&fast, 100, 1, 0, kMs);  // no gap at all
    EXPECT_EQ(fast.active_window_ns(), kMinActiveWindowNs);
    pace_for(&slower, 100, 1, 90, kMs);
    EXPECT_EQ(slower.active_window_ns(), kMaxActiveWindowNs);
}

// Light sessions first (core_schedule.h).
TEST(ShareCores, AHeavySessionStepsAsideForALightOneWhenTheSharesTakeEveryCore) {
    const CoreShare share = share_cores(2, 2, false, {{2, true}, {2, false}, {2, false}});
    EXPECT_EQ(share.threads, 1);
    EXPECT_TRUE(share.steps_aside);
}

TEST(ShareCores, LightOrNotEverySessionGetsItsFairShareOfThreads) {
    EXPECT_EQ(share_cores(2, 2, true, {{2, false}, {2, false}, {2, false}}).threads, 1);
    EXPECT_EQ(share_cores(16, 8, true, {{8, false}, {8, false}}).threads, 5);
    EXPECT_EQ(share_cores(16, 8, false, {{8, true}, {8, false}}).threads, 5);
}

TEST(ShareCores, NothingStepsAsideWithCoresToSpareOrWithoutALightSession) {
    EXPECT_FALSE(share_cores(16, 2, false, {{2, true}}).steps_aside);              // 4 of 16 cores
    EXPECT_FALSE(share_cores(2, 2, false, {{2, false}, {2, false}}).steps_aside);  // no light one
    EXPECT_FALSE(share_cores(2, 2, true, {{2, true}, {2, false}}).steps_aside);    // it is light
}

TEST(ShareCores, AHeavySessionSharesWithAnotherOneAsBefore) {
    const CoreShare mixed = share_cores(4, 4, false, {{4, false}, {4, false}});
    const CoreShare plain = share_cores(4, 4, {4, 4});
    EXPECT_EQ(mixed.threads, plain.threads);
    EXPECT_EQ(mixed.contended, plain.contended);
    EXPECT_FALSE(mixed.steps_aside);
}

class BoardTest : public ::testing::Test {
  protected:
    void SetUp() override { ASSERT_TRUE(StatusBoard::create(4, &board_).ok()); }

    // Slot `index` as a live session whose guest wants `want` threads.
    SessionSlot *session(uint32_t index, uint32_t want, bool computing, uint64_t last_compute_ns) {
        SessionSlot *slot = board_.slot(index);
        slot->live.store(1);
        slot->cores_wanted.store(want);
        slot->cores_computing.store(computing ? 1 : 0);
        slot->cores_last_compute_ns.store(last_compute_ns);
        return slot;
    }

    StatusBoard board_;
    static constexpr uint64_t kNow = 1'000'000'000'000;
};

TEST_F(BoardTest, ASessionThatComputesNowIsActive) {
    SessionSlot *own = session(0, 2, false, 0);
    session(1, 2, true, 0);
    EXPECT_EQ(active_wants(board_, own, kNow, 16), std::vector<int>{2});
}

TEST_F(BoardTest, ASessionThatComputedWithinTheWindowIsActive) {
    SessionSlot *own = session(0, 2, false, 0);
    session(1, 3, false, kNow - kActiveWindowNs / 2);
    session(2, 4, false, kNow + 1000);  // another worker's clock read a little later
    EXPECT_EQ(active_wants(board_, own, kNow, 16), (std::vector<int>{3, 4}));
}

TEST_F(BoardTest, IdleNeverComputedAndGoneSessionsAreNot) {
    SessionSlot *own = session(0, 2, true, 0);
    session(1, 2, false, kNow - 2 * kActiveWindowNs);  // paused
    session(2, 0, false, 0);                           // still loading its model
    session(3, 2, true, 0)->live.store(0);             // its worker died mid-compute
    EXPECT_TRUE(active_wants(board_, own, kNow, 16).empty());
}

TEST_F(BoardTest, WantsAreClampedToTheCores) {
    SessionSlot *own = session(0, 2, false, 0);
    session(1, 1000, true, 0);
    EXPECT_EQ(active_wants(board_, own, kNow, 8), std::vector<int>{8});
}

TEST_F(BoardTest, ANewSessionsSlotStartsIdle) {
    SessionSlot *slot = session(1, 2, true, kNow);
    slot->cores_threads.store(2);
    slot->cores_shared_computes.store(7);
    slot->cores_light.store(1);
    slot->cores_duty_milli.store(900);
    slot->cores_window_ns.store(kMaxActiveWindowNs);
    clear_core_fields(slot);
    EXPECT_EQ(slot->cores_computing.load(), 0u);
    EXPECT_EQ(slot->cores_wanted.load(), 0u);
    EXPECT_EQ(slot->cores_last_compute_ns.load(), 0u);
    EXPECT_EQ(slot->cores_threads.load(), 0u);
    EXPECT_EQ(slot->cores_shared_computes.load(), 0u);
    EXPECT_EQ(slot->cores_light.load(), 0u);
    EXPECT_EQ(slot->cores_duty_milli.load(), 0u);
    EXPECT_EQ(slot->cores_window_ns.load(), 0u);
}

TEST_F(BoardTest, AComputeTakesItsShareAndPublishesIt) {
    CoreSchedule schedule(true, 2);
    schedule.attach(&board_, board_.slot(0));
    session(1, 2, true, 0);
    const CoreShare share = schedule.begin_compute(2);
    EXPECT_EQ(share.threads, 1);
    EXPECT_TRUE(share.contended);
    EXPECT_EQ(board_.slot(0)->cores_computing.load(), 1u);
    EXPECT_EQ(board_.slot(0)->cores_wanted.load(), 2u);
    EXPECT_EQ(board_.slot(0)->cores_threads.load(), 1u);
    schedule.end_compute(share);
    EXPECT_EQ(board_.slot(0)->cores_computing.load(), 0u);
    EXPECT_NE(board_.slot(0)->cores_last_compute_ns.load(), 0u);
    EXPECT_EQ(schedule.stats().shared_computes, 1u);
    EXPECT_EQ(schedule.stats().shared_max_threads, 1);
    EXPECT_EQ(board_.slot(0)->cores_shared_computes.load(), 1u);
}

TEST_F(BoardTest, ALoneComputeTakesWhatItWantsAndIsNotShared) {
    CoreSchedule schedule(true, 2);
    schedule.attach(&board_, board_.slot(0));
    const CoreShare share = schedule.begin_compute(2);
    EXPECT_EQ(share.threads, 2);
    EXPECT_FALSE(share.contended);
    schedule.end_compute(share);
    EXPECT_EQ(schedule.stats().computes, 1u);
    EXPECT_EQ(schedule.stats().shared_computes, 0u);
}

TEST_F(BoardTest, WaitsAreContendedWhileAnotherSessionComputesOnEveryCore) {
    CoreSchedule schedule(true, 2);
    schedule.attach(&board_, board_.slot(0));
    EXPECT_FALSE(schedule.contended());
    CoreSchedule other(true, 2);
    other.attach(&board_, board_.slot(1));
    board_.slot(1)->live.store(1);
    const CoreShare share = other.begin_compute(2);
    EXPECT_EQ(share.threads, 2);  // it began alone
    CoreSchedule third(true, 2);  // a fresh schedule reads the board at once
    third.attach(&board_, board_.slot(2));
    EXPECT_TRUE(third.contended());
    other.end_compute(share);
}

TEST_F(BoardTest, SchedulingOffGivesEveryComputeWhatItWants) {
    CoreSchedule schedule(false, 2);
    schedule.attach(&board_, board_.slot(0));
    session(1, 2, true, 0);
    const CoreShare share = schedule.begin_compute(2);
    EXPECT_EQ(share.threads, 2);
    EXPECT_FALSE(share.contended);
    EXPECT_FALSE(schedule.contended());
    schedule.end_compute(share);
    EXPECT_EQ(schedule.stats().shared_computes, 1u);  // still counted, for the log
}

TEST_F(BoardTest, ALightSessionIsActiveWithinItsOwnWindow) {
    SessionSlot *own = session(0, 2, false, 0);
    SessionSlot *light = session(1, 2, false, kNow - 10'000'000);
    light->cores_light.store(1);
    light->cores_window_ns.store(20'000'000);
    EXPECT_TRUE(light_session_active(board_, own, kNow));
    light->cores_window_ns.store(kMinActiveWindowNs);  // its guest works briefly between graphs
    EXPECT_FALSE(light_session_active(board_, own, kNow));
    EXPECT_TRUE(active_wants(board_, own, kNow, 16).empty());
}

TEST_F(BoardTest, AForgedWindowIsHeldToItsBounds) {
    SessionSlot *own = session(0, 2, false, 0);
    SessionSlot *forged = session(1, 2, false, kNow - 2 * kMaxActiveWindowNs);
    forged->cores_light.store(1);
    forged->cores_window_ns.store(UINT64_MAX);
    EXPECT_FALSE(light_session_active(board_, own, kNow));
    forged->cores_last_compute_ns.store(kNow - kMinActiveWindowNs / 2);
    forged->cores_window_ns.store(1);
    EXPECT_TRUE(light_session_active(board_, own, kNow));
}

TEST_F(BoardTest, AHeavyComputeSleepsWhileALightSessionComputesWithinItsBound) {
    CoreSchedule schedule(true, 2);
    schedule.attach(&board_, board_.slot(0));
    session(1, 2, true, 0)->cores_light.store(1);  // a light session that never ends its compute
    session(2, 2, true, 0);
    const CoreShare share = schedule.begin_compute(2);
    ASSERT_EQ(share.threads, 1);
    ASSERT_TRUE(share.steps_aside);
    const uint64_t start = SpinPolicy::now_ns();
    while (SpinPolicy::now_ns() - start < 2 * kYieldCheckNs) schedule.between_nodes();
    const uint64_t slept = SpinPolicy::now_ns() - start;
    schedule.end_compute(share);
    // It stepped aside, and came back after what it had run plus the allowance.
    EXPECT_GE(schedule.stats().stepped_aside, 1u);
    EXPECT_GE(schedule.stats().stepped_aside_ns, kYieldAllowanceNs);
    EXPECT_LT(slept, 5 * kYieldAllowanceNs);
}

TEST_F(BoardTest, AComputeGoesOnWhenNoLightSessionIsActive) {
    CoreSchedule schedule(true, 2);
    schedule.attach(&board_, board_.slot(0));
    session(1, 2, true, 0);
    session(2, 2, true, 0);
    const CoreShare share = schedule.begin_compute(2);
    const uint64_t start = SpinPolicy::now_ns();
    while (SpinPolicy::now_ns() - start < 3 * kYieldCheckNs) schedule.between_nodes();
    schedule.end_compute(share);
    EXPECT_EQ(schedule.stats().stepped_aside, 0u);
}

TEST_F(BoardTest, ALightSessionNeverStepsAside) {
    CoreSchedule schedule(true, 2);
    schedule.attach(&board_, board_.slot(0));
    session(1, 2, true, 0)->cores_light.store(1);
    // Its own pace: short computes with long gaps.
    for (int i = 0; i < 150; ++i) {
        const CoreShare share = schedule.begin_compute(2);
        schedule.end_compute(share);
        const timespec gap{0, 5'000'000};
        ::nanosleep(&gap, nullptr);
    }
    ASSERT_TRUE(schedule.pace().light());
    EXPECT_EQ(board_.slot(0)->cores_light.load(), 1u);
    const CoreShare share = schedule.begin_compute(2);
    EXPECT_FALSE(share.steps_aside);
    for (int i = 0; i < 1000; ++i) schedule.between_nodes();
    schedule.end_compute(share);
    EXPECT_EQ(schedule.stats().stepped_aside, 0u);
}

// The kernel keeps a light thread's slice where it reads one (Linux 6.12 and later).
TEST(TimeSlice, ALightThreadsSliceIsTheKernelsShortestWhereTheKernelReadsIt) {
    utsname name{};
    ASSERT_EQ(::uname(&name), 0);
    int major = 0, minor = 0;
    if (std::sscanf(name.release, "%d.%d", &major, &minor) != 2 || major * 100 + minor < 612) {
        GTEST_SKIP() << "Linux " << name.release << " has no time slices of its own per thread";
    }
    // On a thread of its own: the test runner's thread keeps the default.
    uint64_t slice = 0, restored = 1;
    std::thread([&] {
        ASSERT_TRUE(set_own_time_slice(kLightSliceNs));
        slice = own_time_slice();
        ASSERT_TRUE(set_own_time_slice(0));
        restored = own_time_slice();
    }).join();
    EXPECT_EQ(slice, kLightSliceNs);
    EXPECT_NE(restored, kLightSliceNs);
}

TEST_F(BoardTest, AHeavyComputeRunsIdleClassBesideALightSessionThatComputedLately) {
    CoreSchedule schedule(true, 2);
    schedule.attach(&board_, board_.slot(0));
    SessionSlot *light = session(1, 2, false, SpinPolicy::now_ns() - kDutyAverageNs / 2);
    light->cores_light.store(1);
    light->cores_duty_milli.store(300);
    light->cores_threads.store(1);
    session(2, 2, true, 0);
    const CoreShare share = schedule.begin_compute(2);
    EXPECT_EQ(share.threads, 1);
    EXPECT_TRUE(share.idle_class);
    schedule.end_compute(share);
}

TEST_F(BoardTest, LightSessionsThatWantMostCoresLeaveHeavyComputesInTheNormalClass) {
    const uint64_t now = SpinPolicy::now_ns();
    for (uint32_t i = 1; i < 4; ++i) {  // three light sessions of 40% on one thread: 1.2 cores of 2
        SessionSlot *light = session(i, 2, true, 0);
        light->cores_light.store(1);
        light->cores_duty_milli.store(400);
        light->cores_threads.store(1);
    }
    EXPECT_FALSE(light_sessions_about(board_, board_.slot(0), now, 2));
    board_.slot(3)->live.store(0);  // two: 0.8 of 2 cores
    EXPECT_TRUE(light_sessions_about(board_, board_.slot(0), now, 2));
    board_.slot(2)->cores_duty_milli.store(1u << 30);  // a forged duty counts as a light one's most
    board_.slot(2)->cores_threads.store(1u << 30);     // and threads as the cores
    EXPECT_FALSE(light_sessions_about(board_, board_.slot(0), now, 2));
}

TEST_F(BoardTest, ALightSessionLongGoneLeavesHeavyComputesInTheNormalClass) {
    const uint64_t now = SpinPolicy::now_ns();
    SessionSlot *light = session(1, 2, false, now - 2 * kDutyAverageNs);
    light->cores_light.store(1);
    light->cores_threads.store(1);
    EXPECT_FALSE(light_sessions_about(board_, board_.slot(0), now, 2));
    CoreSchedule schedule(true, 2);
    schedule.attach(&board_, board_.slot(0));
    const CoreShare share = schedule.begin_compute(2);
    EXPECT_FALSE(share.idle_class);
    schedule.end_compute(share);
}

TEST(CoreScheduleDefaults, TheCoresDefaultToTheUsableCpus) {
    EXPECT_EQ(CoreSchedule(true, 0).cores(), SpinPolicy::usable_cpus());
    EXPECT_EQ(CoreSchedule(true, 3).cores(), 3);
}

}  // namespace
}  // namespace ggml_remote::host
