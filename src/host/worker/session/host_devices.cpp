#include "host/worker/session/host_devices.h"

#include <unistd.h>

#include <cstdlib>
#include <mutex>

#include "host/common/server_log.h"

namespace ggml_remote::host {

namespace {

bool g_verbose = false;

// ggml announces every backend it loads; a server log wants only trouble.
bool ggml_level_shown(ggml_log_level level) {
    return g_verbose || (level != GGML_LOG_LEVEL_INFO && level != GGML_LOG_LEVEL_DEBUG);
}

void filtered_ggml_log(ggml_log_level level, const char *text, void *) {
    // ggml sends a line in pieces, and its messages can name a guest's tensors:
    // each line is joined first, stays one line, and goes out in one write.
    // Never destroyed: a backend's thread may still log while the process exits.
    static GgmlLogJoiner *const joiner = new GgmlLogJoiner(STDERR_FILENO, ggml_level_shown);
    joiner->add(level, text);
}

}  // namespace

void load_host_backends(bool verbose) {
    static std::once_flag once;
    std::call_once(once, [verbose] {
        g_verbose = verbose;
        ggml_log_set(filtered_ggml_log, nullptr);
        const char *path = std::getenv("GGML_BACKEND_PATH");
        if (path != nullptr && std::string(path).find("ggml-remote") != std::string::npos) {
            unsetenv("GGML_BACKEND_PATH");
        }
        ggml_backend_load_all();
    });
}

Status select_devices(const std::vector<std::string> &names, std::vector<ggml_backend_dev_t> *devices) {
    devices->clear();
    for (size_t i = 0; i < ggml_backend_dev_count(); ++i) {
        ggml_backend_dev_t device = ggml_backend_dev_get(i);
        const std::string reg_name = ggml_backend_reg_name(ggml_backend_dev_backend_reg(device));
        if (reg_name == "REMOTE" || reg_name == "RPC") continue;  // never forward to another remote
        // Meta devices wrap others, and accelerators (BLAS) only assist the CPU
        // backend of their own process.
        const auto type = ggml_backend_dev_type(device);
        if (type == GGML_BACKEND_DEVICE_TYPE_META || type == GGML_BACKEND_DEVICE_TYPE_ACCEL) continue;
        if (!names.empty()) {
            bool wanted = false;
            for (const std::string &name : names) wanted |= name == ggml_backend_dev_name(device);
            if (!wanted) continue;
        }
        devices->push_back(device);
    }
    for (const std::string &name : names) {
        bool found = false;
        for (ggml_backend_dev_t device : *devices) found |= name == ggml_backend_dev_name(device);
        if (!found) {
            std::string available;
            for (size_t i = 0; i < ggml_backend_dev_count(); ++i) {
                available +=
                    (available.empty() ? "" : ", ") + std::string(ggml_backend_dev_name(ggml_backend_dev_get(i)));
            }
            return error(Code::not_found, "no host device named '" + name + "' (available: " + available + ")");
        }
    }
    if (devices->empty()) return error(Code::not_found, "the host has no ggml device to serve");
    return Status::success();
}

}  // namespace ggml_remote::host
