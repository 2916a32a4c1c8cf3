// Worker identity: where the server starts as root, its workers may run as a user of
// their own (--worker-user), so that code in a worker meets the permissions of that
// user instead of root's: root's files, the listener and every process of root are
// out of reach by file mode and UID, whatever the kernel's Landlock support.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "protocol/status.h"

namespace ggml_remote::host {

struct WorkerIdentity {
    std::string user;
    uid_t uid = 0;
    gid_t gid = 0;
    std::vector<gid_t> groups;  // the user's supplementary groups (video, render: GPUs)
};

// Looks `user` up (name or number); refuses root, which would be no change.
Status find_worker_identity(const std::string &user, WorkerIdentity *identity);

// Switches the calling process to `identity` for good (real, effective and saved IDs,
// groups) and checks that root cannot be regained. Needs root; before the sandbox.
Status become(const WorkerIdentity &identity);

}  // namespace ggml_remote::host
