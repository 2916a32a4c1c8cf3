// A session worker: the process that serves exactly one guest.
//
// The listener spawns one per connection (fork + exec of the server binary), so a
// crash or abort inside a backend ends only that guest's session, and everything
// the guest allocated is freed when the worker exits.
#pragma once

#include "host/common/serving_options.h"
#include "host/common/worker_contract.h"

namespace ggml_remote::host {

// Serves the guest of `launch`; returns the process exit code.
int run_worker(const WorkerLaunch &launch, const ServingOptions &options);

}  // namespace ggml_remote::host
