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

namespace ggml_remote::host {

namespace {

// The most descriptors a worker may hold: a session needs its socket, the status
// board, the few a frame carries, and whatever a GPU driver opens per device.
constexpr rlim_t kMaxDescriptors = 4096;

// System calls a session worker never makes once it serves a guest: they start
// programs, reach into other processes, open new connections, change the system
// or the process's identity. Each is refused with EPERM (clone, clone3, kill and
// friends have rules of their own below, with their arguments).
//
// Why a deny-list and not an allow-list: the worker runs the host's ggml backends,
// and GPU backends talk to their drivers through ioctls, mmaps and helper threads
// that differ per vendor and driver release. An allow-list tight enough to matter
// would break them on the next driver update; a deny-list takes away what an
// attacker who got code execution in a worker wants next (a shell, the network,
// the listener and the other workers, the kernel's rarer interfaces) and leaves the
// backends alone.
constexpr const char *kDeniedSyscalls[] = {
    // new programs and processes (threads stay allowed: see the clone rules)
    "execve", "execveat", "fork", "vfork",
    // other processes
    "ptrace", "process_vm_readv", "process_vm_writev", "process_madvise", "pidfd_open", "pidfd_getfd",
    "pidfd_send_signal", "tkill", "kcmp", "get_robust_list", "process_mrelease",
    // new network connections; the guest's socket keeps working (sendmsg, recvmsg)
    "socket", "connect", "bind", "listen", "accept", "accept4",
    // io_uring would do all of the above without the system calls
    "io_uring_setup", "io_uring_enter", "io_uring_register",
    // mounts, namespaces, file handles
    "mount", "umount2", "pivot_root", "chroot", "unshare", "setns", "fsopen", "fsconfig", "fsmount", "fspick",
    "move_mount", "open_tree", "mount_setattr", "name_to_handle_at", "open_by_handle_at", "quotactl", "quotactl_fd",
    "swapon", "swapoff",
    // the kernel's rarer interfaces
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "bpf", "perf_event_open",
    "userfaultfd", "fanotify_init", "keyctl", "add_key", "request_key", "syslog", "reboot", "acct", "iopl", "ioperm",
    "uselib", "lookup_dcookie", "vhangup",
    // identity, time, limits (set once, before the filter)
    "setuid", "setgid", "setreuid", "setregid", "setresuid", "setresgid", "setgroups", "setfsuid", "setfsgid",
    "capset", "settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "sethostname", "setdomainname",
    "setrlimit"};

// IOPRIO_WHO_PROCESS (linux/ioprio.h is not in every libc's headers).
constexpr scmp_datum_t kIoprioWhoProcess = 1;

// clone()'s flags are its first argument, except on s390.
#if defined(__s390__)
constexpr unsigned kCloneFlagsArg = 1;
#else
constexpr unsigned kCloneFlagsArg = 0;
#endif

struct FilterDeleter {
    void operator()(void *filter) const { seccomp_release(filter); }
};
using Filter = std::unique_ptr<void, FilterDeleter>;

Status seccomp_failure(const std::string &what, int rc) {
    return error(Code::error, "seccomp: " + what + ": " + std::strerror(-rc));
}

// A rule on one argument of a system call.
struct ArgumentRule {
    const char *name;
    scmp_arg_cmp condition;
};

scmp_arg_cmp masked_equal(unsigned arg, scmp_datum_t mask, scmp_datum_t value) {
    return {arg, SCMP_CMP_MASKED_EQ, mask, value};
}

scmp_arg_cmp not_equal(unsigned arg, scmp_datum_t value) { return {arg, SCMP_CMP_NE, value, 0}; }

// Adds `action` for `name` (when `condition` holds, if there is one); a call this
// architecture does not have is skipped.
Status add_rule(scmp_filter_ctx filter, uint32_t action, const char *name, const scmp_arg_cmp *condition = nullptr) {
    const int syscall = seccomp_syscall_resolve_name(name);
    if (syscall == __NR_SCMP_ERROR) return Status::success();
    const int rc = seccomp_rule_add_array(filter, action, syscall, condition != nullptr ? 1 : 0, condition);
    if (rc < 0) return seccomp_failure(std::string("rule for ") + name, rc);
    return Status::success();
}

Status load_filter() {
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

    const uint32_t deny = SCMP_ACT_ERRNO(EPERM);
    for (const char *name : kDeniedSyscalls) {
        Status status = add_rule(ctx, deny, name);
        if (!status) return status;
    }
    const auto self = static_cast<scmp_datum_t>(::getpid());
    const ArgumentRule rules[] = {
        // clone makes threads (CLONE_THREAD, as pthread_create does) but no process,
        // and no thread in a namespace of its own.
        {"clone", masked_equal(kCloneFlagsArg, CLONE_THREAD, 0)},
        {"clone", masked_equal(kCloneFlagsArg, CLONE_NEWNS, CLONE_NEWNS)},
        {"clone", masked_equal(kCloneFlagsArg, CLONE_NEWCGROUP, CLONE_NEWCGROUP)},
        {"clone", masked_equal(kCloneFlagsArg, CLONE_NEWUTS, CLONE_NEWUTS)},
        {"clone", masked_equal(kCloneFlagsArg, CLONE_NEWIPC, CLONE_NEWIPC)},
        {"clone", masked_equal(kCloneFlagsArg, CLONE_NEWUSER, CLONE_NEWUSER)},
        {"clone", masked_equal(kCloneFlagsArg, CLONE_NEWPID, CLONE_NEWPID)},
        {"clone", masked_equal(kCloneFlagsArg, CLONE_NEWNET, CLONE_NEWNET)},
        // Signals only to this process: not to the listener, not to other workers.
        {"kill", not_equal(0, self)},
        {"tgkill", not_equal(0, self)},
        {"rt_sigqueueinfo", not_equal(0, self)},
        {"rt_tgsigqueueinfo", not_equal(0, self)},
        // Limits can be read (getrlimit is prlimit64 without a new limit), not raised,
        // and only this process's.
        {"prlimit64", not_equal(2, 0)},
        {"prlimit64", not_equal(0, 0)},
        // Scheduling, priority, CPU affinity and memory placement of the calling thread
        // only, named as 0: a filter cannot compare with each thread's own id, and a
        // rule cannot allow two values of one argument, so a thread named by its id
        // (pthread_setaffinity_np, pthread_setschedparam) is refused as well. ggml-cpu
        // calls those only for an explicit cpumask or priority, which workers never set.
        {"sched_setaffinity", not_equal(0, 0)},
        {"sched_setscheduler", not_equal(0, 0)},
        {"sched_setparam", not_equal(0, 0)},
        {"sched_setattr", not_equal(0, 0)},
        {"migrate_pages", not_equal(0, 0)},
        {"move_pages", not_equal(0, 0)},
        {"setpriority", not_equal(0, PRIO_PROCESS)},  // not a process group or a user
        {"setpriority", not_equal(1, 0)},
        {"ioprio_set", not_equal(0, kIoprioWhoProcess)},
        {"ioprio_set", not_equal(1, 0)},
        // Once undumpable, always: a dumpable worker's memory would be open to its siblings.
        {"prctl", masked_equal(0, 0xffffffffu, PR_SET_DUMPABLE)},
        // A terminal on stdout or stderr must not take typed-in commands from us.
        // (ioctl's request is 32 bits wide; the mask ignores what lies above.)
        {"ioctl", masked_equal(1, 0xffffffffu, TIOCSTI)},
        {"ioctl", masked_equal(1, 0xffffffffu, TIOCLINUX)},
    };
    for (const ArgumentRule &rule : rules) {
        Status status = add_rule(ctx, deny, rule.name, &rule.condition);
        if (!status) return status;
    }
    // clone3 passes its flags in memory, where a filter cannot look: ENOSYS makes
    // glibc fall back to clone, whose flags the rules above check.
    Status status = add_rule(ctx, SCMP_ACT_ERRNO(ENOSYS), "clone3");
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
    for (const __user_cap_data_struct &word : held) *had_any |= (word.effective | word.permitted | word.inheritable) != 0;
    if (!*had_any) return Status::success();  // (an unprivileged process cannot shrink its bounding set)
    for (int capability = 0; ::prctl(PR_CAPBSET_READ, capability, 0, 0, 0) >= 0; ++capability) {
        if (::prctl(PR_CAPBSET_DROP, capability, 0, 0, 0) != 0 && errno != EINVAL) {
            return error(Code::error, "prctl(PR_CAPBSET_DROP, " + std::to_string(capability) + "): " + std::strerror(errno));
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

Status enter_sandbox(const FilesystemPolicy &files, SandboxReport *report) {
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
    return load_filter();
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
