// The start-up check of the paths a server is given: what its session workers may
// write must be apart from each other and from everything that others trust.
//
// Every worker may write the weight store and the record directory, and each
// tenant's workers their part of the shader cache (landlock.h, worker.cpp). A
// directory nested in another (or the same one, or reached through a link) would
// hand one of those grants to every worker: a shader cache inside the store is
// code that any guest's worker could rewrite for another tenant's GPU driver. A
// key file, a listening socket or an ivshmem region file inside such a directory
// could be read, replaced or shrunk by a worker; a writable directory around or
// inside what workers load (libraries, backends, drivers) would let one plant code
// for the next. The server refuses to start with any of these (docs/SECURITY.md,
// "Configuration").
#pragma once

#include <string>
#include <vector>

#include "host/listener/listener_options.h"
#include "protocol/status.h"

namespace ggml_remote::host {

// A path the server was given, and where it came from ("--weight-store").
struct NamedPath {
    std::string source;
    std::string path;
};

// `path` made absolute with every link resolved; the parts that do not exist yet
// (a store the listener makes later) are appended as written, "." and ".." folded.
std::string resolved_path(const std::string &path);

// Whether resolved path `inner` is `outer` or lies beneath it.
bool path_within(const std::string &inner, const std::string &outer);

// The check itself: `writable` directories (each granted to workers) must not
// overlap each other; none may contain a path of `trusted` (read by the listener
// or by other tenants' sessions), nor overlap one of `code` (what workers and the
// listener load). The error names both paths, and both resolved where that differs.
Status check_path_overlaps(const std::vector<NamedPath> &writable, const std::vector<NamedPath> &trusted,
                           const std::vector<NamedPath> &code);

// check_path_overlaps for the server's options: the weight store, the shader
// cache and the record directory; the key file, unix sockets and ivshmem region
// files; the paths the workers' sandbox lets them read (worker_filesystem_policy).
Status check_server_paths(const ListenerOptions &options);

}  // namespace ggml_remote::host
