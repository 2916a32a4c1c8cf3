// A session worker: the process that serves exactly one guest.
//
// The listener spawns one per connection (fork + exec of the server binary), so a
// crash or abort inside a backend ends only that guest's session, and everything
// the guest allocated is freed when the worker exits.
#pragma once

#include "host/server_options.h"

namespace ggml_remote::host {

// Serves the guest on `client_fd`; returns the process exit code.
int run_worker(int client_fd, int session_id, const std::string &peer, const ServerOptions &options);

}  // namespace ggml_remote::host
