// Listener: accepts guests and hands each to a worker process of its own.
// It never decodes a guest's messages.
#pragma once

#include <string>
#include <vector>

#include "host/listener/listener_options.h"

namespace ggml_remote::host {

// Runs until SIGINT or SIGTERM. `worker_command` is the argv (without the
// per-connection arguments) that starts a worker: the server binary itself.
// `listener_command` is this listener's own argv: SIGUSR2 executes it anew in this
// process, handing over the sockets and the live sessions (listener_handover.h).
int run_listener(const ListenerOptions &options, const std::vector<std::string> &worker_command,
                 const std::vector<std::string> &listener_command);

}  // namespace ggml_remote::host
