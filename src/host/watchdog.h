// Watchdog: ends a session whose guest keeps its worker waiting.
//
// Session::serve arms it with a deadline while it waits on the guest (for the
// handshake, for the rest of a frame, for the guest to take a reply, between
// frames) and disarms it before it computes. When a deadline passes, a thread of
// its own shuts the guest's socket down, so whatever blocks on it returns.
#pragma once

#include "protocol/status.h"

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

namespace ggml_remote::host {

class Watchdog {
  public:
    using Clock = std::chrono::steady_clock;

    // What the session was waiting for, for the reason it was ended.
    enum class Wait { handshake, idle, frame, reply };

    explicit Watchdog(int socket_fd) : socket_fd_(socket_fd) {}
    ~Watchdog();
    Watchdog(const Watchdog &) = delete;
    Watchdog &operator=(const Watchdog &) = delete;

    // The guest has until `deadline` (`seconds` from now, said in the reason) to
    // get the session to the next disarm(); a later arm() replaces the deadline.
    void arm(Clock::time_point deadline, Wait what, double seconds, uint64_t bytes = 0);
    // Stops the clock. False if the deadline had already passed (the socket is shut).
    bool disarm();
    bool expired();
    // Why the session was ended, once expired().
    Status failure();

  private:
    void run();

    const int socket_fd_;
    std::thread thread_;  // started by the first arm()
    std::mutex mutex_;
    std::condition_variable wake_;
    Clock::time_point deadline_ = Clock::time_point::max();
    Clock::time_point sleeping_until_ = Clock::time_point::max();  // the thread's next look at the clock
    bool expired_ = false;
    bool stopping_ = false;
    Wait what_ = Wait::idle;
    double seconds_ = 0;
    uint64_t bytes_ = 0;
};

}  // namespace ggml_remote::host
