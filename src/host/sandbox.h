// Worker sandbox: what a session worker gives up before it reads a guest's bytes.
//
// A worker is the process a hostile guest talks to; if a bug in a backend ever lets
// a guest run code there, the sandbox decides what that code can do next. See
// docs/SECURITY.md ("Worker sandbox") for what is denied and why a deny-list.
#pragma once

#include "protocol/status.h"

#include <vector>

namespace ggml_remote::host {

// Closes every descriptor but 0, 1, 2 and `keep`, and points stdin at /dev/null:
// a worker holds nothing it was not meant to (listening sockets, a terminal to
// read from, whatever its parents leaked).
void close_descriptors_except(std::vector<int> keep);

// Marks every descriptor from `first` on close-on-exec, so that no child process
// inherits one by accident; a spawner clears the flag on what it hands over.
void mark_descriptors_cloexec(int first);

// No new privileges, no core dumps (they would hold guest data), a modest
// descriptor limit, and the seccomp deny-list; for the calling process, all its
// threads, and everything it could start. Irreversible.
Status enter_sandbox();

// Whether enter_sandbox works on this kernel, tried in a short-lived child process
// so that the caller stays as it was.
Status probe_sandbox();

}  // namespace ggml_remote::host
