// Shader cache (--shader-cache DIR): GPU drivers keep the kernels they compiled for
// a session on disk, so that the next session of the same tenant loads them instead
// of compiling them again (seconds on a GPU, up to a minute on lavapipe).
//
// Compiled code is code: a cache one worker writes and another loads would let a
// guest that took over its worker plant code in other guests' sessions. So each
// tenant (the peer the kernel names: a user on a unix socket, an address on plain
// TCP) gets a directory of its own, DIR/t-<digest>, and its workers' sandbox may
// write there and nowhere else in DIR. Where Landlock does not confine a worker's
// files, no worker uses the cache. TLS guests are authenticated inside the sandbox,
// after its rules are fixed: they compile without a cache. See docs/SECURITY.md.
#pragma once

#include <sys/types.h>

#include <string>

#include "protocol/status.h"

namespace ggml_remote::host {

// DIR/t-<digest of tenant>: where `tenant`'s workers keep their drivers' caches.
std::string tenant_shader_cache(const std::string &root, const std::string &tenant);

// Makes `root` (mode 0700) for the workers: given to `owner` where it is not -1
// (a --worker-user); an existing path must be a directory.
Status prepare_shader_cache_root(const std::string &root, uid_t owner, gid_t group);

// Makes a tenant's `directory` (mode 0700) as the calling user; refuses a path that
// is there but not a directory of this user (a link, a file, another user's).
Status prepare_tenant_shader_cache(const std::string &directory);

// Points the GPU drivers this process loads afterwards at `directory` (Mesa's
// MESA_SHADER_CACHE_DIR, XDG_CACHE_HOME, NVIDIA's and CUDA's cache paths).
void use_shader_cache(const std::string &directory);

}  // namespace ggml_remote::host
