// Watchdog: a guest that hangs up during a compute raises the abort flag, and a
// compute that then does not stop (a kernel that never returns) ends the worker.
#include "host/worker/session/watchdog.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

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

}  // namespace
}  // namespace ggml_remote::host
