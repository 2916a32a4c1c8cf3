#include "host/listener/services_process.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "host/common/server_log.h"
#include "host/common/store_channel.h"

namespace ggml_remote::host {

namespace {

using services_channel::Kind;
using services_channel::Reply;
using services_channel::Request;

// How long one answer may take: a socket pair and a thread. A services process
// that takes longer is stuck or hostile, and is killed.
constexpr int kAnswerMs = 2000;
// Restarts: after 1 s, doubling to a minute while it keeps dying before it is ready.
constexpr std::chrono::milliseconds kFirstBackoff{1000};
constexpr std::chrono::milliseconds kLongestBackoff{60000};

// In the child, between fork and exec: only async-signal-safe calls.
[[noreturn]] void become_services(const char *program, char *const argv[], int channel, const sigset_t &mask) {
    ::sigprocmask(SIG_SETMASK, &mask, nullptr);
    if (channel == kServicesChannelFd) {
        ::fcntl(channel, F_SETFD, 0);
    } else if (::dup2(channel, kServicesChannelFd) < 0) {
        ::_exit(127);
    }
    ::execv(program, argv);
    std::fprintf(stderr, "ggml-remote-server: cannot start the services process %s: %s\n", program,
                 std::strerror(errno));
    ::_exit(127);
}

std::string describe_end(int wait_status) {
    if (WIFSIGNALED(wait_status)) {
        return "died from signal " + std::to_string(WTERMSIG(wait_status)) + " (" + strsignal(WTERMSIG(wait_status)) +
               ")";
    }
    return "exited with code " + std::to_string(WEXITSTATUS(wait_status));
}

}  // namespace

ServicesProcess::ServicesProcess(std::string program, std::vector<std::string> arguments, const sigset_t &mask)
    : program_(std::move(program)), arguments_(std::move(arguments)), mask_(mask), backoff_(kFirstBackoff) {}

void ServicesProcess::launch() {
    if (program_.empty() || stopped_) return;
    int pair[2];
    if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) {
        log_warning(std::string("services process: socketpair: ") + std::strerror(errno));
        return;
    }
    UniqueFd ours(pair[0]), theirs(pair[1]);
    // Everything the child needs is built before fork: it may not allocate after.
    std::vector<std::string> args = arguments_;
    args.insert(args.begin(), program_);
    std::vector<char *> argv;
    for (std::string &arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);
    const pid_t child = ::fork();
    if (child < 0) {
        log_warning(std::string("services process: fork: ") + std::strerror(errno));
        return;
    }
    if (child == 0) become_services(program_.c_str(), argv.data(), theirs.get(), mask_);
    pid_ = child;
    channel_ = std::move(ours);
    ready_ = false;
    next_start_ = Clock::now() + backoff_;
}

void ServicesProcess::start(std::chrono::milliseconds wait) {
    launch();
    if (channel_.valid() && !wait_ready(static_cast<int>(wait.count()))) {
        log_warning("services process (pid " + std::to_string(pid_) + ") is not ready after " +
                    std::to_string(wait.count() / 1000) + " s: workers start without a store or a broker until it is");
    }
}

bool ServicesProcess::wait_ready(int timeout_ms) {
    Reply reply;
    if (!store_channel::receive_message(channel_.get(), &reply, sizeof(reply), nullptr, 0, timeout_ms)) {
        // Nothing yet, or it ended before it was ready (its end closed).
        pollfd poll_fd{channel_.get(), POLLIN, 0};
        if (::poll(&poll_fd, 1, 0) != 0) give_up("ended before it was ready");
        return false;
    }
    if (reply.kind != static_cast<uint32_t>(Kind::ready)) {
        give_up("said something else than that it is ready");
        return false;
    }
    ready_ = true;
    backoff_ = kFirstBackoff;
    log_line("services process (pid " + std::to_string(pid_) +
             "): weight store, model library and peer broker, "
             "sandboxed");
    return true;
}

void ServicesProcess::give_up(const std::string &why) {
    log_warning("services process (pid " + std::to_string(pid_) + ") " + why + "; it is started again");
    if (pid_ > 0) ::kill(pid_, SIGKILL);  // reaped with the workers (ended)
    channel_.reset();
    ready_ = false;
}

bool ServicesProcess::usable() {
    if (!channel_.valid() && !stopped_ && Clock::now() >= next_start_) launch();
    if (channel_.valid() && !ready_) (void)wait_ready(0);
    return channel_.valid() && ready_;
}

Status ServicesProcess::ask(Request request, UniqueFd *channel) {
    if (!usable()) return error(Code::disconnected, "the services process is not running (it is started again)");
    Reply reply;
    std::vector<UniqueFd> fds;
    if (!store_channel::send_message(channel_.get(), &request, sizeof(request), nullptr, 0) ||
        !store_channel::receive_message(channel_.get(), &reply, sizeof(reply), &fds, 1, kAnswerMs)) {
        give_up("did not answer within " + std::to_string(kAnswerMs) + " ms");
        return error(Code::disconnected, "the services process did not answer");
    }
    if (reply.kind != request.kind || (reply.code == 0) != (fds.size() == 1)) {
        give_up("answered something else than it was asked");
        return error(Code::disconnected, "the services process answered something else than it was asked");
    }
    reply.message[sizeof(reply.message) - 1] = '\0';
    if (reply.code != 0) return error(static_cast<Code>(reply.code), reply.message);
    *channel = std::move(fds.front());
    return Status::success();
}

UniqueFd ServicesProcess::store_channel(const std::string &tenant) {
    Request request;
    request.kind = static_cast<uint32_t>(Kind::store);
    std::snprintf(request.tenant_directory, sizeof(request.tenant_directory), "%s",
                  store_tenant_directory(tenant).c_str());
    UniqueFd channel;
    const Status status = ask(request, &channel);
    if (!status && status.code() != services_channel::kNotServed) {
        log_warning("no weight store for this session: " + status.message());
    }
    return channel;
}

UniqueFd ServicesProcess::peer_channel() {
    Request request;
    request.kind = static_cast<uint32_t>(Kind::peer);
    UniqueFd channel;
    const Status status = ask(request, &channel);
    if (!status) log_warning("no tensor-parallel links for this session: " + status.message());
    return channel;
}

bool ServicesProcess::ended(pid_t pid, int wait_status) {
    if (pid != pid_ || pid_ <= 0) return false;
    if (!stopped_ && channel_.valid()) {
        log_error("services process (pid " + std::to_string(pid) + ") " + describe_end(wait_status) +
                  "; workers start without a store or a broker until it is started again");
    }
    if (!ready_) backoff_ = std::min(backoff_ * 2, kLongestBackoff);
    pid_ = -1;
    channel_.reset();
    ready_ = false;
    return true;  // started again by serve(), at once or after the backoff
}

void ServicesProcess::add_poll_fds(std::vector<pollfd> *polled) {
    polled_at_ = SIZE_MAX;
    if (!channel_.valid() || ready_) return;
    polled_at_ = polled->size();
    polled->push_back({channel_.get(), POLLIN, 0});
}

int ServicesProcess::poll_timeout_ms(Clock::time_point now) const {
    if (channel_.valid() || stopped_ || program_.empty()) return -1;
    if (now >= next_start_) return 0;
    return static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(next_start_ - now).count());
}

void ServicesProcess::serve(const std::vector<pollfd> &polled) {
    if (polled_at_ < polled.size() && polled[polled_at_].revents != 0 && channel_.valid() && !ready_) {
        (void)wait_ready(0);
    }
    polled_at_ = SIZE_MAX;
    if (!channel_.valid() && !stopped_ && Clock::now() >= next_start_) launch();
}

void ServicesProcess::stop() {
    stopped_ = true;
    channel_.reset();
}

}  // namespace ggml_remote::host
