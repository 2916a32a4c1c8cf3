// SpinPolicy: when a waiting side spins and when it sleeps at once.
#include "transport/spin_policy.h"

#include <gtest/gtest.h>

namespace ggml_remote {
namespace {

TEST(SpinPolicy, AWaitBehindABusyPeerSleepsAtOnceWhenTheComputeHasEveryCore) {
    SpinPolicy policy;
    policy.set_compute_threads(SpinPolicy::usable_cpus());
    EXPECT_GT(policy.spin_ns(), 0u);
    policy.set_peer_busy(true);
    EXPECT_EQ(policy.spin_ns(), 0u);
}

TEST(SpinPolicy, AnUnknownThreadCountCountsAsEveryCore) {
    SpinPolicy policy;
    policy.set_compute_threads(0);
    policy.set_peer_busy(true);
    EXPECT_EQ(policy.spin_ns(), 0u);
}

TEST(SpinPolicy, AWaitBehindABusyPeerSpinsWhenTwoCoresAreToSpare) {
    if (SpinPolicy::usable_cpus() < 3) GTEST_SKIP() << "needs 3 CPUs: a compute thread and two to spare";
    SpinPolicy policy;
    policy.set_compute_threads(SpinPolicy::usable_cpus() - 2);
    policy.set_peer_busy(true);
    EXPECT_GT(policy.spin_ns(), 0u);
    // And it learns from those waits: a 20 us compute is spun through next time.
    policy.note_wait(20000);
    EXPECT_GE(policy.spin_ns(), 20000u);
    policy.set_compute_threads(SpinPolicy::usable_cpus() - 1);
    EXPECT_EQ(policy.spin_ns(), 0u);
}

TEST(SpinPolicy, NoWaitSpinsWhileTheHostsCoresAreContended) {
    SpinPolicy policy;
    policy.set_compute_threads(1);
    EXPECT_GT(policy.spin_ns(), 0u);
    policy.set_cores_contended(true);
    EXPECT_EQ(policy.spin_ns(), 0u);
    // A wait it slept through teaches it nothing: the old estimate comes back after.
    policy.note_wait(50000);
    policy.set_cores_contended(false);
    EXPECT_LT(policy.spin_ns(), 50000u);
    EXPECT_GT(policy.spin_ns(), 0u);
}

TEST(SpinPolicy, ContendedCoresStopEvenASpinOnSpareCores) {
    if (SpinPolicy::usable_cpus() < 3) GTEST_SKIP() << "needs 3 CPUs: a compute thread and two to spare";
    SpinPolicy policy;
    policy.set_compute_threads(1);
    policy.set_peer_busy(true);
    EXPECT_GT(policy.spin_ns(), 0u);
    policy.set_cores_contended(true);
    EXPECT_EQ(policy.spin_ns(), 0u);
}

TEST(SpinPolicy, WaitsLongerThanTheOptionsLimitAreNotSpunThrough) {
    SpinPolicy policy;
    WaitOptions options;
    options.max_spin_ns = 30000;
    policy.set_options(options);
    policy.note_wait(20000);
    EXPECT_GE(policy.spin_ns(), 20000u) << "within the limit: spun through next time";
    policy.note_wait(40000);
    EXPECT_LT(policy.spin_ns(), 20000u) << "past the limit: back to a short spin";
}

TEST(SpinPolicy, OptionsCanForbidSpinningOnSpareCores) {
    if (SpinPolicy::usable_cpus() < 3) GTEST_SKIP() << "needs 3 CPUs: a compute thread and two to spare";
    SpinPolicy policy;
    WaitOptions options;
    options.spin_on_spare_cores = false;
    policy.set_options(options);
    policy.set_compute_threads(1);
    policy.set_peer_busy(true);
    EXPECT_EQ(policy.spin_ns(), 0u) << "whatever the cores to spare";
}

}  // namespace
}  // namespace ggml_remote
