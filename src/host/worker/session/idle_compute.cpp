#include "host/worker/session/idle_compute.h"

#include <sched.h>

namespace ggml_remote::host {

IdleComputeThread::~IdleComputeThread() {
    if (!thread_.joinable()) return;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stopping_ = true;
    }
    changed_.notify_all();
    thread_.join();
}

bool IdleComputeThread::start() {
    started_ = true;
    std::unique_lock<std::mutex> lock(mutex_);
    thread_ = std::thread([this] { serve(); });
    // The thread says whether it got into the idle class before it serves.
    changed_.wait(lock, [this] { return usable_ || stopping_; });
    return usable_;
}

bool IdleComputeThread::run(const std::function<void()> &job) {
    if (!started_ && !start()) return false;
    if (!usable_) return false;
    std::unique_lock<std::mutex> lock(mutex_);
    job_ = &job;
    thrown_ = nullptr;
    changed_.notify_all();
    changed_.wait(lock, [this] { return job_ == nullptr; });
    if (thrown_) std::rethrow_exception(thrown_);
    return true;
}

void IdleComputeThread::serve() {
    const sched_param none{};
    const bool idle = ::sched_setscheduler(0, SCHED_IDLE, &none) == 0;
    std::unique_lock<std::mutex> lock(mutex_);
    usable_ = idle;
    stopping_ = stopping_ || !idle;
    changed_.notify_all();
    while (true) {
        changed_.wait(lock, [this] { return stopping_ || job_ != nullptr; });
        if (job_ == nullptr) return;  // stopping, nothing left to run
        const std::function<void()> *job = job_;
        lock.unlock();
        std::exception_ptr thrown;
        try {
            (*job)();
        } catch (...) {
            thrown = std::current_exception();
        }
        lock.lock();
        thrown_ = thrown;
        job_ = nullptr;
        changed_.notify_all();
    }
}

}  // namespace ggml_remote::host
