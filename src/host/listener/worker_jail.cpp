#include "host/listener/worker_jail.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <thread>
#include <utility>

#include "host/common/server_log.h"

namespace ggml_remote::host {

namespace {

constexpr std::chrono::milliseconds kShutdownPoll{50};

// In the child, between fork and exec: only async-signal-safe calls.
[[noreturn]] void become_worker(const char *program, char *const argv[], const WorkerLaunch &launch,
                                const sigset_t &mask) {
    ::sigprocmask(SIG_SETMASK, &mask, nullptr);
    const int status_fd = launch.status_slot >= 0 ? launch.status_fd : -1;
    for (int fd : {launch.client_fd, status_fd, launch.admission_fd, launch.store_fd, launch.peer_fd}) {
        if (fd < 0) continue;
        const int flags = ::fcntl(fd, F_GETFD);
        ::fcntl(fd, F_SETFD, flags & ~FD_CLOEXEC);
    }
    ::execv(program, argv);
    ::execvp(argv[0], argv);
    std::fprintf(stderr, "ggml-remote-server: cannot start a session worker: %s\n", std::strerror(errno));
    ::_exit(127);
}

}  // namespace

WorkerJail::WorkerJail(std::vector<std::string> command, const sigset_t &worker_mask, std::string program)
    : command_(std::move(command)), worker_mask_(worker_mask), program_(std::move(program)) {}

std::vector<std::string> WorkerJail::worker_arguments(const WorkerLaunch &launch) const {
    std::vector<std::string> args = command_;
    const std::vector<std::string> launch_args = worker_launch_arguments(launch);
    args.insert(args.end(), launch_args.begin(), launch_args.end());
    return args;
}

Status WorkerJail::spawn(const WorkerLaunch &launch, pid_t *pid) {
    // Everything the child needs is built before fork: it may not allocate after.
    std::vector<std::string> args = worker_arguments(launch);
    std::vector<char *> argv;
    for (std::string &arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);

    const pid_t child = ::fork();
    if (child < 0) return error(Code::error, std::string("fork: ") + std::strerror(errno));
    if (child == 0) become_worker(program_.c_str(), argv.data(), launch, worker_mask_);
    workers_[child] = {launch.session_id, launch.peer, launch.status_slot};
    *pid = child;
    return Status::success();
}

std::vector<EndedWorker> WorkerJail::reap(std::vector<EndedChild> *others) {
    std::vector<EndedWorker> ended;
    int wait_status = 0;
    pid_t pid;
    while ((pid = ::waitpid(-1, &wait_status, WNOHANG)) > 0) {
        const auto it = workers_.find(pid);
        if (it == workers_.end()) {
            if (others != nullptr) others->push_back({pid, wait_status});
            continue;
        }
        ended.push_back({pid, std::move(it->second), wait_status});
        workers_.erase(it);
    }
    return ended;
}

void WorkerJail::kill(pid_t pid) const {
    if (workers_.count(pid) != 0) ::kill(pid, SIGKILL);
}

const WorkerRecord *WorkerJail::find(pid_t pid) const {
    const auto it = workers_.find(pid);
    return it == workers_.end() ? nullptr : &it->second;
}

void WorkerJail::signal_all(int signal) const {
    for (const auto &entry : workers_) ::kill(entry.first, signal);
}

bool WorkerJail::forget_ended() {
    pid_t pid;
    while ((pid = ::waitpid(-1, nullptr, WNOHANG)) > 0) workers_.erase(pid);
    return pid == 0;
}

void WorkerJail::shut_down(std::chrono::milliseconds grace) {
    signal_all(SIGTERM);
    bool killed = false;
    for (auto waited = std::chrono::milliseconds(0); !workers_.empty(); waited += kShutdownPoll) {
        if (!forget_ended() || workers_.empty()) break;
        if (!killed && waited >= grace) {
            log_warning(std::to_string(workers_.size()) + " session worker(s) did not stop; killing them");
            signal_all(SIGKILL);
            killed = true;
        }
        std::this_thread::sleep_for(kShutdownPoll);
    }
    workers_.clear();
}

Status find_helper_program(const std::string &name, const std::string &what, std::string *path) {
    char own[4096];
    const ssize_t length = ::readlink("/proc/self/exe", own, sizeof(own) - 1);
    if (length <= 0) return error(Code::error, std::string("cannot read /proc/self/exe: ") + std::strerror(errno));
    const std::string program(own, static_cast<size_t>(length));
    const std::string directory = program.substr(0, program.rfind('/'));
    for (const std::string &candidate : {directory + "/" + name, directory + "/../libexec/ggml-remote/" + name}) {
        if (::access(candidate.c_str(), X_OK) == 0) {
            *path = candidate;
            return Status::success();
        }
    }
    return error(Code::not_found, "cannot find the " + what + " program " + name + " beside " + directory + " or in " +
                                      directory + "/../libexec/ggml-remote/ (is the installation whole?)");
}

Status find_worker_program(std::string *path) {
    return find_helper_program("ggml-remote-worker", "session worker", path);
}

}  // namespace ggml_remote::host
