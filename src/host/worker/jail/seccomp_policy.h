// The workers' system-call policies as data: one table per kind of worker, each a
// list of rules read top to bottom, compiled into a seccomp filter by
// compile_seccomp_policy (sandbox.cpp loads it; a unit test compiles every table).
//
// Why a deny-list and not an allow-list: a worker runs the host's ggml backends,
// and GPU backends talk to their drivers through ioctls, mmaps and helper threads
// that differ per vendor and driver release. An allow-list tight enough to matter
// would break them on the next driver update; a deny-list takes away what an
// attacker who got code execution in a worker wants next (a shell, the network,
// the listener and the other workers, the kernel's rarer interfaces) and leaves the
// backends alone. Every call not named is allowed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "protocol/status.h"

namespace ggml_remote::host {

// What a rule does to a call it matches.
enum class SyscallAction : uint8_t {
    deny,         // fails with EPERM
    unavailable,  // fails with ENOSYS, as on a kernel without it (the caller falls back)
};

// How a rule looks at one argument; `always`: the call is matched whatever it is given.
enum class ArgumentTest : uint8_t {
    always,
    masked_equal,  // (argument & mask) == value
    not_equal,     // argument != value
};

// A value filled in when the filter is made: this worker's own process id.
constexpr uint64_t kOwnPid = ~uint64_t(0);

struct SyscallRule {
    const char *name;  // a call this architecture lacks is skipped
    SyscallAction action = SyscallAction::deny;
    ArgumentTest test = ArgumentTest::always;
    unsigned argument = 0;
    uint64_t mask = 0;   // masked_equal only
    uint64_t value = 0;  // kOwnPid: the worker's process id
};

struct SeccompPolicy {
    const char *kind;  // the kind of process, for messages
    std::vector<SyscallRule> rules;
};

// A session worker: the process a guest talks to (worker/session/worker.h). The
// device probe loads backends but reads no guest's bytes, and has no table.
const SeccompPolicy &session_worker_policy();
// The services process (host/services/services.h): the store's owner, the model
// library and the peer broker. The same as a worker's, but it may open sockets and
// connect (the broker dials --tensor-peer servers); it never listens.
const SeccompPolicy &services_policy();

// Adds every rule of `policy` to the libseccomp filter `filter` (a scmp_filter_ctx),
// with kOwnPid as `own_pid`; an error names the rule that failed.
Status compile_seccomp_policy(const SeccompPolicy &policy, void *filter, uint64_t own_pid);

}  // namespace ggml_remote::host
