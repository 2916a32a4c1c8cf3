#include "host/worker/session/watchdog.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "host/common/server_log.h"
#include "host/common/serving_options.h"
#include "protocol/wire.h"

namespace ggml_remote::host {

Watchdog::~Watchdog() {
    if (!thread_.joinable()) return;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stopping_ = true;
    }
    wake_.notify_one();
    thread_.join();
}

void Watchdog::arm(Clock::time_point deadline, Wait what, double seconds, uint64_t bytes) {
    if (!thread_.joinable()) thread_ = std::thread(&Watchdog::run, this);
    bool earlier;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (expired_) return;
        deadline_ = deadline;
        what_ = what;
        seconds_ = seconds;
        bytes_ = bytes;
        // A later deadline needs no wake-up (one per frame would cost a system
        // call): the thread wakes at the earlier one and looks again.
        earlier = deadline < sleeping_until_;
    }
    if (earlier) wake_.notify_one();
}

bool Watchdog::disarm() {
    std::lock_guard<std::mutex> lock(mutex_);
    deadline_ = Clock::time_point::max();
    return !expired_;
}

bool Watchdog::expired() {
    std::lock_guard<std::mutex> lock(mutex_);
    return expired_;
}

Status Watchdog::failure() {
    std::lock_guard<std::mutex> lock(mutex_);
    char text[160];
    switch (what_) {
        case Wait::handshake:
            std::snprintf(text, sizeof(text), "no handshake within %.0f s of connecting (--handshake-timeout)",
                          seconds_);
            break;
        case Wait::idle:
            std::snprintf(text, sizeof(text), "idle for %.0f s (--idle-timeout)", seconds_);
            break;
        case Wait::frame:
            std::snprintf(text, sizeof(text), "a frame of %llu bytes was not complete within %.0f s (--frame-timeout)",
                          static_cast<unsigned long long>(bytes_), seconds_);
            break;
        case Wait::reply:
            std::snprintf(text, sizeof(text),
                          "the guest did not take a reply of %llu bytes within %.0f s (--frame-timeout)",
                          static_cast<unsigned long long>(bytes_), seconds_);
            break;
    }
    return error(Code::limit_exceeded, text);
}

void Watchdog::send_keepalives(std::function<void()> send) {
    std::lock_guard<std::mutex> lock(mutex_);
    send_keepalive_ = std::move(send);
}

void Watchdog::keep_alive_if_due() {
    if (!send_keepalive_ || Clock::now() < next_keepalive_) return;
    send_keepalive_();
    next_keepalive_ = Clock::now() + std::chrono::milliseconds(protocol::kKeepAliveIntervalMs);
}

void Watchdog::watch_hangup(bool on) {
    if (guest_gone_ == nullptr) return;
    if (!thread_.joinable()) thread_ = std::thread(&Watchdog::run, this);
    {
        std::lock_guard<std::mutex> lock(mutex_);
        watching_hangup_ = on;
        abandoned_since_ = Clock::time_point::max();
        next_keepalive_ = Clock::now() + std::chrono::milliseconds(protocol::kKeepAliveIntervalMs);
    }
    if (on) wake_.notify_one();  // turning it off needs no wake-up: the thread's next look sees it
}

bool Watchdog::guest_hung_up() const {
    // Not POLLIN: a guest that sends its next commands during a compute is alive.
    pollfd watch{socket_fd_, POLLRDHUP, 0};
    if (::poll(&watch, 1, kHangupPollMs) <= 0) return false;
    return (watch.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

// The abort flag stops ggml-cpu between two nodes; a kernel that never returns (a
// hostile graph that validation let through) would keep the worker, and a core,
// for ever. Once the guest is gone, a compute that has not stopped within
// kAbandonedComputeGraceMs ends the process: there is nobody left to serve.
void Watchdog::end_a_compute_that_will_not_stop(std::unique_lock<std::mutex> *lock) {
    const auto give_up = abandoned_since_ + std::chrono::milliseconds(kAbandonedComputeGraceMs);
    if (Clock::now() < give_up) {
        wake_.wait_until(*lock, give_up);
        return;
    }
    log_warning("the guest is gone and its compute did not stop within " + std::to_string(kAbandonedComputeGraceMs) +
                " ms; ending the worker");
    ::_exit(3);
}

void Watchdog::run() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stopping_) {
        if (watching_hangup_) {
            lock.unlock();
            const bool gone = guest_hung_up();
            lock.lock();
            if (gone) {
                guest_gone_->store(true, std::memory_order_relaxed);
                watching_hangup_ = false;
                abandoned_since_ = Clock::now();
            } else if (watching_hangup_) {  // the compute may have ended while the lock was free
                keep_alive_if_due();
            }
        } else if (abandoned_since_ != Clock::time_point::max()) {
            end_a_compute_that_will_not_stop(&lock);
        } else if (deadline_ == Clock::time_point::max()) {
            sleeping_until_ = Clock::time_point::max();
            wake_.wait(lock);
        } else if (Clock::now() >= deadline_) {
            expired_ = true;
            deadline_ = Clock::time_point::max();
            // Both ways: a blocked recv returns 0, a blocked send fails.
            ::shutdown(socket_fd_, SHUT_RDWR);
        } else {
            sleeping_until_ = deadline_;
            wake_.wait_until(lock, sleeping_until_);
        }
    }
}

}  // namespace ggml_remote::host
