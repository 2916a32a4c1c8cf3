// WorkerJail (src/host/listener/worker_jail.h): starts workers with their arguments and only
// the descriptors they are given, reports how they ended, and ends them all at
// shutdown within a bound, even one that ignores SIGTERM.
#include "host/listener/worker_jail.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <string>
#include <thread>

namespace ggml_remote::host {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// A pipe whose ends close on exec unless a WorkerLaunch hands one over.
struct Pipe {
    int read_end = -1, write_end = -1;
    Pipe() {
        int fds[2];
        if (::pipe2(fds, O_CLOEXEC) == 0) {
            read_end = fds[0];
            write_end = fds[1];
        }
    }
    ~Pipe() {
        if (read_end >= 0) ::close(read_end);
        if (write_end >= 0) ::close(write_end);
    }
};

sigset_t empty_mask() {
    sigset_t mask;
    sigemptyset(&mask);
    return mask;
}

// A jail whose workers run `script` with /bin/sh; the per-connection arguments
// become $1, $2, ...
WorkerJail shell_jail(const std::string &script) {
    return WorkerJail({"sh", "-c", script, "worker"}, empty_mask(), "/bin/sh");
}

// Waits (up to 10 s) until reap() reports a worker.
std::vector<EndedWorker> reap_within_10s(WorkerJail *jail) {
    for (auto deadline = Clock::now() + 10s; Clock::now() < deadline; std::this_thread::sleep_for(10ms)) {
        std::vector<EndedWorker> ended = jail->reap();
        if (!ended.empty()) return ended;
    }
    return {};
}

// Blocks until the worker wrote a line to `fd` (it is past its setup).
std::string read_line(int fd) {
    std::string line;
    char c;
    while (::read(fd, &c, 1) == 1 && c != '\n') line += c;
    return line;
}

TEST(WorkerJail, ReapReportsAnEndedWorkerWithItsExitStatusAndRecord) {
    WorkerJail jail = shell_jail("exit 3");
    Pipe client;
    pid_t pid = -1;
    ASSERT_TRUE(jail.spawn({client.write_end, 7, "unix:test", -1, -1, -1}, &pid).ok());
    ASSERT_NE(jail.find(pid), nullptr);

    const std::vector<EndedWorker> ended = reap_within_10s(&jail);

    ASSERT_EQ(ended.size(), 1u);
    EXPECT_EQ(ended[0].pid, pid);
    EXPECT_EQ(ended[0].record.session_id, 7);
    EXPECT_EQ(ended[0].record.peer, "unix:test");
    EXPECT_EQ(ended[0].record.slot, -1);
    ASSERT_TRUE(WIFEXITED(ended[0].wait_status));
    EXPECT_EQ(WEXITSTATUS(ended[0].wait_status), 3);
    EXPECT_TRUE(jail.workers().empty());
    EXPECT_TRUE(jail.reap().empty());
}

TEST(WorkerJail, ReapReturnsAtOnceWhileWorkersRun) {
    WorkerJail jail = shell_jail("exec sleep 30");
    Pipe client;
    pid_t pid = -1;
    ASSERT_TRUE(jail.spawn({client.write_end, 1, "peer", -1, -1, -1}, &pid).ok());

    EXPECT_TRUE(jail.reap().empty());
    EXPECT_EQ(jail.workers().size(), 1u);
    jail.kill(pid);
    const std::vector<EndedWorker> ended = reap_within_10s(&jail);
    ASSERT_EQ(ended.size(), 1u);
    ASSERT_TRUE(WIFSIGNALED(ended[0].wait_status));
    EXPECT_EQ(WTERMSIG(ended[0].wait_status), SIGKILL);
}

// The worker checks its arguments and descriptors and exits 0 when all are as expected.
TEST(WorkerJail, AWorkerGetsItsArgumentsAndOnlyTheDescriptorsHandedOver) {
    Pipe client, board, admission, kept_back;
    const std::string script = "[ \"$*\" = \"--worker-fd " + std::to_string(client.write_end) +
                               " --session-id 5 --peer tls://10.0.0.1:9 " + "--status-fd " +
                               std::to_string(board.write_end) + " --status-slot 2 --admission-fd " +
                               std::to_string(admission.write_end) + "\" ] || exit 10\n" +
                               "for fd in $2 $8 ${12}; do [ -e /proc/self/fd/$fd ] || exit 11; done\n"
                               "[ ! -e /proc/self/fd/" +
                               std::to_string(kept_back.write_end) + " ] || exit 12\n";
    WorkerJail jail = shell_jail(script);
    pid_t pid = -1;
    ASSERT_TRUE(
        jail.spawn({client.write_end, 5, "tls://10.0.0.1:9", board.write_end, 2, admission.write_end}, &pid).ok());

    const std::vector<EndedWorker> ended = reap_within_10s(&jail);

    ASSERT_EQ(ended.size(), 1u);
    ASSERT_TRUE(WIFEXITED(ended[0].wait_status));
    EXPECT_EQ(WEXITSTATUS(ended[0].wait_status), 0) << "10: arguments, 11: a descriptor missing, 12: one leaked";
    EXPECT_EQ(ended[0].record.slot, 2);
}

TEST(WorkerJail, AnUnlistedWorkerGetsNoStatusBoard) {
    Pipe client, board;
    WorkerJail jail = shell_jail(
        "case \"$*\" in *--status*) exit 10;; esac\n"
        "[ ! -e /proc/self/fd/" +
        std::to_string(board.write_end) + " ] || exit 12\n");
    pid_t pid = -1;
    ASSERT_TRUE(jail.spawn({client.write_end, 5, "peer", board.write_end, -1, -1}, &pid).ok());

    const std::vector<EndedWorker> ended = reap_within_10s(&jail);

    ASSERT_EQ(ended.size(), 1u);
    ASSERT_TRUE(WIFEXITED(ended[0].wait_status));
    EXPECT_EQ(WEXITSTATUS(ended[0].wait_status), 0);
}

// Starts a worker of `jail` and waits until it says it is ready; its pid.
pid_t spawn_ready_worker(WorkerJail *jail, const Pipe &client) {
    pid_t pid = -1;
    EXPECT_TRUE(jail->spawn({client.write_end, 1, "peer", -1, -1, -1}, &pid).ok());
    EXPECT_EQ(read_line(client.read_end), "ready");
    return pid;
}

// How long jail->shut_down(grace) took.
Clock::duration time_shut_down(WorkerJail *jail, std::chrono::milliseconds grace) {
    const auto started = Clock::now();
    jail->shut_down(grace);
    return Clock::now() - started;
}

bool reaped(pid_t pid) { return ::kill(pid, 0) == -1 && errno == ESRCH; }

// The listener blocks SIGTERM (it reads it through a signalfd); its workers must
// not, or shutdown would have to kill every one of them.
TEST(WorkerJail, ShutDownEndsWorkersThatHeedSigtermWithoutWaitingOutTheGrace) {
    sigset_t term, before;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    ASSERT_EQ(::sigprocmask(SIG_BLOCK, &term, &before), 0);
    WorkerJail jail({"sh", "-c", "echo ready >/proc/self/fd/$2; exec sleep 30", "worker"}, before, "/bin/sh");
    Pipe client;
    const pid_t pid = spawn_ready_worker(&jail, client);

    const Clock::duration took = time_shut_down(&jail, 5s);

    ::sigprocmask(SIG_SETMASK, &before, nullptr);
    EXPECT_LT(took, 3s);
    EXPECT_TRUE(jail.workers().empty());
    EXPECT_TRUE(reaped(pid));
}

TEST(WorkerJail, ShutDownKillsAWorkerThatIgnoresSigtermOnceTheGraceIsOver) {
    // An ignored signal stays ignored across exec: sleep never ends on SIGTERM.
    WorkerJail jail = shell_jail("trap '' TERM; echo ready >/proc/self/fd/$2; exec sleep 30");
    Pipe client;
    const pid_t pid = spawn_ready_worker(&jail, client);

    const Clock::duration took = time_shut_down(&jail, 300ms);

    EXPECT_GE(took, 300ms) << "killed before the grace was over";
    EXPECT_LT(took, 3s) << "the grace did not bound the shutdown";
    EXPECT_TRUE(jail.workers().empty());
    EXPECT_TRUE(reaped(pid));
}

}  // namespace
}  // namespace ggml_remote::host
