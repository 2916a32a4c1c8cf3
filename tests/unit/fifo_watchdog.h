// For tests of code that must not block on a FIFO in a file's place: a
// regression should fail the test, not hang ctest.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <future>
#include <string>
#include <thread>

namespace ggml_remote::test_support {

// Runs `call` on a thread of its own and says whether it returned without help.
// Returning at all is the test; the watchdog's patience is only generous. If it
// runs out, a writer opens the FIFO at `fifo` (an open blocked on it returns,
// reads find its end) so that the call ends and the test fails instead.
inline bool returns_without_a_writer(const std::string &fifo, const std::function<void()> &call) {
    std::promise<void> finished;
    std::future<void> returned = finished.get_future();
    std::thread caller([&] {
        call();
        finished.set_value();
    });
    const bool by_itself = returned.wait_for(std::chrono::seconds(60)) == std::future_status::ready;
    while (!by_itself && returned.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready) {
        const int writer = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
        if (writer >= 0) ::close(writer);
    }
    caller.join();
    return by_itself;
}

}  // namespace ggml_remote::test_support
