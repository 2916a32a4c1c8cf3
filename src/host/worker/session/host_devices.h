// The host's ggml devices, as a worker loads and chooses them. Only workers (and
// the device probe, a worker started to list them) load backends: the listener
// never computes, so it loads no GPU driver (see listener/device_probe.h).
#pragma once

#include <ggml-backend.h>

#include <string>
#include <vector>

#include "protocol/status.h"

namespace ggml_remote::host {

// Loads the host's ggml backends once per process, without loading our own plugin
// (a GGML_BACKEND_PATH that names libggml-remote would make the server its own guest).
// `verbose`: ggml's informational messages are logged too.
void load_host_backends(bool verbose);

// The host devices a session may use, in the order guests see them: those named
// (all when `names` is empty), never another remote, meta or accelerator device.
Status select_devices(const std::vector<std::string> &names, std::vector<ggml_backend_dev_t> *devices);

}  // namespace ggml_remote::host
