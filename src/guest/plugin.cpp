// The registry: what ggml's loader finds in libggml-remote.so.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ggml-remote.h"
#include "guest/backend.h"
#include "guest/device.h"
#include "guest/log.h"
#include "guest/tensor_parallel.h"

namespace ggml_remote::guest {

namespace {

struct Registry {
    ggml_backend_reg reg{};
    std::vector<std::shared_ptr<RemoteSession>> sessions;
    std::vector<std::unique_ptr<RemoteDevice>> devices;
};

const char *reg_get_name(ggml_backend_reg_t) { return "REMOTE"; }

size_t reg_get_device_count(ggml_backend_reg_t reg) { return static_cast<Registry *>(reg->context)->devices.size(); }

ggml_backend_dev_t reg_get_device(ggml_backend_reg_t reg, size_t index) {
    auto *registry = static_cast<Registry *>(reg->context);
    return index < registry->devices.size() ? registry->devices[index]->ggml_device() : nullptr;
}

ggml_backend_feature *reg_get_features(ggml_backend_reg_t) {
    static std::string protocol = std::to_string(protocol::kProtocolVersion);
    static ggml_backend_feature features[] = {{"REMOTE_PROTOCOL", protocol.c_str()}, {nullptr, nullptr}};
    return features;
}

void *reg_get_proc_address(ggml_backend_reg_t, const char *name) {
    const std::string wanted = name;
    if (wanted == "ggml_backend_set_n_threads") return reinterpret_cast<void *>(remote_backend_set_n_threads);
    if (wanted == "ggml_backend_get_features") return reinterpret_cast<void *>(reg_get_features);
    // ggml's meta backend (-sm tensor): servers sum partial results among themselves.
    if (wanted == "ggml_backend_comm_init") return reinterpret_cast<void *>(tensor_parallel_init);
    if (wanted == "ggml_backend_comm_free") return reinterpret_cast<void *>(tensor_parallel_free);
    if (wanted == "ggml_backend_comm_allreduce_tensor") return reinterpret_cast<void *>(tensor_parallel_allreduce);
    return nullptr;
}

void connect_servers(Registry *registry, const GuestOptions &options) {
    if (options.servers.empty()) {
        log(GGML_LOG_LEVEL_WARN,
            "GGML_REMOTE_SERVERS is not set: no remote devices (e.g. "
            "GGML_REMOTE_SERVERS=shm:/run/ggml-remote/ggml-remote.sock or tcp://host:50053)");
        return;
    }
    std::vector<Endpoint> endpoints;
    Status status = parse_endpoint_list(options.servers, &endpoints);
    if (!status) {
        log(GGML_LOG_LEVEL_ERROR, "GGML_REMOTE_SERVERS: %s", status.message().c_str());
        return;
    }
    for (size_t server = 0; server < endpoints.size(); ++server) {
        const Endpoint &endpoint = endpoints[server];
        std::unique_ptr<RemoteSession> opened;
        status = RemoteSession::open(endpoint, options, &opened);
        if (!status) {
            log(GGML_LOG_LEVEL_ERROR, "%s; no devices from this server", status.message().c_str());
            continue;
        }
        std::shared_ptr<RemoteSession> session(std::move(opened));
        size_t added = 0;
        for (uint32_t i = 0; i < session->device_count(); ++i) {
            std::unique_ptr<RemoteDevice> device;
            status = RemoteDevice::create(session, i, remote_device_name(server, i), &registry->reg, &device);
            if (!status) {
                log(GGML_LOG_LEVEL_ERROR, "%s: device %u: %s", endpoint.to_string().c_str(), i,
                    status.message().c_str());
                continue;
            }
            registry->devices.push_back(std::move(device));
            ++added;
        }
        if (added > 0) registry->sessions.push_back(session);
    }
}

Registry *g_registry = nullptr;

// GGML_REMOTE_STATS=1: one line per server at exit, straight to stderr (the
// application's log callback may be gone by then).
void print_stats() {
    if (g_registry == nullptr) return;
    for (const auto &session : g_registry->sessions) {
        const RemoteSession::Counters c = session->counters();
        std::fprintf(stderr,
                     "ggml-remote: %s: %llu commands, %llu round trips, %llu bytes sent, %llu bytes received, "
                     "%llu graphs sent, %llu graphs replayed, %llu file bytes mapped\n",
                     session->endpoint().c_str(), (unsigned long long)c.commands, (unsigned long long)c.round_trips,
                     (unsigned long long)c.bytes_sent, (unsigned long long)c.bytes_received,
                     (unsigned long long)c.graphs_sent, (unsigned long long)c.graphs_replayed,
                     (unsigned long long)c.file_bytes_mapped);
    }
    const TensorParallelCounts tp = tensor_parallel_counts();
    if (tp.groups > 0) {
        std::fprintf(stderr,
                     "ggml-remote: tensor parallelism: %llu groups, %llu all-reduces between servers, %llu left "
                     "to ggml\n",
                     (unsigned long long)tp.groups, (unsigned long long)tp.by_servers,
                     (unsigned long long)tp.left_to_ggml);
    }
}

}  // namespace

ggml_backend_reg_t remote_registry() {
    static Registry *registry = nullptr;
    static std::once_flag once;
    std::call_once(once, [] {
        int version = 0;
        if (!loaded_ggml_matches_abi(&version)) {
            log(GGML_LOG_LEVEL_ERROR,
                "this ggml's backend API version is %d, but libggml-remote was built for version %d; not loading",
                version, GGML_REMOTE_BACKEND_API_VERSION);
            return;
        }
        // Lives as long as the process: ggml keeps pointers to the registry and devices.
        registry = new Registry();
        registry->reg.api_version = GGML_REMOTE_BACKEND_API_VERSION;
        registry->reg.iface.get_name = reg_get_name;
        registry->reg.iface.get_device_count = reg_get_device_count;
        registry->reg.iface.get_device = reg_get_device;
        registry->reg.iface.get_proc_address = reg_get_proc_address;
        registry->reg.context = registry;
        const GuestOptions options = read_guest_options();  // the one read of the environment
        connect_servers(registry, options);
        g_registry = registry;
        if (options.print_stats) std::atexit(print_stats);
    });
    return registry != nullptr ? &registry->reg : nullptr;
}

}  // namespace ggml_remote::guest

extern "C" {

ggml_backend_reg_t ggml_backend_remote_reg(void) { return ggml_remote::guest::remote_registry(); }

// What ggml's loader looks up in a backend plugin.
__attribute__((visibility("default"))) ggml_backend_reg_t ggml_backend_init(void) {
    return ggml_remote::guest::remote_registry();
}

}  // extern "C"
