#include "host/worker/jail/sandbox.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <sched.h>
#include <seccomp.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>

#include "host/worker/jail/seccomp_policy.h"

namespace ggml_remote::host {

namespace {

// The most descriptors a worker may hold: a session needs its socket, the status
// board, the few a frame carries, and whatever a GPU driver opens per device.
constexpr rlim_t kMaxDescriptors = 4096;

struct FilterDeleter {
    void operator()(void *filter) const { seccomp_release(filter); }
};
using Filter = std::unique_ptr<void, FilterDeleter>;

Status seccomp_failure(const std::string &what, int rc) {
    return error(Code::error, "seccomp: " + what + ": " + std::strerror(-rc));
}

Status load_filter(const SeccompPolicy &calls) {
    Filter filter(seccomp_init(SCMP_ACT_ALLOW));
    if (!filter) return error(Code::error, "seccomp: cannot create a filter");
    scmp_filter_ctx ctx = filter.get();
    // Every thread (GPU drivers start their own), and a system call of a foreign
    // ABI (int 0x80 on x86-64) ends the process instead of bypassing the rules.
    int rc = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_TSYNC, 1);
    if (rc < 0) return seccomp_failure("thread synchronisation", rc);
    rc = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
    if (rc < 0) return seccomp_failure("foreign ABI action", rc);
    // Before Linux 5.16 a seccomp filter also turned on the speculative store bypass
    // mitigation (SSBD) for the process, which slows a CPU backend's kernels. It guards
    // against code an attacker runs in the process; a worker runs none of the guest's,
    // only its data. Where libseccomp cannot say so (API level < 4), the kernel's default stays.
    if (seccomp_api_get() >= 4) (void)seccomp_attr_set(ctx, SCMP_FLTATR_CTL_SSB, 1);

    // The policy itself is data: seccomp_policy.h.
    Status status = compile_seccomp_policy(calls, ctx, static_cast<uint64_t>(::getpid()));
    if (!status) return status;

    rc = seccomp_load(ctx);
    if (rc < 0) return seccomp_failure("load", rc);
    return Status::success();
}

// The open descriptors, from /proc/self/fd (for kernels without close_range).
std::vector<int> open_descriptors() {
    std::vector<int> fds;
    DIR *dir = ::opendir("/proc/self/fd");
    if (dir == nullptr) return fds;
    const int own = ::dirfd(dir);
    while (const dirent *entry = ::readdir(dir)) {
        char *end = nullptr;
        const long fd = std::strtol(entry->d_name, &end, 10);
        if (*end == '\0' && end != entry->d_name && fd != own) fds.push_back(static_cast<int>(fd));
    }
    ::closedir(dir);
    return fds;
}

// A server started as root (or with file capabilities) would give its workers
// capabilities that pass every permission check an attacker meets next:
// CAP_SYS_PTRACE opens any process's memory, CAP_DAC_OVERRIDE any file. A worker
// needs none, so it drops them all: the bounding set first (that takes
// CAP_SETPCAP, which goes last), the ambient set, then what it holds.
Status drop_capabilities(bool *had_any) {
    __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct held[2] = {};
    if (::syscall(SYS_capget, &header, held) != 0) {
        return error(Code::error, std::string("capget: ") + std::strerror(errno));
    }
    *had_any = false;
    for (const __user_cap_data_struct &word : held)
        *had_any |= (word.effective | word.permitted | word.inheritable) != 0;
    if (!*had_any) return Status::success();  // (an unprivileged process cannot shrink its bounding set)
    for (int capability = 0; ::prctl(PR_CAPBSET_READ, capability, 0, 0, 0) >= 0; ++capability) {
        if (::prctl(PR_CAPBSET_DROP, capability, 0, 0, 0) != 0 && errno != EINVAL) {
            return error(Code::error,
                         "prctl(PR_CAPBSET_DROP, " + std::to_string(capability) + "): " + std::strerror(errno));
        }
    }
    if (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 && errno != EINVAL) {
        return error(Code::error, std::string("prctl(PR_CAP_AMBIENT_CLEAR_ALL): ") + std::strerror(errno));
    }
    __user_cap_data_struct none[2] = {};
    if (::syscall(SYS_capset, &header, none) != 0) {
        return error(Code::error, std::string("capset: ") + std::strerror(errno));
    }
    return Status::success();
}

// No core dumps (they would hold guest data) and at most kMaxDescriptors descriptors.
Status lower_limits() {
    const rlimit no_core{0, 0};
    if (::setrlimit(RLIMIT_CORE, &no_core) != 0) {
        return error(Code::error, std::string("setrlimit(RLIMIT_CORE): ") + std::strerror(errno));
    }
    rlimit files{};
    if (::getrlimit(RLIMIT_NOFILE, &files) == 0) {
        files.rlim_cur = std::min(files.rlim_cur, kMaxDescriptors);
        files.rlim_max = std::min(files.rlim_max, kMaxDescriptors);
        if (::setrlimit(RLIMIT_NOFILE, &files) != 0) {
            return error(Code::error, std::string("setrlimit(RLIMIT_NOFILE): ") + std::strerror(errno));
        }
    }
    return Status::success();
}

}  // namespace

void close_descriptors_except(std::vector<int> keep) {
    keep.insert(keep.end(), {0, 1, 2});
    std::sort(keep.begin(), keep.end());
    keep.erase(std::unique(keep.begin(), keep.end()), keep.end());
    unsigned next = 0;  // the first descriptor not yet dealt with
    bool have_close_range = true;
    for (size_t i = 0; i <= keep.size() && have_close_range; ++i) {
        const unsigned last = i < keep.size() ? static_cast<unsigned>(keep[i]) : ~0u;
        if (last > next && ::close_range(next, i < keep.size() ? last - 1 : ~0u, 0) != 0) have_close_range = false;
        if (i < keep.size()) next = last + 1;
    }
    if (!have_close_range) {
        for (int fd : open_descriptors()) {
            if (!std::binary_search(keep.begin(), keep.end(), fd)) ::close(fd);
        }
    }
    const int null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (null >= 0) {
        ::dup2(null, 0);
        ::close(null);
    }
}

void mark_descriptors_cloexec(int first) {
    if (::close_range(static_cast<unsigned>(first), ~0u, CLOSE_RANGE_CLOEXEC) == 0) return;
    for (int fd : open_descriptors()) {
        if (fd >= first) ::fcntl(fd, F_SETFD, ::fcntl(fd, F_GETFD) | FD_CLOEXEC);
    }
}

Status make_undumpable() {
    if (::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) {
        return error(Code::error, std::string("prctl(PR_SET_DUMPABLE): ") + std::strerror(errno));
    }
    return Status::success();
}

Status enter_sandbox(const FilesystemPolicy &files, SandboxReport *report, const SeccompPolicy &calls) {
    SandboxReport local;
    if (report == nullptr) report = &local;
    Status status = make_undumpable();
    if (!status) return status;
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
        return error(Code::error, std::string("prctl(PR_SET_NO_NEW_PRIVS): ") + std::strerror(errno));
    }
    status = drop_capabilities(&report->had_capabilities);
    if (!status) return status;
    status = lower_limits();
    if (!status) return status;
    report->landlock_abi = landlock_abi();
    status = restrict_filesystem(files, &report->filesystem_confined);
    if (!status) return status;
    return load_filter(calls);
}

std::string describe_sandbox(const SandboxReport &report) {
    std::string words = "seccomp sandbox, no new privileges, no core dumps, not dumpable";
    words += report.had_capabilities ? ", every capability dropped" : ", no capabilities";
    if (report.filesystem_confined) {
        words += ", files confined by Landlock (ABI " + std::to_string(report.landlock_abi) + ")";
    } else {
        words += ", files NOT confined (this kernel has no Landlock; see docs/SECURITY.md)";
    }
    return words;
}

Status probe_sandbox(const FilesystemPolicy &files, SandboxReport *report) {
    int pipe_fds[2];
    if (::pipe2(pipe_fds, O_CLOEXEC) != 0) return error(Code::error, std::string("pipe: ") + std::strerror(errno));
    const pid_t child = ::fork();
    if (child < 0) {
        ::close(pipe_fds[0]);
        ::close(pipe_fds[1]);
        return error(Code::error, std::string("fork: ") + std::strerror(errno));
    }
    if (child == 0) {
        ::close(pipe_fds[0]);
        // The child reports what it got, then why it failed (if it did).
        SandboxReport got;
        Status status = enter_sandbox(files, &got);
        (void)!::write(pipe_fds[1], &got, sizeof(got));
        if (!status) (void)!::write(pipe_fds[1], status.message().data(), status.message().size());
        ::_exit(status.ok() ? 0 : 1);
    }
    ::close(pipe_fds[1]);
    std::string message;
    char chunk[256];
    ssize_t got;
    while ((got = ::read(pipe_fds[0], chunk, sizeof(chunk))) > 0 || (got < 0 && errno == EINTR)) {
        if (got > 0) message.append(chunk, static_cast<size_t>(got));
    }
    ::close(pipe_fds[0]);
    int wait_status = 0;
    while (::waitpid(child, &wait_status, 0) < 0 && errno == EINTR) {
    }
    static_assert(std::is_trivially_copyable<SandboxReport>::value, "sent through a pipe");
    if (message.size() >= sizeof(SandboxReport)) {
        if (report != nullptr) std::memcpy(report, message.data(), sizeof(SandboxReport));
        message.erase(0, sizeof(SandboxReport));
    }
    if (WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0) return Status::success();
    if (message.empty()) message = "the probe process failed";
    return error(Code::error, message);
}

}  // namespace ggml_remote::host
