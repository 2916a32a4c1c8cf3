#include "host/worker/jail/seccomp_policy.h"

#include <sched.h>
#include <seccomp.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>

#include <cerrno>
#include <cstring>
#include <iterator>
#include <string>

namespace ggml_remote::host {

namespace {

// IOPRIO_WHO_PROCESS (linux/ioprio.h is not in every libc's headers).
constexpr uint64_t kIoprioWhoProcess = 1;

// clone()'s flags are its first argument, except on s390.
#if defined(__s390__)
constexpr unsigned kCloneFlagsArg = 1;
#else
constexpr unsigned kCloneFlagsArg = 0;
#endif

constexpr SyscallRule deny(const char *name) { return {name}; }

constexpr SyscallRule deny_if_masked(const char *name, unsigned argument, uint64_t mask, uint64_t value) {
    return {name, SyscallAction::deny, ArgumentTest::masked_equal, argument, mask, value};
}

constexpr SyscallRule deny_unless(const char *name, unsigned argument, uint64_t value) {
    return {name, SyscallAction::deny, ArgumentTest::not_equal, argument, 0, value};
}

// What every sandboxed process of the server loses: workers and the services process.
constexpr SyscallRule kCommonRules[] = {
    // New programs and processes (threads stay allowed: see clone below).
    deny("execve"),
    deny("execveat"),
    deny("fork"),
    deny("vfork"),
    // Other processes.
    deny("ptrace"),
    deny("process_vm_readv"),
    deny("process_vm_writev"),
    deny("process_madvise"),
    deny("pidfd_open"),
    deny("pidfd_getfd"),
    deny("pidfd_send_signal"),
    deny("tkill"),
    deny("kcmp"),
    deny("get_robust_list"),
    deny("process_mrelease"),
    // io_uring would do all of the above without the system calls.
    deny("io_uring_setup"),
    deny("io_uring_enter"),
    deny("io_uring_register"),
    // Mounts, namespaces, file handles.
    deny("mount"),
    deny("umount2"),
    deny("pivot_root"),
    deny("chroot"),
    deny("unshare"),
    deny("setns"),
    deny("fsopen"),
    deny("fsconfig"),
    deny("fsmount"),
    deny("fspick"),
    deny("move_mount"),
    deny("open_tree"),
    deny("mount_setattr"),
    deny("name_to_handle_at"),
    deny("open_by_handle_at"),
    deny("quotactl"),
    deny("quotactl_fd"),
    deny("swapon"),
    deny("swapoff"),
    // The kernel's rarer interfaces.
    deny("kexec_load"),
    deny("kexec_file_load"),
    deny("init_module"),
    deny("finit_module"),
    deny("delete_module"),
    deny("bpf"),
    deny("perf_event_open"),
    deny("userfaultfd"),
    deny("fanotify_init"),
    deny("keyctl"),
    deny("add_key"),
    deny("request_key"),
    deny("syslog"),
    deny("reboot"),
    deny("acct"),
    deny("iopl"),
    deny("ioperm"),
    deny("uselib"),
    deny("lookup_dcookie"),
    deny("vhangup"),
    // Identity, time, limits (set once, before the filter).
    deny("setuid"),
    deny("setgid"),
    deny("setreuid"),
    deny("setregid"),
    deny("setresuid"),
    deny("setresgid"),
    deny("setgroups"),
    deny("setfsuid"),
    deny("setfsgid"),
    deny("capset"),
    deny("settimeofday"),
    deny("clock_settime"),
    deny("clock_adjtime"),
    deny("adjtimex"),
    deny("sethostname"),
    deny("setdomainname"),
    deny("setrlimit"),
    // clone makes threads (CLONE_THREAD, as pthread_create does) but no process,
    // and no thread in a namespace of its own.
    deny_if_masked("clone", kCloneFlagsArg, CLONE_THREAD, 0),
    deny_if_masked("clone", kCloneFlagsArg, CLONE_NEWNS, CLONE_NEWNS),
    deny_if_masked("clone", kCloneFlagsArg, CLONE_NEWCGROUP, CLONE_NEWCGROUP),
    deny_if_masked("clone", kCloneFlagsArg, CLONE_NEWUTS, CLONE_NEWUTS),
    deny_if_masked("clone", kCloneFlagsArg, CLONE_NEWIPC, CLONE_NEWIPC),
    deny_if_masked("clone", kCloneFlagsArg, CLONE_NEWUSER, CLONE_NEWUSER),
    deny_if_masked("clone", kCloneFlagsArg, CLONE_NEWPID, CLONE_NEWPID),
    deny_if_masked("clone", kCloneFlagsArg, CLONE_NEWNET, CLONE_NEWNET),
    // clone3 passes its flags in memory, where a filter cannot look: ENOSYS makes
    // glibc fall back to clone, whose flags the rules above check.
    {"clone3", SyscallAction::unavailable},
    // Signals only to this process: not to the listener, not to other workers.
    deny_unless("kill", 0, kOwnPid),
    deny_unless("tgkill", 0, kOwnPid),
    deny_unless("rt_sigqueueinfo", 0, kOwnPid),
    deny_unless("rt_tgsigqueueinfo", 0, kOwnPid),
    // Limits can be read (getrlimit is prlimit64 without a new limit), not raised,
    // and only this process's.
    deny_unless("prlimit64", 2, 0),
    deny_unless("prlimit64", 0, 0),
    // Scheduling, priority, CPU affinity and memory placement of the calling thread
    // only, named as 0: a filter cannot compare with each thread's own id, and a
    // rule cannot allow two values of one argument, so a thread named by its id
    // (pthread_setaffinity_np, pthread_setschedparam) is refused as well. ggml-cpu
    // calls those only for an explicit cpumask or priority, which workers never set.
    deny_unless("sched_setaffinity", 0, 0),
    deny_unless("sched_setscheduler", 0, 0),
    deny_unless("sched_setparam", 0, 0),
    deny_unless("sched_setattr", 0, 0),
    deny_unless("migrate_pages", 0, 0),
    deny_unless("move_pages", 0, 0),
    deny_unless("setpriority", 0, PRIO_PROCESS),  // not a process group or a user
    deny_unless("setpriority", 1, 0),
    deny_unless("ioprio_set", 0, kIoprioWhoProcess),
    deny_unless("ioprio_set", 1, 0),
    // Once undumpable, always: a dumpable worker's memory would be open to its siblings.
    deny_if_masked("prctl", 0, 0xffffffffu, PR_SET_DUMPABLE),
    // A terminal on stdout or stderr must not take typed-in commands from us.
    // (ioctl's request is 32 bits wide; the mask ignores what lies above.)
    deny_if_masked("ioctl", 1, 0xffffffffu, TIOCSTI),
    deny_if_masked("ioctl", 1, 0xffffffffu, TIOCLINUX),
};

// No server of its own: no socket listens or accepts (every process here).
constexpr SyscallRule kNoServerRules[] = {
    deny("bind"),
    deny("listen"),
    deny("accept"),
    deny("accept4"),
};

// No new connections: a session worker keeps only the guest's socket and the
// channels it was given (sendmsg, recvmsg). The services process keeps socket and
// connect: the peer broker dials --tensor-peer servers (Landlock narrows the ports).
constexpr SyscallRule kNoConnectionRules[] = {
    deny("socket"),
    deny("connect"),
};

template <size_t... Counts>
std::vector<SyscallRule> rules_of(const SyscallRule (&...tables)[Counts]) {
    std::vector<SyscallRule> rules;
    (rules.insert(rules.end(), std::begin(tables), std::end(tables)), ...);
    return rules;
}

uint32_t action_of(SyscallAction action) {
    return SCMP_ACT_ERRNO(action == SyscallAction::unavailable ? ENOSYS : EPERM);
}

scmp_arg_cmp condition_of(const SyscallRule &rule, uint64_t own_pid) {
    const uint64_t value = rule.value == kOwnPid ? own_pid : rule.value;
    if (rule.test == ArgumentTest::masked_equal) return {rule.argument, SCMP_CMP_MASKED_EQ, rule.mask, value};
    return {rule.argument, SCMP_CMP_NE, value, 0};
}

}  // namespace

const SeccompPolicy &session_worker_policy() {
    static const SeccompPolicy policy{"session worker", rules_of(kCommonRules, kNoServerRules, kNoConnectionRules)};
    return policy;
}

const SeccompPolicy &services_policy() {
    static const SeccompPolicy policy{"services", rules_of(kCommonRules, kNoServerRules)};
    return policy;
}

Status compile_seccomp_policy(const SeccompPolicy &policy, void *filter, uint64_t own_pid) {
    for (size_t i = 0; i < policy.rules.size(); ++i) {
        const SyscallRule &rule = policy.rules[i];
        const int syscall = seccomp_syscall_resolve_name(rule.name);
        if (syscall == __NR_SCMP_ERROR) continue;  // not on this architecture
        const scmp_arg_cmp condition = condition_of(rule, own_pid);
        const bool conditional = rule.test != ArgumentTest::always;
        const int rc = seccomp_rule_add_array(filter, action_of(rule.action), syscall, conditional ? 1 : 0,
                                              conditional ? &condition : nullptr);
        if (rc < 0) {
            return error(Code::error, std::string("seccomp: ") + policy.kind + " policy, rule " + std::to_string(i) +
                                          " (" + rule.name + "): " + std::strerror(-rc));
        }
    }
    return Status::success();
}

}  // namespace ggml_remote::host
