// Watchdog: ends a session whose guest keeps its worker waiting.
//
// Session::serve arms it with a deadline while it waits on the guest (for the
// handshake, for the rest of a frame, for the guest to take a reply, between
// frames) and disarms it before it computes. When a deadline passes, a thread of
// its own shuts the guest's socket down, so whatever blocks on it returns.
//
// While a compute runs, the same thread watches the socket for the guest's
// hang-up instead, and raises the session's abort flag when it sees one: a killed
// guest's compute is abandoned instead of holding the worker's memory to its end.
// And it sends the session's keep-alives (send_keepalives()).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>

#include "protocol/status.h"

namespace ggml_remote::host {

class Watchdog {
  public:
    using Clock = std::chrono::steady_clock;

    // What the session was waiting for, for the reason it was ended.
    enum class Wait { handshake, idle, frame, reply };

    // `guest_gone` (may be null) is set when the guest hangs up during a compute.
    explicit Watchdog(int socket_fd, std::atomic<bool> *guest_gone = nullptr)
        : socket_fd_(socket_fd), guest_gone_(guest_gone) {}
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

    // While a HangupWatch lasts, `send` is called every protocol::kKeepAliveIntervalMs,
    // the first one interval after the watch began (a short compute sends none), on
    // the watchdog's thread and under its lock. A watch ends under the same lock,
    // so a call in progress is over before the session's thread, back from its
    // compute, uses the stream again; none is made between two watches. A guest
    // cannot make more than one a second: a compute is a request it waits on.
    void send_keepalives(std::function<void()> send);

    // Watches for the guest's hang-up from construction to destruction (a compute).
    // A null watchdog (in-process tests) watches nothing.
    class HangupWatch {
      public:
        explicit HangupWatch(Watchdog *watchdog) : watchdog_(watchdog) {
            if (watchdog_ != nullptr) watchdog_->watch_hangup(true);
        }
        ~HangupWatch() {
            if (watchdog_ != nullptr) watchdog_->watch_hangup(false);
        }
        HangupWatch(const HangupWatch &) = delete;
        HangupWatch &operator=(const HangupWatch &) = delete;

      private:
        Watchdog *watchdog_;
    };

    // How often the watching thread looks up from the socket to see whether the
    // compute is over (a hang-up wakes it at once).
    static constexpr int kHangupPollMs = 50;
    // How long a compute whose guest is gone may go on before the worker exits.
    static constexpr int kAbandonedComputeGraceMs = 5000;

  private:
    void run();
    void watch_hangup(bool on);
    // While watching for a hang-up: a keep-alive when one is due (the lock held).
    void keep_alive_if_due();
    // One look at the socket, waiting up to kHangupPollMs; true if the guest hung up.
    bool guest_hung_up() const;
    void end_a_compute_that_will_not_stop(std::unique_lock<std::mutex> *lock);

    const int socket_fd_;
    std::atomic<bool> *const guest_gone_;
    std::thread thread_;  // started by the first arm() or watch_hangup()
    std::mutex mutex_;
    std::condition_variable wake_;
    Clock::time_point deadline_ = Clock::time_point::max();
    Clock::time_point sleeping_until_ = Clock::time_point::max();  // the thread's next look at the clock
    bool expired_ = false;
    bool stopping_ = false;
    bool watching_hangup_ = false;
    // When the guest hung up during the compute still running; max(): it did not.
    Clock::time_point abandoned_since_ = Clock::time_point::max();
    std::function<void()> send_keepalive_;
    Clock::time_point next_keepalive_ = Clock::time_point::max();
    Wait what_ = Wait::idle;
    double seconds_ = 0;
    uint64_t bytes_ = 0;
};

}  // namespace ggml_remote::host
