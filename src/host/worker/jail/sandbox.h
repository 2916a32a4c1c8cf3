// Worker sandbox: what a session worker gives up before it reads a guest's bytes.
//
// A worker is the process a hostile guest talks to; if a bug in a backend ever lets
// a guest run code there, the sandbox decides what that code can do next. See
// docs/SECURITY.md ("Worker sandbox") for what is denied and why a deny-list.
#pragma once

#include <string>
#include <vector>

#include "host/worker/jail/landlock.h"
#include "host/worker/jail/seccomp_policy.h"
#include "protocol/status.h"

namespace ggml_remote::host {

// Closes every descriptor but 0, 1, 2 and `keep`, and points stdin at /dev/null:
// a worker holds nothing it was not meant to (listening sockets, a terminal to
// read from, whatever its parents leaked).
void close_descriptors_except(std::vector<int> keep);

// Marks every descriptor from `first` on close-on-exec, so that no child process
// inherits one by accident; a spawner clears the flag on what it hands over.
void mark_descriptors_cloexec(int first);

// What enter_sandbox put in place beyond seccomp, for the server's start-up line.
struct SandboxReport {
    int landlock_abi = 0;              // 0: this kernel has no Landlock
    bool filesystem_confined = false;  // Landlock applied `files`
    bool had_capabilities = false;     // the process held capabilities, and dropped them
};

// Not dumpable: another process of the same user, without CAP_SYS_PTRACE, can no
// longer open its /proc/PID/mem, ptrace it or read its environment; no core dumps.
// The listener does it at start, a worker first thing (exec made it dumpable again).
Status make_undumpable();

// Not dumpable, no capabilities (bounding, effective, permitted, inheritable,
// ambient), no new privileges, no core dumps, a modest descriptor limit, Landlock on
// `files` (where the kernel has it; the process must still have one thread), and the
// seccomp deny-list `calls` on every thread; for the calling process and everything
// it could start. Irreversible.
Status enter_sandbox(const FilesystemPolicy &files = worker_filesystem_policy({}), SandboxReport *report = nullptr,
                     const SeccompPolicy &calls = session_worker_policy());

// The server's start-up words for `report`: "seccomp sandbox, ..., files confined
// by Landlock (ABI N)", or that files are not confined where the kernel has no Landlock.
std::string describe_sandbox(const SandboxReport &report);

// Whether enter_sandbox(files) works on this kernel, tried in a short-lived child
// process so that the caller stays as it was; `report` says what the child got.
Status probe_sandbox(const FilesystemPolicy &files, SandboxReport *report = nullptr);

}  // namespace ggml_remote::host
