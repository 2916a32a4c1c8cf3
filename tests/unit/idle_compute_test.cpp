// IdleComputeThread: heavy computes beside light sessions run in the kernel's idle
// class, on a thread of their own, and what they throw reaches the caller.
#include "host/worker/session/idle_compute.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <stdexcept>
#include <thread>

namespace ggml_remote::host {
namespace {

TEST(IdleComputeThread, AJobRunsOnAnotherThreadInTheIdleClass) {
    IdleComputeThread idle;
    std::thread::id ran_on;
    int policy = -1;
    ASSERT_TRUE(idle.run([&] {
        ran_on = std::this_thread::get_id();
        policy = ::sched_getscheduler(0);
    }));
    EXPECT_NE(ran_on, std::this_thread::get_id());
    EXPECT_EQ(policy, SCHED_IDLE);
    EXPECT_NE(::sched_getscheduler(0), SCHED_IDLE);  // the caller's class is its own
}

TEST(IdleComputeThread, JobsRunOneAfterAnotherOnTheSameThread) {
    IdleComputeThread idle;
    std::thread::id first, second;
    int sum = 0;
    ASSERT_TRUE(idle.run([&] { first = std::this_thread::get_id(), sum += 1; }));
    ASSERT_TRUE(idle.run([&] { second = std::this_thread::get_id(), sum += 2; }));
    EXPECT_EQ(first, second);
    EXPECT_EQ(sum, 3);
}

TEST(IdleComputeThread, WhatAJobThrowsIsThrownToTheCaller) {
    IdleComputeThread idle;
    EXPECT_THROW(idle.run([] { throw std::runtime_error("a backend failed"); }), std::runtime_error);
    bool ran = false;
    EXPECT_TRUE(idle.run([&] { ran = true; }));  // and the thread serves on
    EXPECT_TRUE(ran);
}

}  // namespace
}  // namespace ggml_remote::host
