#include "host/common/serving_options.h"

#include <cstdlib>

namespace ggml_remote::host {

Status read_server_environment(ServingOptions *options) {
    const char *record_dir = std::getenv("GGML_REMOTE_RECORD_DIR");
    options->record_dir = record_dir != nullptr ? record_dir : "";
    const char *backend_path = std::getenv("GGML_BACKEND_PATH");
    options->backend_path = backend_path != nullptr ? backend_path : "";
    // GGML_REMOTE_FOLLOW_WORKER concerns guests only.
    return parse_wait_options(std::getenv("GGML_REMOTE_RING_SPIN_US"), std::getenv("GGML_REMOTE_SPIN_SPARE"), nullptr,
                              &options->waiting);
}

WorkerPaths worker_paths(const ServingOptions &options) { return {options.backend_path, options.record_dir}; }

}  // namespace ggml_remote::host
