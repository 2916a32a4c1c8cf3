// The worker sandbox: what a sandboxed process can no longer do, and what a
// session worker still needs (threads, memory files, its socket, the CPU backend).
// Each test sandboxes a child process of its own and reports back through a pipe.
#include "host/worker/jail/sandbox.h"

#include <fcntl.h>
#include <ggml-alloc.h>
#include <ggml-backend.h>
#include <ggml.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "host/worker/jail/worker_identity.h"
#include "host/worker/session/host_devices.h"

namespace ggml_remote::host {
namespace {

// Runs `body` in a child process after `prepare` (sandboxing, by default); returns
// what body reported (empty when every check held) or why the child failed.
std::string in_child(
    const std::function<std::string()> &body, const std::function<Status()> &prepare = [] { return enter_sandbox(); }) {
    int fds[2];
    if (::pipe(fds) != 0) return "pipe failed";
    const pid_t child = ::fork();
    if (child == 0) {
        ::close(fds[0]);
        Status status = prepare();
        const std::string report = status.ok() ? body() : "prepare: " + status.message();
        (void)!::write(fds[1], report.data(), report.size());
        ::_exit(0);
    }
    ::close(fds[1]);
    std::string report;
    char chunk[512];
    ssize_t got;
    while ((got = ::read(fds[0], chunk, sizeof(chunk))) > 0) report.append(chunk, static_cast<size_t>(got));
    ::close(fds[0]);
    int status = 0;
    ::waitpid(child, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        report += " (the child died: status " + std::to_string(status) + ")";
    }
    return report;
}

// "name: expected errno E, got R/errno" when a call did not fail as it should.
std::string expect_errno(const char *name, long result, int expected) {
    if (result == -1 && errno == expected) return "";
    return std::string(name) + ": expected " + std::strerror(expected) + ", got " + std::to_string(result) + " (" +
           std::strerror(errno) + "); ";
}

std::string expect_ok(const char *name, bool ok) {
    return ok ? "" : std::string(name) + " failed: " + std::strerror(errno) + "; ";
}

std::string status_line(const std::string &key) {
    std::ifstream status("/proc/self/status");
    std::string line;
    while (std::getline(status, line)) {
        if (line.rfind(key + ":", 0) == 0) return line;
    }
    return "";
}

TEST(SandboxTest, RefusesNewProgramsProcessesAndConnections) {
    const std::string report = in_child([] {
        std::string failures;
        // A path that does not exist: the filter answers before the kernel looks.
        char *const argv[] = {const_cast<char *>("/nonexistent/true"), nullptr};
        failures += expect_errno("execve", ::execve(argv[0], argv, environ), EPERM);
        const pid_t forked = ::fork();
        if (forked == 0) ::_exit(0);
        failures += expect_errno("fork", forked, EPERM);
        const long cloned = ::syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0);
        if (cloned == 0) ::_exit(0);
        failures += expect_errno("clone without CLONE_THREAD", cloned, EPERM);
        failures += expect_errno("clone3", ::syscall(SYS_clone3, nullptr, 0), ENOSYS);
        failures += expect_errno("socket(AF_INET)", ::socket(AF_INET, SOCK_STREAM, 0), EPERM);
        failures += expect_errno("socket(AF_UNIX)", ::socket(AF_UNIX, SOCK_STREAM, 0), EPERM);
        failures += expect_errno("ptrace", ::ptrace(PTRACE_TRACEME, 0, nullptr, nullptr), EPERM);
        failures += expect_errno("unshare", ::unshare(CLONE_NEWUSER), EPERM);
        failures += expect_errno("io_uring_setup", ::syscall(SYS_io_uring_setup, 1, nullptr), EPERM);
        failures += expect_errno("kill(parent)", ::kill(::getppid(), 0), EPERM);
        failures += expect_errno("kill(process group)", ::kill(0, 0), EPERM);
        failures += expect_ok("kill(self, 0)", ::kill(::getpid(), 0) == 0);
        rlimit files{};
        failures += expect_ok("getrlimit", ::getrlimit(RLIMIT_NOFILE, &files) == 0);
        files.rlim_cur = files.rlim_max = files.rlim_max + 1;
        failures += expect_errno("setrlimit(RLIMIT_NOFILE) up", ::setrlimit(RLIMIT_NOFILE, &files), EPERM);
        rlimit core{};
        ::getrlimit(RLIMIT_CORE, &core);
        if (core.rlim_max != 0) failures += "core dumps still allowed; ";
        if (status_line("NoNewPrivs") != "NoNewPrivs:\t1") failures += status_line("NoNewPrivs") + "; ";
        if (status_line("Seccomp") != "Seccomp:\t2") failures += status_line("Seccomp") + "; ";
        return failures;
    });
    EXPECT_EQ(report, "");
}

// Code in a worker must not move, slow down or reprioritise the listener or another
// worker; it may still do so for itself (the pid argument 0: the calling thread).
TEST(SandboxTest, RefusesSchedulingPriorityAndPlacementOfOtherProcesses) {
    const std::string report = in_child([] {
        std::string failures;
        // Each attempt asks for what the target already has, and groups and users that
        // have no processes: were a call let through, nothing would change.
        const pid_t parent = ::getppid();
        constexpr id_t kNoSuchGroupOrUser = 0x7ffffff0;
        cpu_set_t cpus;
        CPU_ZERO(&cpus);
        ::sched_getaffinity(parent, sizeof(cpus), &cpus);
        failures += expect_errno("sched_setaffinity(parent)", ::sched_setaffinity(parent, sizeof(cpus), &cpus), EPERM);
        ::sched_getaffinity(0, sizeof(cpus), &cpus);
        failures += expect_ok("sched_setaffinity(0)", ::sched_setaffinity(0, sizeof(cpus), &cpus) == 0);
        sched_param param{};
        ::sched_getparam(parent, &param);
        const int policy = ::sched_getscheduler(parent);
        failures += expect_errno("sched_setscheduler(parent)", ::sched_setscheduler(parent, policy, &param), EPERM);
        failures += expect_errno("sched_setparam(parent)", ::sched_setparam(parent, &param), EPERM);
        ::sched_getparam(0, &param);
        failures += expect_ok("sched_setparam(0)", ::sched_setparam(0, &param) == 0);
        char attributes[56] = {};  // struct sched_attr; refused before the kernel reads it
        failures += expect_errno("sched_setattr(parent)", ::syscall(SYS_sched_setattr, parent, attributes, 0), EPERM);
        errno = 0;
        const int parent_nice = ::getpriority(PRIO_PROCESS, static_cast<id_t>(parent));
        failures += expect_errno("setpriority(parent)", ::setpriority(PRIO_PROCESS, parent, parent_nice), EPERM);
        failures += expect_errno("setpriority(process group)", ::setpriority(PRIO_PGRP, kNoSuchGroupOrUser, 0), EPERM);
        failures += expect_errno("setpriority(user)", ::setpriority(PRIO_USER, kNoSuchGroupOrUser, 0), EPERM);
        const int nice = ::getpriority(PRIO_PROCESS, 0);
        failures += expect_ok("setpriority(self)", ::setpriority(PRIO_PROCESS, 0, nice) == 0);
        constexpr int kIoprioWhoProcess = 1, kIoprioWhoProcessGroup = 2;
        const long parent_ioprio = ::syscall(SYS_ioprio_get, kIoprioWhoProcess, parent);
        failures += expect_errno("ioprio_set(parent)",
                                 ::syscall(SYS_ioprio_set, kIoprioWhoProcess, parent, parent_ioprio), EPERM);
        failures += expect_errno("ioprio_set(process group)",
                                 ::syscall(SYS_ioprio_set, kIoprioWhoProcessGroup, kNoSuchGroupOrUser, 0), EPERM);
        rlimit limit{};
        failures += expect_errno("prlimit(parent) read", ::prlimit(parent, RLIMIT_NOFILE, nullptr, &limit), EPERM);
        failures += expect_ok("prlimit(self) read", ::prlimit(0, RLIMIT_NOFILE, nullptr, &limit) == 0);
        unsigned long nodes = 1;
        failures +=
            expect_errno("migrate_pages(parent)", ::syscall(SYS_migrate_pages, parent, 64, &nodes, &nodes), EPERM);
        failures += expect_errno("move_pages(parent)",
                                 ::syscall(SYS_move_pages, parent, 0, nullptr, nullptr, nullptr, 0), EPERM);
        failures += expect_errno("kcmp", ::syscall(SYS_kcmp, parent, ::getpid(), 0, 0, 0), EPERM);
        failures +=
            expect_errno("get_robust_list(parent)", ::syscall(SYS_get_robust_list, parent, nullptr, nullptr), EPERM);
        failures += expect_errno("prctl(PR_SET_DUMPABLE, 1)", ::prctl(PR_SET_DUMPABLE, 1, 0, 0, 0), EPERM);
        return failures;
    });
    EXPECT_EQ(report, "");
}

// Another process of the same user cannot open a worker's memory, and a worker holds
// no capability that would let it open theirs (CAP_SYS_PTRACE passes the dumpable check).
TEST(SandboxTest, IsNotDumpableAndHoldsNoCapabilities) {
    const bool privileged = status_line("CapEff") != "CapEff:\t0000000000000000";
    const std::string report = in_child([privileged] {
        std::string failures;
        if (::prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) != 0) failures += "still dumpable; ";
        for (const char *set : {"CapInh", "CapPrm", "CapEff", "CapAmb"}) {
            const std::string line = status_line(set);
            if (line != std::string(set) + ":\t0000000000000000") failures += line + "; ";
        }
        // Only a privileged process can empty its bounding set.
        if (privileged && status_line("CapBnd") != "CapBnd:\t0000000000000000")
            failures += status_line("CapBnd") + "; ";
        return failures;
    });
    EXPECT_EQ(report, "") << (privileged ? "(run with capabilities)" : "(run without capabilities)");
}

// Landlock: what the policy lists stays readable, nothing else can be opened or created.
class LandlockTest : public ::testing::Test {
  protected:
    void SetUp() override {
        if (landlock_abi() == 0) GTEST_SKIP() << "this kernel has no Landlock";
        char pattern[] = "/tmp/ggml-remote-landlock.XXXXXX";
        ASSERT_NE(::mkdtemp(pattern), nullptr);
        root_ = pattern;
        ASSERT_EQ(::mkdir((root_ + "/allowed").c_str(), 0700), 0);
        ASSERT_EQ(::mkdir((root_ + "/secret").c_str(), 0700), 0);
        std::ofstream(root_ + "/allowed/library") << "code";
        std::ofstream(root_ + "/secret/keys.psk") << "guest:00112233445566778899aabbccddeeff";
    }
    void TearDown() override {
        if (!root_.empty()) std::filesystem::remove_all(root_);
    }
    std::string root_;
};

TEST_F(LandlockTest, OpensOnlyWhatThePolicyAllows) {
    FilesystemPolicy policy;
    policy.read_only = {root_ + "/allowed", "/proc"};
    policy.devices = {"/dev/null"};
    const std::string root = root_;
    const std::string report = in_child(
        [root] {
            std::string failures;
            failures += expect_ok("read an allowed file", ::open((root + "/allowed/library").c_str(), O_RDONLY) >= 0);
            failures += expect_ok("read /proc/self/status", ::open("/proc/self/status", O_RDONLY) >= 0);
            failures += expect_ok("write /dev/null", ::open("/dev/null", O_WRONLY) >= 0);
            failures +=
                expect_errno("read the key file", ::open((root + "/secret/keys.psk").c_str(), O_RDONLY), EACCES);
            failures +=
                expect_errno("write an allowed file", ::open((root + "/allowed/library").c_str(), O_WRONLY), EACCES);
            failures += expect_errno("create a file", ::open((root + "/allowed/new").c_str(), O_WRONLY | O_CREAT, 0600),
                                     EACCES);
            failures += expect_errno("read /etc/passwd", ::open("/etc/passwd", O_RDONLY), EACCES);
            return failures;
        },
        [policy] { return enter_sandbox(policy); });
    EXPECT_EQ(report, "");
}

// The worker's own policy keeps what the backends load and nothing from /tmp.
TEST_F(LandlockTest, WorkerPolicyKeepsTheBackendsAndNotTheTestsFiles) {
    load_host_backends(false);
    const std::string root = root_;
    const std::string report = in_child([root] {
        std::string failures;
        failures += expect_ok("read /etc/ld.so.cache", ::open("/etc/ld.so.cache", O_RDONLY) >= 0);
        failures += expect_ok("read /dev/urandom", ::open("/dev/urandom", O_RDONLY) >= 0);
        failures += expect_errno("read a file in /tmp", ::open((root + "/allowed/library").c_str(), O_RDONLY), EACCES);
        failures +=
            expect_errno("create a file in /tmp", ::open((root + "/new").c_str(), O_WRONLY | O_CREAT, 0600), EACCES);
        return failures;
    });
    EXPECT_EQ(report, "");
}

// The server's backend path and record directory come from its options, not from
// the worker's environment; the record directory is made for the worker.
TEST_F(LandlockTest, WorkerPolicyGrantsTheServersBackendAndRecordPaths) {
    setenv("GGML_REMOTE_RECORD_DIR", (root_ + "/from-environment").c_str(), 1);
    const FilesystemPolicy policy = worker_filesystem_policy({root_ + "/allowed/library", root_ + "/frames"});
    unsetenv("GGML_REMOTE_RECORD_DIR");
    EXPECT_TRUE(policy_lets_read(policy, root_ + "/allowed/library"));
    EXPECT_FALSE(policy_lets_read(policy, root_ + "/secret/keys.psk"));
    EXPECT_THAT(policy.read_write, ::testing::ElementsAre(root_ + "/frames"));
    EXPECT_TRUE(std::filesystem::is_directory(root_ + "/frames"));
    EXPECT_FALSE(std::filesystem::exists(root_ + "/from-environment"));
}

TEST_F(LandlockTest, SaysWhetherAPolicyLetsAFileBeRead) {
    FilesystemPolicy policy;
    policy.read_only = {root_ + "/allowed"};
    EXPECT_TRUE(policy_lets_read(policy, root_ + "/allowed/library"));
    EXPECT_TRUE(policy_lets_read(policy, root_ + "/allowed/../allowed/library"));
    EXPECT_FALSE(policy_lets_read(policy, root_ + "/secret/keys.psk"));
    std::filesystem::create_directory(root_ + "/allowed-not");
    std::ofstream(root_ + "/allowed-not/keys.psk") << "x";
    EXPECT_FALSE(policy_lets_read(policy, root_ + "/allowed-not/keys.psk")) << "a prefix of a name is not a parent";
}

TEST(WorkerIdentityTest, RefusesRootAndUnknownUsers) {
    WorkerIdentity identity;
    EXPECT_FALSE(find_worker_identity("root", &identity).ok());
    EXPECT_FALSE(find_worker_identity("0", &identity).ok());
    EXPECT_FALSE(find_worker_identity("no-such-user-ggml-remote", &identity).ok());
}

// --worker-user: a root server's worker becomes the user for good, then sandboxes.
TEST(WorkerIdentityTest, BecomesTheUserForGood) {
    WorkerIdentity identity;
    if (::geteuid() != 0 || !find_worker_identity("nobody", &identity).ok()) {
        GTEST_SKIP() << "needs root and a user 'nobody'";
    }
    const std::string report = in_child(
        [&identity] {
            std::string failures;
            uid_t real = 0, effective = 0, saved = 0;
            ::getresuid(&real, &effective, &saved);
            if (real != identity.uid || effective != identity.uid || saved != identity.uid) failures += "uids; ";
            if (::getegid() != identity.gid) failures += "gid; ";
            failures += expect_errno("setresuid(0)", ::setresuid(0, 0, 0), EPERM);
            return failures;
        },
        [&identity] {
            Status status = become(identity);
            return status.ok() ? enter_sandbox() : status;
        });
    EXPECT_EQ(report, "");
}

TEST(SandboxTest, KeepsThreadsMemoryFilesAndTheGuestSocket) {
    int pair[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, pair), 0);
    const std::string report = in_child([&pair] {
        std::string failures;
        std::atomic<int> ran{0};
        std::vector<std::thread> threads;
        for (int i = 0; i < 4; ++i) threads.emplace_back([&ran] { ran++; });
        for (std::thread &thread : threads) thread.join();
        if (ran != 4) failures += "threads did not run; ";

        // A shared-memory buffer as Session::allocate_shared makes one.
        const int memory = ::memfd_create("sandbox-test", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        failures += expect_ok("memfd_create", memory >= 0);
        failures += expect_ok("ftruncate", ::ftruncate(memory, 1 << 20) == 0);
        failures += expect_ok("F_ADD_SEALS", ::fcntl(memory, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) == 0);
        void *mapped = ::mmap(nullptr, 1 << 20, PROT_READ | PROT_WRITE, MAP_SHARED, memory, 0);
        failures += expect_ok("mmap", mapped != MAP_FAILED);
        if (mapped != MAP_FAILED) {
            std::memset(mapped, 7, 1 << 20);
            ::munmap(mapped, 1 << 20);
        }

        // The guest's socket, with a descriptor passed along (SCM_RIGHTS).
        char byte = 'x';
        iovec iov{&byte, 1};
        alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
        msghdr message{};
        message.msg_iov = &iov;
        message.msg_iovlen = 1;
        message.msg_control = control;
        message.msg_controllen = sizeof(control);
        cmsghdr *cmsg = CMSG_FIRSTHDR(&message);
        cmsg->cmsg_level = SOL_SOCKET;
        cmsg->cmsg_type = SCM_RIGHTS;
        cmsg->cmsg_len = CMSG_LEN(sizeof(int));
        std::memcpy(CMSG_DATA(cmsg), &memory, sizeof(int));
        failures += expect_ok("sendmsg", ::sendmsg(pair[0], &message, 0) == 1);
        failures += expect_ok("recv", ::recv(pair[1], &byte, 1, 0) == 1);
        return failures;
    });
    EXPECT_EQ(report, "");
    ::close(pair[0]);
    ::close(pair[1]);
}

// The filter leaves the speculative store bypass mitigation to the process's own
// choice: kernels before 5.16 forced it on ("thread force mitigated") for every
// seccomp filter, slowing the compute. (Kernels since then, like this test's
// likely host, never force it; there the check holds either way.)
TEST(SandboxTest, LeavesSpeculativeStoreBypassAlone) {
    const std::string before = status_line("Speculation_Store_Bypass");
    if (before.empty()) GTEST_SKIP() << "this kernel does not report Speculation_Store_Bypass";
    const std::string report = in_child([] {
        const std::string line = status_line("Speculation_Store_Bypass");
        return line.find("force mitigated") == std::string::npos ? "" : line;
    });
    EXPECT_EQ(report, "") << "before the sandbox: " << before;
}

// The CPU backend computes with threads of its own (clone with CLONE_THREAD, after
// clone3 was refused): a matrix product with four threads gives the right numbers.
TEST(SandboxTest, CpuBackendComputesWithItsThreads) {
    load_host_backends(false);
    const std::string report = in_child([] {
        ggml_backend_t backend = ggml_backend_init_by_type(GGML_BACKEND_DEVICE_TYPE_CPU, nullptr);
        if (backend == nullptr) return std::string("no CPU backend");
        ggml_backend_reg_t reg = ggml_backend_dev_backend_reg(ggml_backend_get_device(backend));
        auto set_n_threads = reinterpret_cast<ggml_backend_set_n_threads_t>(
            ggml_backend_reg_get_proc_address(reg, "ggml_backend_set_n_threads"));
        if (set_n_threads != nullptr) set_n_threads(backend, 4);

        ggml_init_params params{16 * ggml_tensor_overhead() + ggml_graph_overhead(), nullptr, true};
        ggml_context *ctx = ggml_init(params);
        const int n = 64;
        ggml_tensor *a = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, n, n);
        ggml_tensor *b = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, n, n);
        ggml_tensor *product = ggml_mul_mat(ctx, a, b);
        ggml_cgraph *graph = ggml_new_graph(ctx);
        ggml_build_forward_expand(graph, product);
        ggml_backend_buffer_t buffer = ggml_backend_alloc_ctx_tensors(ctx, backend);
        std::vector<float> ones(n * n, 1.0f);
        ggml_backend_tensor_set(a, ones.data(), 0, ggml_nbytes(a));
        ggml_backend_tensor_set(b, ones.data(), 0, ggml_nbytes(b));
        std::string failures;
        if (ggml_backend_graph_compute(backend, graph) != GGML_STATUS_SUCCESS) failures += "compute failed; ";
        std::vector<float> out(n * n);
        ggml_backend_tensor_get(product, out.data(), 0, ggml_nbytes(product));
        for (float value : out) {
            if (value != n) {
                failures += "wrong product: " + std::to_string(value) + "; ";
                break;
            }
        }
        ggml_backend_buffer_free(buffer);
        ggml_free(ctx);
        ggml_backend_free(backend);
        return failures;
    });
    EXPECT_EQ(report, "");
}

TEST(SandboxTest, ClosesEveryDescriptorButTheKeptOnes) {
    const std::string report = in_child(
        [] {
            std::vector<int> opened;
            for (int i = 0; i < 6; ++i) opened.push_back(::open("/dev/null", O_RDONLY));
            close_descriptors_except({opened[1], opened[4]});
            std::string failures;
            for (int i = 0; i < 6; ++i) {
                const bool open = ::fcntl(opened[i], F_GETFD) != -1;
                if (open != (i == 1 || i == 4)) {
                    failures += "descriptor " + std::to_string(opened[i]) + (open ? " open; " : " closed; ");
                }
            }
            for (int fd : {1, 2}) {
                if (::fcntl(fd, F_GETFD) == -1) failures += "stdout or stderr closed; ";
            }
            char target[64] = {};
            if (::readlink("/proc/self/fd/0", target, sizeof(target) - 1) <= 0 || std::string(target) != "/dev/null") {
                failures += std::string("stdin is ") + target + "; ";
            }
            return failures;
        },
        [] { return Status::success(); });
    EXPECT_EQ(report, "");
}

TEST(SandboxTest, ProbeSaysTheSandboxWorksHereAndLeavesTheCallerAsItWas) {
    const std::string before = status_line("NoNewPrivs") + status_line("Seccomp_filters");
    Status status = probe_sandbox(worker_filesystem_policy({}));
    EXPECT_TRUE(status.ok()) << status.message();
    EXPECT_EQ(status_line("NoNewPrivs") + status_line("Seccomp_filters"), before);
}

}  // namespace
}  // namespace ggml_remote::host
