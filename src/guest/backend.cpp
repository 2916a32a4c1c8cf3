#include "guest/backend.h"

#include <cstring>
#include <unordered_set>

#include "guest/buffer.h"
#include "guest/graph_retry.h"
#include "guest/last_graph.h"
#include "guest/log.h"
#include "guest/node_order.h"
#include "guest/tensor_parallel.h"
#include "protocol/tensor_codec.h"

namespace ggml_remote::guest {

using namespace protocol;

namespace {

struct RemoteBackend : Restorable {
    RemoteDevice *device = nullptr;
    uint64_t handle = 0;
    RecentGraphs recent_graphs;  // the graphs of this backend the host keeps, to name again
    GraphRetry retry;            // for the last graph: running it again on a new connection
    int n_threads = 0;           // the last count sent; llama.cpp sets it again before every graph
    bool host_reorders = true;   // until the host says its backend has no graph_optimize
    // In a tensor-parallel group (tensor_parallel.h): ggml's meta backend reaches
    // its buffers only through ggml's calls, so a compute returns at once over
    // shared memory too, and the servers of the group compute side by side.
    bool grouped = false;
    NodeOrderCache node_orders;
    // The last graph reordered, as it came (llama.cpp's decode graph is the same
    // every token: no encoding then), its order and the tensors its encoding read.
    LastGraph last_reordered;
    NodeOrder last_order;
    std::vector<const ggml_tensor *> last_order_tensors;

    // A new connection: a new host backend under the same ggml backend.
    void restore(SessionCalls &calls, RestoreReport *report) override {
        handle = 0;
        recent_graphs.forget_all();
        BackendInit::Reply reply{};
        if (!calls.call<BackendInit>({device->remote_index()}).reply(&reply).run()) return;
        handle = reply.backend;
        ++report->restored;
        if (n_threads > 0) (void)calls.post<SetNThreads>({handle, n_threads});
    }
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
    remote->device->session().remove_restorable(remote);
    delete remote;
    delete backend;
}

enum ggml_status finish_compute(RemoteBackend *remote, Status status);

// Every tensor a graph reads or writes: its nodes and, through sources and
// views, everything they depend on.
template <class Visit>
void for_each_tensor(ggml_cgraph *graph, Visit visit) {
    std::unordered_set<const ggml_tensor *> seen;
    std::vector<const ggml_tensor *> stack;
    for (int i = ggml_graph_n_nodes(graph); i-- > 0;) stack.push_back(ggml_graph_node(graph, i));
    while (!stack.empty()) {
        const ggml_tensor *tensor = stack.back();
        stack.pop_back();
        if (tensor == nullptr || !seen.insert(tensor).second) continue;
        visit(tensor);
        stack.push_back(tensor->view_src);
        for (const ggml_tensor *source : tensor->src) stack.push_back(source);
    }
}

// What the host must hear before a graph is encoded and sent, so that encoding
// only encodes: which of our buffers hold weights (the host may repack them), and
// the host's copies of weights read from the guest's CPU_Mapped buffers.
void prepare_graph_weights(RemoteBackend *remote, ggml_cgraph *graph) {
    RemoteSession &session = remote->device->session();
    MappedWeights &mapped_weights = remote->device->mapped_weights();
    mapped_weights.begin_graph();
    for_each_tensor(graph, [&](const ggml_tensor *tensor) {
        if (tensor->data == nullptr) return;
        TensorLocation location;
        if (locate_on_host(&session, tensor, &location)) {
            if (tensor->op == GGML_OP_NONE) tell_weights(tensor);
            RemoteBuffer *owner = remote_buffer_of(tensor);
            if (tensor->op != GGML_OP_NONE ||
                ggml_backend_buffer_get_usage(owner->owner) != GGML_BACKEND_BUFFER_USAGE_WEIGHTS) {
                owner->note_graph_use();
            }
        } else {
            (void)mapped_weights.prepare(tensor);  // a failure is logged; encoding then names the tensor
        }
    });
}

// Encodes the graph, and which tensors the encoding read (sources first); fails
// when a tensor is out of the host's reach.
Status encode_graph(RemoteBackend *remote, ggml_cgraph *graph, std::vector<uint8_t> *encoded,
                    std::vector<const ggml_tensor *> *order) {
    RemoteSession &session = remote->device->session();
    MappedWeights &mapped_weights = remote->device->mapped_weights();
    TensorListEncoder encoder([&session, &mapped_weights](const ggml_tensor *t, TensorLocation *location) {
        return locate_on_host(&session, t, location) || mapped_weights.locate(t, location);
    });
    const int n_nodes = ggml_graph_n_nodes(graph);
    for (int i = 0; i < n_nodes; ++i) encoder.add_node(ggml_graph_node(graph, i));
    if (encoder.failed()) return error(Code::bad_request, "cannot encode the graph: " + encoder.error());
    *encoded = encoder.finish();
    *order = encoder.order();
    return Status::success();
}

Status run_graph(RemoteBackend *remote, ggml_cgraph *graph) {
    RemoteSession &session = remote->device->session();
    if (lost_buffer_count() > 0) {
        if (Status status = report_lost_buffers_read(graph); !status) return status;
    }
    // Shared memory is read in place, by this process's own backends too (a CPU
    // split may read a result without any copy), so the compute must be over when
    // we return. Remote buffers are read through the session, after the compute.
    const bool waits = remote->device->shares_memory() && !remote->grouped;
    const auto completion = waits ? RemoteSession::Completion::waits : RemoteSession::Completion::returns_at_once;
    if (remote->grouped && remote->device->shares_memory()) session.note_compute_in_flight(remote->handle);
    // Over shared memory the graph may have to run again, from the inputs it had;
    // not in a group, whose inputs an earlier compute may still be writing (and
    // whose other servers would not run again with it).
    const bool may_retry = remote->device->shares_memory() && !remote->grouped;
    bool replayed = false;
    if (const LastGraph *known = remote->recent_graphs.find(graph)) {
        if (may_retry && remote->retry.safe()) remote->retry.save_inputs();
        Status status = session.compute_graph_again(remote->handle, known->ticket(), completion, &replayed);
        if (replayed) return status;
    }
    if (may_retry) {
        remote->retry.plan(graph);
        if (remote->retry.safe()) remote->retry.save_inputs();
    }
    prepare_graph_weights(remote, graph);  // before the compute that reads them
    std::vector<uint8_t> encoded;
    std::vector<const ggml_tensor *> order;
    if (Status status = encode_graph(remote, graph, &encoded, &order); !status) return status;
    RemoteSession::GraphTicket ticket;
    Status status = session.compute_graph(remote->handle, encoded, completion, &ticket);
    if (status) {
        remote->recent_graphs.record(graph, order, ticket);
    } else {
        remote->recent_graphs.forget(graph);
    }
    return status;
}

enum ggml_status backend_graph_compute(ggml_backend_t backend, ggml_cgraph *graph) {
    RemoteBackend *remote = context_of(backend);
    if (std::string why; remote->grouped && tensor_parallel_compute_refused(remote->device, &why)) {
        log(GGML_LOG_LEVEL_ERROR, "%s: graph compute failed: a server of its tensor-parallel group failed (%s)",
            remote->device->name().c_str(), why.c_str());
        return GGML_STATUS_FAILED;
    }
    RemoteSession &session = remote->device->session();
    const uint64_t reconnections = session.reconnections();
    Status status = run_graph(remote, graph);
    // The connection was lost and made again with nothing lost (over shm, all in
    // CPU memory): running the graph again from its inputs computes the same values.
    if (!status && status.code() == Code::disconnected && session.reconnections() != reconnections) {
        if (session.last_restore_intact() && remote->retry.safe()) {
            remote->retry.restore_inputs();
            status = run_graph(remote, graph);
        } else if (lost_buffer_count() > 0) {
            // This failure is how the application hears of the loss: name what it lost.
            if (Status lost = report_lost_buffers_read(graph); !lost) status = lost;
        }
    }
    return finish_compute(remote, status);
}

enum ggml_status finish_compute(RemoteBackend *remote, Status status) {
    if (!status) {
        if (remote->grouped) tensor_parallel_member_failed(remote->device, status);
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

// The host backend's node order for a graph (see node_order.h), asked once per
// graph shape.
Status ask_node_order(RemoteBackend *remote, const std::string &encoded, uint32_t n_nodes, uint32_t n_tensors,
                      NodeOrder *order) {
    GraphOptimize::Reply reply{};
    std::vector<uint8_t> tail;
    Status status = remote->device->session()
                        .call<GraphOptimize>({remote->handle})
                        .tail(ByteView(encoded.data(), encoded.size()))
                        .reply(&reply)
                        .reply_tail(&tail)
                        .run();
    if (!status) return status;
    if (reply.has_optimizer == 0) {
        remote->host_reorders = false;
        return Status(Code::unsupported, "no graph_optimize");
    }
    return parse_node_order(reply, ByteView(tail), n_nodes, n_tensors, order);
}

// Puts the graph in `order` and hands its allocation dependencies to the
// scheduler; `tensors` are those the graph's encoding read, in list order.
void reorder(ggml_cgraph *graph, const NodeOrder &order, const std::vector<const ggml_tensor *> &tensors,
             ggml_backend_graph_optimize_params *params) {
    apply_node_order(graph, order);
    if (params == nullptr || params->add_alloc_dep == nullptr) return;
    for (const auto &[kept, until] : order.alloc_deps) {
        params->add_alloc_dep(params->user_data, const_cast<ggml_tensor *>(tensors[kept]),
                              const_cast<ggml_tensor *>(tensors[until]));
    }
}

// ggml's scheduler calls this before it allocates a graph: the graph then runs,
// is allocated and fuses in the order the host's backend would choose locally.
void backend_graph_optimize(ggml_backend_t backend, ggml_cgraph *graph, ggml_backend_graph_optimize_params *params) {
    RemoteBackend *remote = context_of(backend);
    const int n_nodes = ggml_graph_n_nodes(graph);
    if (!remote->host_reorders || n_nodes < 2) return;
    if (remote->last_reordered.same_as(graph)) {
        reorder(graph, remote->last_order, remote->last_order_tensors, params);
        return;
    }
    TensorListEncoder encoder{TensorListEncoder::Locator()};  // shapes, ops and sources: no data yet
    for (int i = 0; i < n_nodes; ++i) encoder.add_node(ggml_graph_node(graph, i));
    if (encoder.failed()) return;  // the compute reports what cannot be sent
    const std::vector<uint8_t> bytes = encoder.finish();
    const std::string encoded(bytes.begin(), bytes.end());
    const NodeOrder *order = remote->node_orders.find(encoded);
    if (order == nullptr) {
        NodeOrder asked;
        Status status = ask_node_order(remote, encoded, static_cast<uint32_t>(n_nodes),
                                       static_cast<uint32_t>(encoder.order().size()), &asked);
        if (!status) {
            if (status.code() != Code::unsupported && status.code() != Code::disconnected) {
                remote->host_reorders = false;  // an older server, or one that failed: keep our order
                log(GGML_LOG_LEVEL_WARN, "%s: graph_optimize: %s; graphs keep their order",
                    remote->device->name().c_str(), status.message().c_str());
            }
            return;
        }
        remote->node_orders.remember(encoded, std::move(asked));
        order = remote->node_orders.find(encoded);
    }
    remote->last_reordered.record(graph, encoder.order(), {});  // as it came, before reordering
    remote->last_order = *order;
    remote->last_order_tensors = encoder.order();
    reorder(graph, *order, encoder.order(), params);
}

// The asynchronous stream. The host works through a session's commands in order,
// so a write is in place for every later command as soon as it is sent, a read
// can wait in line for its reply (read at synchronize), and an event is a
// position in that line.

void report(RemoteBackend *remote, const char *what, const Status &status) {
    if (status.code() == Code::disconnected) return;  // logged once by the session
    log(GGML_LOG_LEVEL_ERROR, "%s: %s failed: %s", remote->device->name().c_str(), what, status.message().c_str());
}

void backend_synchronize(ggml_backend_t backend) {
    RemoteBackend *remote = context_of(backend);
    Status status = remote->device->session().synchronize(remote->handle);
    if (!status && remote->grouped) tensor_parallel_member_failed(remote->device, status);
    if (!status) report(remote, "synchronize", status);
}

// The buffer that holds a tensor's bytes, when it is one of this session's.
RemoteBuffer *session_buffer_of(RemoteBackend *remote, const ggml_tensor *tensor) {
    RemoteBuffer *owner = remote_buffer_of(tensor);
    if (owner == nullptr || &owner->device->session() != &remote->device->session()) return nullptr;
    return owner;
}

void backend_set_tensor_async(ggml_backend_t backend, ggml_tensor *tensor, const void *data, size_t offset,
                              size_t size) {
    RemoteBackend *remote = context_of(backend);
    RemoteBuffer *owner = session_buffer_of(remote, tensor);
    // Memory this process writes itself (shared) must be free of the host's work first.
    if (owner == nullptr || owner->kind != RemoteBuffer::Kind::remote) backend_synchronize(backend);
    ggml_backend_tensor_set(tensor, data, offset, size);
}

void backend_get_tensor_async(ggml_backend_t backend, const ggml_tensor *tensor, void *data, size_t offset,
                              size_t size) {
    RemoteBackend *remote = context_of(backend);
    RemoteBuffer *owner = session_buffer_of(remote, tensor);
    if (owner == nullptr || owner->kind != RemoteBuffer::Kind::remote) {
        backend_synchronize(backend);
        ggml_backend_tensor_get(tensor, data, offset, size);
        return;
    }
    Status status = owner->read_tensor(tensor, offset, data, size, "get_tensor_async");
    if (!status) report(remote, "get_tensor_async", status);
}

// A copy between two tensors of this session stays on the host, in line; any
// other copy is ggml's to do (it synchronizes and copies through this process).
bool backend_cpy_tensor_async(ggml_backend_t backend_src, ggml_backend_t backend_dst, const ggml_tensor *src,
                              ggml_tensor *dst) {
    (void)backend_src;
    RemoteBackend *remote = context_of(backend_dst);
    RemoteBuffer *from = session_buffer_of(remote, src);
    RemoteBuffer *to = session_buffer_of(remote, dst);
    if (from == nullptr || to == nullptr || ggml_nbytes(src) != ggml_nbytes(dst)) return false;
    if (to->kind != RemoteBuffer::Kind::remote) {
        // Both sides' bytes are mapped here; the host must be done with them first.
        if (from->kind == RemoteBuffer::Kind::remote) return false;
        backend_synchronize(backend_dst);
        std::memcpy(dst->data, src->data, ggml_nbytes(src));
        return true;
    }
    CopyTensor::Request request{from->range(src, 0, ggml_nbytes(src)), to->range(dst, 0, ggml_nbytes(dst))};
    to->note_write(request.dst.offset, request.dst.size, nullptr);
    Status status = remote->device->session().call<CopyTensor>(request).run_later("cpy_tensor_async");
    if (!status) {
        report(remote, "cpy_tensor_async", status);
        return false;
    }
    return true;
}

void backend_event_record(ggml_backend_t backend, ggml_backend_event_t event) {
    RemoteBackend *remote = context_of(backend);
    auto *mark = static_cast<RemoteEvent *>(event->context);
    mark->session = &remote->device->session();
    mark->backend = remote->handle;
    mark->position = mark->session->mark();
}

void backend_event_wait(ggml_backend_t backend, ggml_backend_event_t event) {
    RemoteBackend *remote = context_of(backend);
    auto *mark = remote_event_of(event);
    // Work in the same session is already in line behind the event.
    if (mark != nullptr && mark->session == &remote->device->session()) return;
    ggml_backend_event_synchronize(event);
}

}  // namespace

Status report_lost_buffers_read(ggml_cgraph *graph) {
    Status found = Status::success();
    for_each_tensor(graph, [&found](const ggml_tensor *tensor) {
        RemoteBuffer *owner = remote_buffer_of(tensor);
        if (owner == nullptr || !owner->lost) return;
        if (found) {
            found = error(Code::error, "tensor '" + std::string(tensor->name) + "' is in the " + owner->describe() +
                                           ", whose contents were lost with the connection to " +
                                           owner->device->session().endpoint() +
                                           "; it now holds zeros, which later computes read");
        }
        owner->lost_was_reported();
    });
    return found;
}

void remote_event_synchronize(RemoteDevice *device, ggml_backend_event_t event) {
    auto *mark = static_cast<RemoteEvent *>(event->context);
    if (mark->session == nullptr) return;  // never recorded
    Status status = mark->session->wait_for_mark(mark->position, mark->backend);
    if (!status && status.code() != Code::disconnected) {
        log(GGML_LOG_LEVEL_ERROR, "%s: event_synchronize failed: %s", device->name().c_str(), status.message().c_str());
    }
}

ggml_backend_t create_remote_backend(RemoteDevice *device) {
    BackendInit::Reply reply{};
    Status status = device->session().call<BackendInit>({device->remote_index()}).reply(&reply).run();
    if (!status) {
        log(GGML_LOG_LEVEL_ERROR, "%s: cannot start a backend: %s", device->name().c_str(), status.message().c_str());
        return nullptr;
    }
    auto *remote = new RemoteBackend();
    remote->device = device;
    remote->handle = reply.backend;
    device->session().add_restorable(remote);
    auto *backend = new ggml_backend{};
    backend->guid = remote_guid();
    backend->iface.get_name = backend_get_name;
    backend->iface.free = backend_free;
    backend->iface.graph_compute = backend_graph_compute;
    backend->iface.synchronize = backend_synchronize;
    backend->iface.set_tensor_async = backend_set_tensor_async;
    backend->iface.get_tensor_async = backend_get_tensor_async;
    backend->iface.cpy_tensor_async = backend_cpy_tensor_async;
    backend->iface.event_record = backend_event_record;
    backend->iface.event_wait = backend_event_wait;
    backend->iface.graph_optimize = backend_graph_optimize;
    backend->device = device->ggml_device();
    backend->context = remote;
    return backend;
}

void remote_backend_set_n_threads(ggml_backend_t backend, int n_threads) {
    if (backend == nullptr || backend->iface.get_name != backend_get_name) return;  // not one of ours
    RemoteBackend *remote = context_of(backend);
    if (n_threads == remote->n_threads) return;
    remote->n_threads = n_threads;
    remote->device->session().set_compute_threads(n_threads);
    Status status = remote->device->session().post<SetNThreads>({remote->handle, n_threads});
    if (!status && status.code() != Code::disconnected) {
        log(GGML_LOG_LEVEL_WARN, "%s: set_n_threads: %s", remote->device->name().c_str(), status.message().c_str());
    }
}

void remote_backend_set_grouped(ggml_backend_t backend, bool grouped) {
    if (backend == nullptr || backend->iface.get_name != backend_get_name) return;
    context_of(backend)->grouped = grouped;
}

RemoteDevice *remote_device_of(ggml_backend_t backend) {
    if (backend == nullptr || backend->iface.get_name != backend_get_name) return nullptr;  // not one of ours
    return context_of(backend)->device;
}

}  // namespace ggml_remote::guest
