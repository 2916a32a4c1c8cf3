// Watchdog: a guest that hangs up during a compute raises the abort flag, and a
// compute that then does not stop (a kernel that never returns) ends the worker.
#include "host/worker/session/watchdog.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "protocol/wire.h"

namespace ggml_remote::host {
namespace {

TEST(WatchdogDeathTest, AComputeThatOutlivesItsGoneGuestEndsTheWorker) {
    EXPECT_EXIT(
        {
            int fds[2];
            if (::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) std::_Exit(9);
            std::atomic<bool> guest_gone{false};
            Watchdog watchdog(fds[0], &guest_gone);
            Watchdog::HangupWatch computing(&watchdog);
            ::close(fds[1]);                                                // the guest is killed
            for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));  // a kernel that never returns
        },
        ::testing::ExitedWithCode(3), "did not stop within 5000 ms");
}

TEST(Watchdog, AComputeThatEndsAfterItsGuestLeftKeepsTheWorker) {
    int fds[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    std::atomic<bool> guest_gone{false};
    {
        Watchdog watchdog(fds[0], &guest_gone);
        {
            Watchdog::HangupWatch computing(&watchdog);
            ::close(fds[1]);
            for (int i = 0; i < 100 && !guest_gone.load(); ++i)
                std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }  // the compute saw the flag and stopped
        EXPECT_TRUE(guest_gone.load());
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    ::close(fds[0]);
}

// Keep-alives are sent while a compute lasts, one an interval, and never once it ended.
TEST(Watchdog, KeepAlivesFlowOnlyWhileAComputeLastsAndNoFasterThanTheInterval) {
    int fds[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    std::atomic<bool> guest_gone{false};
    std::mutex mutex;
    std::condition_variable sent;
    int keepalives = 0;
    Watchdog watchdog(fds[0], &guest_gone);
    watchdog.send_keepalives([&] {
        std::lock_guard<std::mutex> lock(mutex);
        ++keepalives;
        sent.notify_all();
    });
    const auto began = std::chrono::steady_clock::now();
    {
        Watchdog::HangupWatch computing(&watchdog);
        std::unique_lock<std::mutex> lock(mutex);
        ASSERT_TRUE(sent.wait_for(lock, std::chrono::seconds(30), [&] { return keepalives >= 2; }));
    }
    const auto computed = std::chrono::steady_clock::now() - began;
    EXPECT_GE(computed, std::chrono::milliseconds(2 * protocol::kKeepAliveIntervalMs)) << "one an interval at most";
    int after_the_compute = 0;
    {
        std::lock_guard<std::mutex> lock(mutex);
        after_the_compute = keepalives;
    }
    // Two intervals with no compute: none may come (the watch ended under the lock).
    std::this_thread::sleep_for(std::chrono::milliseconds(2 * protocol::kKeepAliveIntervalMs));
    std::lock_guard<std::mutex> lock(mutex);
    EXPECT_EQ(keepalives, after_the_compute) << "a keep-alive after the compute ended";
    EXPECT_FALSE(guest_gone.load());
    ::close(fds[1]);
}

}  // namespace
}  // namespace ggml_remote::host
