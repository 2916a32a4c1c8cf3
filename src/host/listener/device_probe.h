// The device probe: the host's devices, as a worker would serve them, listed by a
// child process. The listener never computes, so it never loads a backend: a GPU
// driver's threads, memory and faults stay out of the process that every guest
// depends on. The probe is the worker program run with --list-devices.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "host/common/serving_options.h"
#include "host/common/worker_contract.h"
#include "protocol/status.h"

namespace ggml_remote::host {

// Runs `worker_program --list-devices` with the --device and --verbose settings of
// `options` and reads its answer; an error carries the probe's own words.
Status probe_devices(const std::string &worker_program, const ServingOptions &options,
                     std::vector<ProbedDevice> *devices);

}  // namespace ggml_remote::host
