// ServicesProcess: the listener's side of the services process (host/services/
// services.h): it starts it, asks it for each new worker's channels, and starts it
// again when it died or stopped answering.
//
// The listener trusts the services process no more than it must: a services process
// a worker took over may lie or stall. So every answer has a deadline (a stall costs
// one spawn that long, then the process is killed), an answer is only a channel of
// the kind asked for, and a services process that is down only means workers start
// without a store or a broker until it is back.
#pragma once

#include <poll.h>
#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "host/common/services_channel.h"
#include "transport/unique_fd.h"

namespace ggml_remote::host {

class ServicesProcess {
  public:
    using Clock = std::chrono::steady_clock;

    // `program`: ggml-remote-services, started with `arguments` and `mask` as its
    // signal mask; empty: no services process (workers get no channels).
    ServicesProcess(std::string program, std::vector<std::string> arguments, const sigset_t &mask);

    // Starts it and waits until it is ready (it opened the store, which may take a
    // scan of the store's directory) or `wait` passed.
    void start(std::chrono::milliseconds wait);
    // A worker's channel to the store's owner for `tenant`; invalid: none.
    UniqueFd store_channel(const std::string &tenant);
    // A worker's channel to the peer broker; invalid: none.
    UniqueFd peer_channel();
    // waitpid reported that `pid` ended: whether it was the services process.
    bool ended(pid_t pid, int wait_status);
    // The listener's poll loop: the services channel while the process is not ready
    // yet (its ready message), and a timeout until a restart is due.
    void add_poll_fds(std::vector<pollfd> *polled);
    int poll_timeout_ms(Clock::time_point now) const;
    // After the poll: takes the ready message, or starts a process that is due.
    void serve(const std::vector<pollfd> &polled);
    // Closes its channel: the services process exits.
    void stop();
    pid_t pid() const { return pid_; }

  private:
    Status ask(services_channel::Request request, UniqueFd *channel);
    bool usable();
    bool wait_ready(int timeout_ms);
    void launch();
    void give_up(const std::string &why);

    std::string program_;
    std::vector<std::string> arguments_;
    sigset_t mask_;
    pid_t pid_ = -1;
    UniqueFd channel_;
    bool ready_ = false;
    bool stopped_ = false;
    std::chrono::milliseconds backoff_;
    Clock::time_point next_start_{};
    size_t polled_at_ = SIZE_MAX;  // where add_poll_fds put the channel
};

}  // namespace ggml_remote::host
