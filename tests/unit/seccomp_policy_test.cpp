// The workers' system-call policies (host/worker/jail/seccomp_policy.h): every table
// compiles into a filter, and names only calls this architecture has.
#include "host/worker/jail/seccomp_policy.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <seccomp.h>
#include <unistd.h>

#include <memory>
#include <set>
#include <string>

namespace ggml_remote::host {
namespace {

const SeccompPolicy *const kEveryPolicy[] = {&session_worker_policy(), &services_policy()};

struct FilterDeleter {
    void operator()(void *filter) const { seccomp_release(filter); }
};

std::set<std::string> names_of(const SeccompPolicy &policy) {
    std::set<std::string> names;
    for (const SyscallRule &rule : policy.rules) names.insert(rule.name);
    return names;
}

TEST(SeccompPolicy, EveryPolicyCompilesToAFilter) {
    for (const SeccompPolicy *policy : kEveryPolicy) {
        std::unique_ptr<void, FilterDeleter> filter(seccomp_init(SCMP_ACT_ALLOW));
        ASSERT_NE(filter, nullptr);
        const Status status = compile_seccomp_policy(*policy, filter.get(), static_cast<uint64_t>(::getpid()));
        ASSERT_TRUE(status.ok()) << policy->kind << ": " << status.message();
        const int sink = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
        EXPECT_EQ(seccomp_export_bpf(filter.get(), sink), 0) << policy->kind;
        ::close(sink);
    }
}

// A misspelt name would be skipped as "not on this architecture": on x86-64, which
// has every call the tables name, none may be skipped.
TEST(SeccompPolicy, EveryNamedCallExistsOnX86_64) {
#if defined(__x86_64__)
    for (const SeccompPolicy *policy : kEveryPolicy) {
        for (const std::string &name : names_of(*policy)) {
            EXPECT_NE(seccomp_syscall_resolve_name(name.c_str()), __NR_SCMP_ERROR) << policy->kind << ": " << name;
        }
    }
#else
    GTEST_SKIP() << "the names are checked on x86-64";
#endif
}

// What docs/SECURITY.md promises a taken-over worker cannot do next.
TEST(SeccompPolicy, TheSessionWorkerLosesWhatAnAttackerWantsNext) {
    const std::set<std::string> names = names_of(session_worker_policy());
    for (const char *promised :
         {"execve", "execveat", "fork", "vfork", "ptrace", "process_vm_readv", "socket", "connect", "io_uring_setup",
          "mount", "unshare", "bpf", "kill", "clone", "clone3", "prctl", "setuid"}) {
        EXPECT_EQ(names.count(promised), 1u) << promised;
    }
}

// The services process dials peer servers (socket, connect) and nothing else of
// the network; everything else a worker loses, it loses too.
TEST(SeccompPolicy, TheServicesProcessLosesAllAWorkerLosesButItsDials) {
    std::set<std::string> worker = names_of(session_worker_policy());
    const std::set<std::string> services = names_of(services_policy());
    for (const char *promised : {"execve", "fork", "ptrace", "bind", "listen", "accept", "accept4", "mount", "kill"}) {
        EXPECT_EQ(services.count(promised), 1u) << promised;
    }
    worker.erase("socket");
    worker.erase("connect");
    EXPECT_EQ(services, worker);
}

TEST(SeccompPolicy, AFailingRuleIsNamed) {
    // No 10th argument.
    const SeccompPolicy policy{"test", {{"kill", SyscallAction::deny, ArgumentTest::not_equal, 9, 0, 0}}};
    std::unique_ptr<void, FilterDeleter> filter(seccomp_init(SCMP_ACT_ALLOW));
    const Status status = compile_seccomp_policy(policy, filter.get(), 1);
    EXPECT_FALSE(status.ok());
    EXPECT_NE(status.message().find("test policy, rule 0 (kill)"), std::string::npos) << status.message();
}

}  // namespace
}  // namespace ggml_remote::host
