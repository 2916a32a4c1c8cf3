// IdleComputeThread: a thread of the worker's own in the kernel's idle class
// (SCHED_IDLE), where a heavy session's one-thread CPU computes run while light
// sessions are about (core_schedule.h).
//
// Why a thread of its own: a thread may lower its own class, but going back needs a
// privilege the worker does not have. So the session's thread stays in the normal
// class, and this one stays idle-class for the worker's life. In the idle class a
// heavy compute runs whenever a light session's thread does not want the core, and
// gives it up at once when one does, also inside a long node, where stepping aside
// cannot.
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace ggml_remote::host {

class IdleComputeThread {
  public:
    IdleComputeThread() = default;
    IdleComputeThread(const IdleComputeThread &) = delete;
    IdleComputeThread &operator=(const IdleComputeThread &) = delete;
    ~IdleComputeThread();

    // Runs `job` on the idle-class thread and waits for it (an exception it throws is
    // thrown here). False, with `job` not run, where the thread could not be started
    // or put in the idle class: the caller runs it itself.
    bool run(const std::function<void()> &job);

  private:
    void serve();
    bool start();

    std::thread thread_;
    std::mutex mutex_;
    std::condition_variable changed_;
    const std::function<void()> *job_ = nullptr;  // set: a job waits or runs
    std::exception_ptr thrown_;
    bool started_ = false;
    bool usable_ = false;  // it runs in the idle class
    bool stopping_ = false;
};

}  // namespace ggml_remote::host
