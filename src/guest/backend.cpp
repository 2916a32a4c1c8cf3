#include "guest/log.h"
#include "guest/remote_device.h"
#include "protocol/tensor_codec.h"

namespace ggml_remote::guest {

using namespace protocol;

namespace {

struct RemoteBackend {
    RemoteDevice *device = nullptr;
    uint64_t handle = 0;
};

RemoteBackend *context_of(ggml_backend_t backend) { return static_cast<RemoteBackend *>(backend->context); }

ggml_guid_t remote_guid() {
    static ggml_guid guid = {0x67, 0x67, 0x6d, 0x6c, 0x2d, 0x72, 0x65, 0x6d,
                             0x6f, 0x74, 0x65, 0x2d, 0x76, 0x31, 0x00, 0x01};
    return &guid;
}

const char *backend_get_name(ggml_backend_t backend) { return context_of(backend)->device->name().c_str(); }

void backend_free(ggml_backend_t backend) {
    RemoteBackend *remote = context_of(backend);
    (void)remote->device->session().post<BackendFree>({remote->handle});
    delete remote;
    delete backend;
}

enum ggml_status backend_graph_compute(ggml_backend_t backend, ggml_cgraph *graph) {
    RemoteBackend *remote = context_of(backend);
    RemoteSession &session = remote->device->session();
    TensorListEncoder encoder([&session](const ggml_tensor *t, TensorLocation *location) {
        RemoteBuffer *owner = remote_buffer_of(t->buffer != nullptr ? t->buffer : t->view_src ? t->view_src->buffer : nullptr);
        if (owner == nullptr || &owner->device->session() != &session) return false;
        location->buffer = owner->handle;
        location->offset = static_cast<const uint8_t *>(t->data) - static_cast<const uint8_t *>(owner->base);
        return true;
    });
    const int n_nodes = ggml_graph_n_nodes(graph);
    for (int i = 0; i < n_nodes; ++i) encoder.add_node(ggml_graph_node(graph, i));
    if (encoder.failed()) {
        log(GGML_LOG_LEVEL_ERROR, "%s: cannot compute the graph: %s", remote->device->name().c_str(),
            encoder.error().c_str());
        return GGML_STATUS_FAILED;
    }
    Status status = session.compute_graph(remote->handle, encoder.finish());
    // Shared memory is read in place, by this process's own backends too (a CPU
    // split may read a result without any copy), so the compute must be over when
    // we return. Remote buffers are read through the session, after the compute.
    if (status && remote->device->shares_memory()) status = session.synchronize(remote->handle);
    if (!status) {
        if (status.code() != Code::disconnected) {
            log(GGML_LOG_LEVEL_ERROR, "%s: graph compute failed: %s", remote->device->name().c_str(),
                status.message().c_str());
        }
        return GGML_STATUS_FAILED;
    }
    // Otherwise the host computes while we return; its status, if not success,
    // comes back as the error of the next reply (the read of the results).
    return GGML_STATUS_SUCCESS;
}

}  // namespace

ggml_backend_t create_remote_backend(RemoteDevice *device) {
    BackendInit::Reply reply{};
    Status status = device->session().call<BackendInit>({device->remote_index()}, {}, &reply);
    if (!status) {
        log(GGML_LOG_LEVEL_ERROR, "%s: cannot start a backend: %s", device->name().c_str(), status.message().c_str());
        return nullptr;
    }
    auto *remote = new RemoteBackend{device, reply.backend};
    auto *backend = new ggml_backend{};
    backend->guid = remote_guid();
    backend->iface.get_name = backend_get_name;
    backend->iface.free = backend_free;
    // No synchronize: a compute over shared memory returns when it is done, and
    // remote buffers are read through the session, after everything sent before.
    backend->iface.graph_compute = backend_graph_compute;
    backend->device = device->ggml_device();
    backend->context = remote;
    return backend;
}

void remote_backend_set_n_threads(ggml_backend_t backend, int n_threads) {
    if (backend == nullptr || backend->iface.get_name != backend_get_name) return;  // not one of ours
    RemoteBackend *remote = context_of(backend);
    Status status = remote->device->session().post<SetNThreads>({remote->handle, n_threads});
    if (!status && status.code() != Code::disconnected) {
        log(GGML_LOG_LEVEL_WARN, "%s: set_n_threads: %s", remote->device->name().c_str(), status.message().c_str());
    }
}

}  // namespace ggml_remote::guest
