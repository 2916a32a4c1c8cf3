// Session: the handlers of backends and graph computes, and the threads they compute with.
#include <algorithm>
#include <chrono>
#include <unordered_map>

#include "abi/ggml_backend_abi_v3.h"
#include "host/worker/graph/op_validation.h"
#include "host/worker/session/session.h"
#include "protocol/printable.h"

namespace ggml_remote::host {

using namespace protocol;

namespace {

ggml_backend_reg_t backend_reg(ggml_backend_t backend) {
    ggml_backend_dev_t device = ggml_backend_get_device(backend);
    return device != nullptr ? ggml_backend_dev_backend_reg(device) : nullptr;
}

// A function a backend's registry offers by name, or null.
template <class Function>
Function proc_address(ggml_backend_reg_t reg, const char *name) {
    return reg != nullptr ? reinterpret_cast<Function>(ggml_backend_reg_get_proc_address(reg, name)) : nullptr;
}

// What a backend's graph_optimize asked to keep allocated: (tensor, until) pairs.
using AllocDeps = std::vector<std::pair<const ggml_tensor *, const ggml_tensor *>>;

void record_alloc_dep(void *user_data, ggml_tensor *tensor, ggml_tensor *until) {
    static_cast<AllocDeps *>(user_data)->emplace_back(tensor, until);
}

// The reply tail of GraphOptimize: each node's place in `original` in the graph's
// new order, then the alloc deps as list indexes. False when the backend did more
// than reorder (a node dropped, added or repeated) or named a tensor not in the list.
bool describe_new_order(const std::vector<ggml_tensor *> &original, ggml_cgraph *graph,
                        const std::vector<ggml_tensor *> &list, const AllocDeps &deps, std::vector<uint8_t> *tail,
                        GraphOptimize::Reply *reply) {
    const int n_nodes = ggml_graph_n_nodes(graph);
    if (n_nodes != static_cast<int>(original.size())) return false;
    std::unordered_map<const ggml_tensor *, int32_t> position, list_index;
    for (size_t i = 0; i < original.size(); ++i) position.emplace(original[i], static_cast<int32_t>(i));
    for (size_t i = 0; i < list.size(); ++i) list_index.emplace(list[i], static_cast<int32_t>(i));
    std::vector<bool> placed(original.size(), false);
    for (int i = 0; i < n_nodes; ++i) {
        auto found = position.find(ggml_graph_node(graph, i));
        if (found == position.end() || placed[found->second]) return false;
        placed[found->second] = true;
        append_pod(*tail, found->second);
    }
    for (const auto &[tensor, until] : deps) {
        auto kept = list_index.find(tensor), node = list_index.find(until);
        if (kept == list_index.end() || node == list_index.end()) return false;
        append_pod(*tail, kept->second);
        append_pod(*tail, node->second);
    }
    reply->has_optimizer = 1;
    reply->n_nodes = static_cast<uint32_t>(n_nodes);
    reply->n_alloc_deps = static_cast<uint32_t>(deps.size());
    return true;
}

}  // namespace

Status Session::handle(const BackendInit::Request &request, Call<BackendInit> &call) {
    ggml_backend_dev_t device = nullptr;
    if (Status s = device_at(request.device, &device); !s) return s;
    if (backends_.size() >= limits_.max_backends) {
        return over_cap(backends_.size(), "backends", "--max-backends");
    }
    ggml_backend_t backend = ggml_backend_dev_init(device, nullptr);
    if (backend == nullptr) {
        return error(Code::error,
                     std::string("cannot initialise a backend on host device ") + ggml_backend_dev_name(device));
    }
    SessionBackend record;
    record.backend.reset(backend);
    record.device = request.device;
    abort_compute_when_guest_gone(backend);
    record.set_n_threads =
        proc_address<ggml_backend_set_n_threads_t>(backend_reg(backend), "ggml_backend_set_n_threads");
    set_threads(&record, limits_.default_threads);
    call.reply.backend = backends_.insert(std::move(record));
    return Status::success();
}

Status Session::handle(const BackendFree::Request &request, Call<BackendFree> &) {
    if (!backends_.erase(request.backend)) {
        return error(Code::not_found, "backend handle " + std::to_string(request.backend) + " is not valid");
    }
    return Status::success();
}

Status Session::handle(const SetNThreads::Request &request, Call<SetNThreads> &) {
    SessionBackend *backend = nullptr;
    if (Status s = backend_at(request.backend, &backend); !s) return s;
    set_threads(backend, request.n_threads);
    return Status::success();
}

Status Session::handle(const GraphCompute::Request &request, Call<GraphCompute> &call) {
    SessionBackend *backend = nullptr;
    if (Status s = backend_at(request.backend, &backend); !s) return s;
    BuiltTensors once;
    BuiltTensors *graph = nullptr;
    if (Status s = graph_to_compute(request, call.tail, backend, &once, &graph); !s) return s;
    if (graph->graph == nullptr) return Status::success();  // an empty graph computes nothing
    if (Status s = check_graph_on_backend(request.backend, *backend, graph); !s) return s;
    if (compute_gate_for_testing_ && !compute_gate_for_testing_(graph->graph)) return Status::success();
    weight_repack_.refresh();
    // A guest that hangs up now is not waited for (its compute is aborted).
    Watchdog::HangupWatch watch(watchdog_);
    Status refused = Status::success();
    const auto began = std::chrono::steady_clock::now();
    const ggml_status result = compute_on_shared_cores(backend, graph, &refused);
    observe(SessionHistogram::graph_compute, nanoseconds_since(began));
    ++counters_.graph_computes;
    if (compute_check_for_testing_) compute_check_for_testing_(graph->graph);
    for (uint64_t written : graph->writes_weights) bytes_written(written, 0, UINT64_MAX);
    settle_weight_uploads();
    if (!refused) return refused;  // an index computed by the graph itself, out of range
    if (result != GGML_STATUS_SUCCESS) {
        return error(Code::error, std::string("graph compute failed on the host: ") + ggml_status_to_string(result));
    }
    return Status::success();
}

Status Session::graph_to_compute(const GraphCompute::Request &request, ByteView tail, SessionBackend *backend,
                                 BuiltTensors *once, BuiltTensors **graph) {
    if (request.mode != kGraphRunOnce && request.slot >= kGraphSlots) {
        return error(Code::bad_request, "graph slot " + std::to_string(request.slot) + " does not exist");
    }
    switch (request.mode) {
        case kGraphRunOnce:
        case kGraphStore:
            // A store that fails leaves the slot empty, never holding an older graph.
            if (request.mode == kGraphStore) {
                graph_slots_.clear(request.slot);
                if (Status s = graph_slots_.check_room(request.slot, tail.size); !s) return s;
            }
            if (Status s = build(tail, DataPolicy::required, once); !s) return s;
            if (limits_.repack_weights) repack_weights(backend, once);
            *graph = once;
            if (request.mode == kGraphStore) *graph = graph_slots_.store(request.slot, std::move(*once), tail.size);
            return Status::success();
        case kGraphReplay:
            *graph = graph_slots_.at(request.slot);
            if (*graph == nullptr) {
                return error(Code::bad_request, "graph slot " + std::to_string(request.slot) + " is empty");
            }
            return Status::success();
        default:
            return error(Code::bad_request, "unknown graph mode " + std::to_string(request.mode));
    }
}

Status Session::check_graph_on_backend(uint64_t handle, const SessionBackend &backend, BuiltTensors *graph) {
    // Whether this backend can compute on every tensor's buffer: once per graph
    // and backend (handles are never reused, and freeing a buffer drops every
    // kept graph), not for every token.
    if (graph->checked_for_backend != handle) {
        for (ggml_tensor *tensor : graph->tensors) {
            if (!ggml_backend_supports_buft(backend.backend.get(), ggml_backend_buffer_get_type(tensor->buffer))) {
                return error(Code::bad_request, "tensor '" + printable(tensor->name) +
                                                    "' is in a buffer this backend cannot compute with");
            }
        }
        if (Status s = check_ops_supported(backend, graph->graph); !s) return s;
        graph->checked_for_backend = handle;
    }
    // Not a walk over every node for every token: the graph knows its reads. The
    // kernels read the copies checked here; computed indexes are checked between
    // segments of the compute (IndexGuard::compute).
    if (graph->index_guard.empty()) return Status::success();
    return graph->index_guard.check_at_start();
}

Status Session::check_ops_supported(const SessionBackend &backend, ggml_cgraph *graph) const {
    // A GPU backend aborts the process on an op it has no kernel for (ggml-vulkan:
    // "Missing op"), and the guest's scheduler only asked, it need not have listened.
    // ggml-cpu computes what the op rules let through, so its graphs skip the walk.
    ggml_backend_dev_t device = ggml_backend_get_device(backend.backend.get());
    if (device == nullptr || ggml_backend_dev_type(device) == GGML_BACKEND_DEVICE_TYPE_CPU) return Status::success();
    for (int i = 0; i < ggml_graph_n_nodes(graph); ++i) {
        const ggml_tensor *node = ggml_graph_node(graph, i);
        if (ggml_backend_supports_op(backend.backend.get(), node)) continue;
        return error(Code::unsupported, std::string("host device ") + ggml_backend_dev_name(device) +
                                            " cannot compute node '" + printable(node->name) + "' (" +
                                            ggml_op_desc(node) + " of " + ggml_type_name(node->type) + ")");
    }
    return Status::success();
}

// Runs the backend's own graph_optimize on the guest's graph, built without data,
// and says how it reordered the nodes. Ops are the rule table's, as for a compute.
Status Session::handle(const GraphOptimize::Request &request, Call<GraphOptimize> &call) {
    SessionBackend *backend = nullptr;
    if (Status s = backend_at(request.backend, &backend); !s) return s;
    call.reply = GraphOptimize::Reply{};
    auto optimize = backend->backend->iface.graph_optimize;
    if (optimize == nullptr) return Status::success();  // has_optimizer 0: the order stays
    BuiltTensors built;
    if (Status s = build(call.tail, DataPolicy::none, &built); !s) return s;
    if (built.graph == nullptr) return error(Code::bad_request, "graph_optimize: the graph has no nodes");
    ggml_cgraph *graph = built.graph;
    ggml_tensor **nodes = ggml_graph_nodes(graph);
    const std::vector<ggml_tensor *> original(nodes, nodes + ggml_graph_n_nodes(graph));
    AllocDeps deps;
    ggml_backend_graph_optimize_params params{record_alloc_dep, &deps};
    optimize(backend->backend.get(), graph, &params);
    if (!describe_new_order(original, graph, built.tensors, deps, &call.reply_tail.owned, &call.reply)) {
        call.reply = GraphOptimize::Reply{};
        call.reply_tail.owned.clear();
        return error(Code::error, "graph_optimize: the host backend changed the graph beyond reordering it");
    }
    return Status::success();
}

Status Session::handle(const Synchronize::Request &request, Call<Synchronize> &) {
    SessionBackend *backend = nullptr;
    if (Status s = backend_at(request.backend, &backend); !s) return s;
    ggml_backend_synchronize(backend->backend.get());
    return Status::success();
}

bool Session::between_nodes(void *session) {
    auto *self = static_cast<Session *>(session);
    self->cores_.between_nodes();
    return self->guest_gone_.load(std::memory_order_relaxed);
}

void Session::abort_compute_when_guest_gone(ggml_backend_t backend) {
    ggml_backend_reg_t reg = backend_reg(backend);
    // The generic name first (any backend may offer it), then ggml-cpu's own.
    for (const char *name : {"ggml_backend_set_abort_callback", "ggml_backend_cpu_set_abort_callback"}) {
        auto set_abort = proc_address<ggml_backend_set_abort_callback_t>(reg, name);
        if (set_abort != nullptr) {
            set_abort(backend, &Session::between_nodes, this);
            return;
        }
    }
    // Without one the compute runs to its end, and serve() ends the session after it.
}

void Session::set_threads(SessionBackend *record, int n_threads) {
    if (record->set_n_threads == nullptr) return;  // not a CPU backend
    n_threads = std::clamp(n_threads, 1, limits_.max_threads);
    record->wanted_threads = n_threads;
    if (record->threads.pool == nullptr || record->threads.n_threads != n_threads) attach_pool(record, n_threads);
    use_threads(record, n_threads);
}

void Session::use_threads(SessionBackend *record, int n_threads) {
    compute_threads_ = n_threads;
    if (record->compute_threads == n_threads) return;  // llama asks before every compute
    record->set_n_threads(record->backend.get(), n_threads);
    record->compute_threads = n_threads;
}

void Session::attach_pool(SessionBackend *record, int n_threads) {
    ggml_backend_reg_t reg = backend_reg(record->backend.get());
    auto new_pool = proc_address<ggml_threadpool *(*)(ggml_threadpool_params *)>(reg, "ggml_threadpool_new");
    auto free_pool = proc_address<void (*)(ggml_threadpool *)>(reg, "ggml_threadpool_free");
    auto set_pool = proc_address<void (*)(ggml_backend_t, ggml_threadpool *)>(reg, "ggml_backend_cpu_set_threadpool");
    if (new_pool == nullptr || free_pool == nullptr || set_pool == nullptr) return;
    // Sized to what the guest wants: each compute's share (use_threads) is never more,
    // and an OpenMP build indexes the pool's per-thread state by the share's threads.
    ggml_threadpool_params params = ggml_threadpool_params_default(n_threads);
    params.poll = static_cast<uint32_t>(limits_.cpu_poll);
    ThreadPool replacement;
    replacement.pool = new_pool(&params);
    replacement.free = free_pool;
    replacement.pause = proc_address<void (*)(ggml_threadpool *)>(reg, "ggml_threadpool_pause");
    replacement.n_threads = n_threads;
    if (replacement.pool == nullptr) return;
    set_pool(record->backend.get(), replacement.pool);
    record->threads = std::move(replacement);  // the old pool, no longer attached, is freed
}

ggml_status Session::compute_on_shared_cores(SessionBackend *record, BuiltTensors *built, Status *refused) {
    ggml_backend_t backend = record->backend.get();
    if (record->set_n_threads == nullptr) return built->index_guard.compute(backend, built->graph, refused);
    // Ended however the compute ends (a backend may throw): a session whose flag
    // stayed up would look busy to the others for as long as it lives.
    struct Turn {
        CoreSchedule &cores;
        const CoreShare share;
        ~Turn() { cores.end_compute(share); }
    } turn{cores_, cores_.begin_compute(record->wanted_threads)};
    use_threads(record, turn.share.threads);
    ggml_status result = GGML_STATUS_FAILED;
    auto compute = [&] { result = built->index_guard.compute(backend, built->graph, refused); };
    if (!turn.share.idle_class || !idle_compute_.run(compute)) compute();
    // The pool's idle threads would poll for the next graph on cores that others
    // compute on; the next compute resumes it. (OpenMP builds have no such threads.)
    if (turn.share.contended && record->threads.pause != nullptr) record->threads.pause(record->threads.pool);
    observe(SessionHistogram::cores_wait, cores_.waited_ns());
    return result;
}

void Session::settle_weight_uploads() {
    if (!weight_upload_.any_unsettled()) return;
    for (auto &entry : buffers_) weight_upload_.settle(&entry.second.upload, entry.second.size);
}

void Session::repack_weights(SessionBackend *backend, BuiltTensors *graph) {
    ggml_backend_dev_t device = ggml_backend_get_device(backend->backend.get());
    if (device == nullptr || graph->graph == nullptr) return;
    // The session's buffers by their ggml buffer, looked up once per node below.
    std::unordered_map<const ggml_backend_buffer *, std::pair<uint64_t, SessionBuffer *>> by_buffer;
    for (auto &[handle, buffer] : buffers_) by_buffer.emplace(buffer.buffer.get(), std::make_pair(handle, &buffer));
    auto handle_of = [&by_buffer](const ggml_backend_buffer *target) -> std::pair<uint64_t, SessionBuffer *> {
        auto found = by_buffer.find(target);
        return found != by_buffer.end() ? found->second : std::make_pair(uint64_t{0}, nullptr);
    };
    // Weights that this graph writes itself are left as they are, and their copies
    // (made by other graphs) are repacked again after it.
    graph->writes_weights.clear();
    for (int i = 0; i < ggml_graph_n_nodes(graph->graph); ++i) {
        const ggml_tensor *node = ggml_graph_node(graph->graph, i);
        auto [handle, buffer] = handle_of(node->buffer);
        if (buffer != nullptr && buffer->weights) graph->writes_weights.push_back(handle);
    }
    // Only weights whose every change the host hears of: a model file the guest mapped
    // (read-only), or a buffer named as weights, which only this session's commands
    // write, or, in shared memory, the guest itself, which reports its writes there
    // (BufferWritten). A guest that writes unreported only makes its own results stale.
    auto source_of = [&](const ggml_tensor *weight, uint64_t *buffer_size) -> uint64_t {
        auto [handle, buffer] = handle_of(weight->buffer);
        if (buffer == nullptr) return 0;
        *buffer_size = buffer->size;
        const bool unchanging = !buffer->writable || buffer->weights;
        const bool written_here = std::find(graph->writes_weights.begin(), graph->writes_weights.end(), handle) !=
                                  graph->writes_weights.end();
        return unchanging && !written_here ? handle : 0;
    };
    auto charge = [this](int64_t bytes) {
        if (bytes < 0) {
            memory_in_use_ -= static_cast<uint64_t>(-bytes);
            return true;
        }
        if (!fits_quota(static_cast<uint64_t>(bytes))) return false;
        memory_in_use_ += static_cast<uint64_t>(bytes);
        return true;
    };
    const size_t before = weight_repack_.copies();
    weight_repack_.apply(device, graph->graph, source_of, charge);
    counters_.weights_repacked += weight_repack_.copies() - before;
}

}  // namespace ggml_remote::host
