// Landlock: which files a sandboxed worker may still open.
//
// Seccomp (sandbox.cpp) takes away system calls; Landlock takes away paths. A worker
// keeps read access to what the host's backends load (libraries, ggml's backend
// directory, driver and ICD files, /proc and /sys) and the device nodes GPUs are
// driven through, and nothing else: not the key file, not the guests' files, not
// anything it could write to change the host. See docs/SECURITY.md ("Worker sandbox").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "host/common/serving_options.h"
#include "protocol/status.h"

namespace ggml_remote::host {

struct FilesystemPolicy {
    std::vector<std::string> read_only;   // read, list, map executable
    std::vector<std::string> devices;     // read, write and ioctl (device nodes)
    std::vector<std::string> read_write;  // also create, write and remove files beneath
    // TCP ports the process may still connect to (Landlock ABI 4 on); none: no TCP
    // connect at all. Only the services process has any (its peer broker's dials).
    std::vector<uint16_t> connect_ports;
};

// What a session worker's backends need, and `paths`; paths that do not exist here
// are left out. Makes the record directory if need be (a sandboxed worker could not).
FilesystemPolicy worker_filesystem_policy(const WorkerPaths &paths);

// Whether `path` lies beneath a path of `policy` (both resolved): a key file there
// would stay readable to a sandboxed worker.
bool policy_lets_read(const FilesystemPolicy &policy, const std::string &path);

// The Landlock ABI version of this kernel, or 0 where it has none (or it is disabled).
int landlock_abi();

// Confines the calling process to `policy` (it must have one thread: Landlock binds
// threads one at a time) and, from ABI 4 on, forbids TCP binds and connects (but to
// `policy.connect_ports`), and from
// ABI 6 on signals to processes outside the sandbox. Needs no_new_privs. Irreversible.
// Where the kernel has no Landlock it does nothing and says so in *applied = false.
Status restrict_filesystem(const FilesystemPolicy &policy, bool *applied);

}  // namespace ggml_remote::host
