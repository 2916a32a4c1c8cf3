#include "host/session.h"

#include "host/op_validation.h"

#include "abi/ggml_backend_abi_v3.h"
#include "host/watchdog.h"
#include "protocol/printable.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>
#include <thread>
#include <unordered_map>

namespace ggml_remote::host {

using namespace protocol;

namespace {

ContentDigest digest_of(const uint8_t (&bytes)[16]) {
    ContentDigest digest;
    std::memcpy(digest.bytes, bytes, sizeof(digest.bytes));
    return digest;
}

int hardware_threads() {
    const unsigned n = std::thread::hardware_concurrency();
    return n == 0 ? 1 : static_cast<int>(n);
}

ggml_backend_reg_t backend_reg(ggml_backend_t backend) {
    ggml_backend_dev_t device = ggml_backend_get_device(backend);
    return device != nullptr ? ggml_backend_dev_backend_reg(device) : nullptr;
}

// A function a backend's registry offers by name, or null.
template <class Function>
Function proc_address(ggml_backend_reg_t reg, const char *name) {
    return reg != nullptr ? reinterpret_cast<Function>(ggml_backend_reg_get_proc_address(reg, name)) : nullptr;
}

uint64_t physical_memory() {
    const long pages = ::sysconf(_SC_PHYS_PAGES);
    const long page = ::sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) : UINT64_MAX;
}

// "this session already has 16 backends (--max-backends)": the refusal of a capped object.
Status over_cap(size_t count, const char *what, const char *flag) {
    return error(Code::limit_exceeded,
                 "this session already has " + std::to_string(count) + " " + what + " (" + flag + ")");
}

// Tells the guest which optional buffer hooks the host device really has, so that
// it can skip a message per tensor for the common devices that have none. Reads
// ggml's internal structs, so only when the loaded ggml has the layout we know.
void describe_buffer_hooks(ggml_backend_buffer_type_t buft, DeviceInfo::Reply *reply) {
    reply->buffer_needs_init_tensor = 1;
    reply->buffer_custom_alloc_size = 1;
    int version = 0;
    if (!loaded_ggml_matches_abi(&version)) return;
    reply->buffer_custom_alloc_size = buft->iface.get_alloc_size != nullptr ? 1 : 0;
    ggml_backend_buffer_t probe = ggml_backend_buft_alloc_buffer(buft, ggml_backend_buft_get_alignment(buft));
    if (probe != nullptr) {
        reply->buffer_needs_init_tensor = probe->iface.init_tensor != nullptr ? 1 : 0;
        ggml_backend_buffer_free(probe);
    }
}

}  // namespace

Session::Session(std::vector<ggml_backend_dev_t> devices, SessionLimits limits)
    : devices_(std::move(devices)), limits_(limits), cores_(limits.schedule_cores, limits.cores) {
    if (limits_.max_threads <= 0) limits_.max_threads = hardware_threads();
    if (limits_.default_threads <= 0) limits_.default_threads = limits_.max_threads;
    if (limits_.mapped_file_quota == 0) limits_.mapped_file_quota = physical_memory();
    weight_repack_.set_max_copies(limits_.max_weight_copies);
    register_handlers();
}

Session::~Session() {
    (void)store_fill_.finish_pending();
    store_fill_.store().wait_for_commits();  // the store's thread may copy from our buffers
    for (auto &slot : graph_slots_) slot.reset();
    // Backends first: they may still reference buffers.
    backends_.clear();
    buffers_.clear();
}

Status Session::device_at(uint32_t index, ggml_backend_dev_t *device) const {
    if (index >= devices_.size()) {
        return error(Code::not_found, "device " + std::to_string(index) + " does not exist (the server exposes " +
                                          std::to_string(devices_.size()) + ")");
    }
    *device = devices_[index];
    return Status::success();
}

Status Session::buffer_at(uint64_t handle, SessionBuffer **buffer) {
    *buffer = buffers_.find(handle);
    if (*buffer == nullptr) return error(Code::not_found, "buffer handle " + std::to_string(handle) + " is not valid");
    return Status::success();
}

Status Session::backend_at(uint64_t handle, SessionBackend **backend) {
    *backend = backends_.find(handle);
    if (*backend == nullptr) return error(Code::not_found, "backend handle " + std::to_string(handle) + " is not valid");
    return Status::success();
}

Status Session::range_tensor(const BufferRange &range, bool write, ggml_tensor *tensor) {
    SessionBuffer *buffer = nullptr;
    Status status = buffer_at(range.buffer, &buffer);
    if (!status) return status;
    if (write && !buffer->writable) {
        return error(Code::bad_request, "buffer " + std::to_string(range.buffer) + " is read-only");
    }
    uint64_t end = 0;
    if (__builtin_add_overflow(range.offset, range.size, &end) || end > buffer->size) {
        return error(Code::bad_request, "range [" + std::to_string(range.offset) + ", +" + std::to_string(range.size) +
                                            ") lies outside buffer " + std::to_string(range.buffer) + " of " +
                                            std::to_string(buffer->size) + " bytes");
    }
    // A plain byte tensor over the range lets ggml's own set/get/memset/copy pick
    // the right path for host and device memory alike.
    std::memset(tensor, 0, sizeof(*tensor));
    tensor->type = GGML_TYPE_I8;
    tensor->ne[0] = static_cast<int64_t>(range.size);
    tensor->ne[1] = tensor->ne[2] = tensor->ne[3] = 1;
    tensor->nb[0] = 1;
    tensor->nb[1] = tensor->nb[2] = tensor->nb[3] = range.size;
    tensor->buffer = buffer->buffer.get();
    tensor->data = static_cast<uint8_t *>(ggml_backend_buffer_get_base(tensor->buffer)) + range.offset;
    if (write) bytes_written(range.buffer, range.offset, range.size);
    return Status::success();
}

void Session::bytes_written(uint64_t buffer, uint64_t offset, uint64_t size) {
    weight_repack_.written(buffer, offset, size);
    store_fill_.written(buffer, offset, size);
}

Status Session::store_target(const BufferRange &range, const char *command, ggml_tensor *tensor,
                             StoreFill::Target *target) {
    if (!weight_store_granted_) return error(Code::unsupported, std::string(command) + ": this session has no weight store");
    SessionBuffer *buffer = nullptr;
    Status status = buffer_at(range.buffer, &buffer);
    if (!status) return status;
    if (buffer->shared_with_guest) {
        return error(Code::bad_request, std::string(command) + ": buffer " + std::to_string(range.buffer) +
                                            " is shared memory, which the guest writes itself");
    }
    if (range.size < kMinWeightLookupBytes) {
        return error(Code::bad_request, std::string(command) + ": " + std::to_string(range.size) +
                                            " bytes is below the store's minimum of " +
                                            std::to_string(kMinWeightLookupBytes));
    }
    status = range_tensor(range, true, tensor);
    if (!status) return status;
    *target = {tensor, buffer->private_memory ? &buffer->mapping : nullptr, range.buffer};
    return Status::success();
}

Status Session::build(ByteView bytes, DataPolicy policy, BuiltTensors *built) {
    TensorList list;
    Status status = decode_tensor_list(bytes, limits_.tensor_list, &list);
    if (!status) return status;
    BufferLookup lookup = [this](uint64_t handle, BufferView *view) -> Status {
        SessionBuffer *buffer = nullptr;
        Status found = buffer_at(handle, &buffer);
        if (!found) return found;
        view->buffer = buffer->buffer.get();
        view->size = buffer->size;
        view->writable = buffer->writable;
        return Status::success();
    };
    return build_tensors(list, lookup, policy, built);
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

ggml_status Session::compute_on_shared_cores(SessionBackend *record, ggml_cgraph *graph) {
    ggml_backend_t backend = record->backend.get();
    if (record->set_n_threads == nullptr) return ggml_backend_graph_compute(backend, graph);
    // Ended however the compute ends (a backend may throw): a session whose flag
    // stayed up would look busy to the others for as long as it lives.
    struct Turn {
        CoreSchedule &cores;
        const CoreShare share;
        ~Turn() { cores.end_compute(share); }
    } turn{cores_, cores_.begin_compute(record->wanted_threads)};
    use_threads(record, turn.share.threads);
    const ggml_status result = ggml_backend_graph_compute(backend, graph);
    // The pool's idle threads would poll for the next graph on cores that others
    // compute on; the next compute resumes it. (OpenMP builds have no such threads.)
    if (turn.share.contended && record->threads.pause != nullptr) record->threads.pause(record->threads.pool);
    return result;
}

void Session::register_handlers() {
    dispatcher_.on<Hello>([this](const Hello::Request &request, ByteView, Hello::Reply *reply, ReplyTail *tail) {
        if (request.magic != kHelloMagic) {
            return error(Code::bad_request, "not a ggml-remote guest (bad handshake magic)");
        }
        if (handshaken_) {
            // One handshake per session: each would make a new shared ring.
            return error(Code::bad_request, "the handshake was already done in this session");
        }
        if (request.protocol_version != kProtocolVersion) {
            return error(Code::version_mismatch,
                         "protocol version mismatch: the guest speaks version " +
                             std::to_string(request.protocol_version) + ", this server speaks version " +
                             std::to_string(kProtocolVersion) + "; use the same ggml-remote release on both sides");
        }
        handshaken_ = true;
        shared_memory_ = shared_memory_allowed_ && (request.capabilities & kSessionSharedMemory) != 0;
        reply->protocol_version = kProtocolVersion;
        reply->device_count = static_cast<uint32_t>(devices_.size());
        reply->capabilities = shared_memory_ ? uint64_t(kSessionSharedMemory) : 0;
        weight_store_granted_ = store_fill_.enabled() && (request.capabilities & kSessionWeightStore) != 0;
        if (weight_store_granted_) reply->capabilities |= kSessionWeightStore;
        if (shared_memory_ && (request.capabilities & kSessionSharedRing)) {
            // serve() switches to the ring once this reply, which carries it, is out.
            Status status = RingChannel::create(kRingCapacity, &tail->fd, &pending_ring_);
            if (!status) return status;
            reply->capabilities |= kSessionSharedRing;
        }
        return Status::success();
    });

    dispatcher_.on<DeviceInfo>([this](const DeviceInfo::Request &request, ByteView, DeviceInfo::Reply *reply,
                                      ReplyTail *tail) {
        ggml_backend_dev_t device = nullptr;
        Status status = device_at(request.device, &device);
        if (!status) return status;
        ggml_backend_dev_props props{};
        ggml_backend_dev_get_props(device, &props);
        ggml_backend_buffer_type_t buft = ggml_backend_dev_buffer_type(device);
        reply->type = props.type;
        uint32_t caps = 0;
        if (props.caps.async) caps |= kCapAsync;
        if (props.caps.host_buffer) caps |= kCapHostBuffer;
        if (props.caps.buffer_from_host_ptr) caps |= kCapBufferFromHostPtr;
        if (props.caps.events) caps |= kCapEvents;
        if (props.caps.mmap_support) caps |= kCapMmap;
        reply->caps = caps;
        reply->memory_free = props.memory_free;
        reply->memory_total = props.memory_total;
        reply->buffer_alignment = ggml_backend_buft_get_alignment(buft);
        reply->buffer_max_size = ggml_backend_buft_get_max_size(buft);
        reply->buffer_is_host = ggml_backend_buft_is_host(buft) ? 1 : 0;
        describe_buffer_hooks(buft, reply);
        reply->shared_buffers = shared_memory_ && device_shares_memory(device) ? 1 : 0;
        for (const char *text : {props.name, props.description, ggml_backend_buft_name(buft)}) {
            const std::string s = text != nullptr ? text : "";
            tail->owned.insert(tail->owned.end(), s.begin(), s.end());
            tail->owned.push_back('\0');
        }
        return Status::success();
    });

    dispatcher_.on<DeviceMemory>(
        [this](const DeviceMemory::Request &request, ByteView, DeviceMemory::Reply *reply, ReplyTail *) {
            ggml_backend_dev_t device = nullptr;
            Status status = device_at(request.device, &device);
            if (!status) return status;
            size_t free = 0, total = 0;
            ggml_backend_dev_memory(device, &free, &total);
            reply->memory_free = free;
            reply->memory_total = total;
            return Status::success();
        });

    dispatcher_.on<SupportsOp>(
        [this](const SupportsOp::Request &request, ByteView tail, SupportsOp::Reply *reply, ReplyTail *) {
            ggml_backend_dev_t device = nullptr;
            Status status = device_at(request.device, &device);
            if (!status) return status;
            BuiltTensors built;
            status = build(tail, DataPolicy::none, &built);
            if (!status) return status;
            if (built.tensors.empty()) return error(Code::bad_request, "supports_op: no tensor");
            reply->supported = ggml_backend_dev_supports_op(device, built.tensors.back()) ? 1 : 0;
            return Status::success();
        });

    dispatcher_.on<AllocSize>(
        [this](const AllocSize::Request &request, ByteView tail, AllocSize::Reply *reply, ReplyTail *) {
            ggml_backend_dev_t device = nullptr;
            Status status = device_at(request.device, &device);
            if (!status) return status;
            BuiltTensors built;
            status = build(tail, DataPolicy::none, &built);
            if (!status) return status;
            if (built.tensors.empty()) return error(Code::bad_request, "alloc_size: no tensor");
            reply->size = ggml_backend_buft_get_alloc_size(ggml_backend_dev_buffer_type(device),
                                                           built.tensors.back());
            return Status::success();
        });

    dispatcher_.on<BufferAlloc>(
        [this](const BufferAlloc::Request &request, ByteView, BufferAlloc::Reply *reply, ReplyTail *tail) {
            ggml_backend_dev_t device = nullptr;
            Status status = device_at(request.device, &device);
            if (!status) return status;
            if (buffers_.size() >= limits_.max_buffers) return over_cap(buffers_.size(), "buffers", "--max-buffers");
            if (!fits_quota(request.size)) {
                return error(Code::limit_exceeded, "allocating " + std::to_string(request.size) +
                                                       " bytes would exceed the session's memory quota of " +
                                                       std::to_string(limits_.memory_quota) + " bytes");
            }
            ggml_backend_buffer_type_t buft = ggml_backend_dev_buffer_type(device);
            if (request.size > ggml_backend_buft_get_max_size(buft)) {
                return error(Code::bad_request, "buffer of " + std::to_string(request.size) +
                                                    " bytes is larger than the device's maximum");
            }
            SessionBuffer record;
            if (shared_memory_ && device_shares_memory(device)) {
                status = allocate_shared(device, request.size, &record, &tail->fd);
                if (!status) return status;
                record.shared_with_guest = true;
                reply->shared = 1;
            } else if (device_shares_memory(device)) {
                status = allocate_private(device, request.size, &record);
                if (!status) return status;
                record.private_memory = true;
            } else {
                ggml_backend_buffer_t buffer = ggml_backend_buft_alloc_buffer(buft, request.size);
                if (buffer == nullptr) {
                    return error(Code::out_of_memory, "the host device could not allocate " +
                                                          std::to_string(request.size) + " bytes");
                }
                record.buffer.reset(buffer);
            }
            record.device = request.device;
            record.size = ggml_backend_buffer_get_size(record.buffer.get());
            record.charged = record.size;
            memory_in_use_ += record.charged;
            reply->size = record.size;
            reply->buffer = buffers_.insert(std::move(record));
            return Status::success();
        });

    dispatcher_.on<BufferFromFile>([this](const BufferFromFile::Request &request, ByteView,
                                          BufferFromFile::Reply *reply, ReplyTail *) {
        ggml_backend_dev_t device = nullptr;
        Status status = device_at(request.device, &device);
        if (!status) return status;
        if (!shared_memory_ || !device_shares_memory(device)) {
            return error(Code::unsupported, "buffer_from_file needs a shared-memory session on a host-memory device");
        }
        if (fds_ == nullptr || fds_->size() != 1) {
            return error(Code::bad_request, "buffer_from_file needs exactly one file descriptor");
        }
        if (buffers_.size() >= limits_.max_buffers) return over_cap(buffers_.size(), "buffers", "--max-buffers");
        if (request.size > limits_.mapped_file_quota - mapped_file_bytes_) {
            return error(Code::limit_exceeded,
                         "mapping " + std::to_string(request.size) + " bytes of the guest's file would exceed the "
                         "session's mapped-file quota of " + std::to_string(limits_.mapped_file_quota) +
                         " bytes (--mapped-file-quota; " + std::to_string(mapped_file_bytes_) + " mapped)");
        }
        UniqueFd file = std::move(fds_->front());
        fds_->clear();
        SessionBuffer record;
        // Read-only and shared: the host reads the very pages of the guest's file.
        status = Mapping::map(file.get(), request.file_offset, request.size, false, &record.mapping);
        if (!status) return error(status.code(), "cannot map the guest's file: " + status.message());
        const size_t alignment = ggml_backend_buft_get_alignment(ggml_backend_dev_buffer_type(device));
        if (reinterpret_cast<uintptr_t>(record.mapping.data()) % alignment != 0) {
            return error(Code::bad_request, "file offset " + std::to_string(request.file_offset) +
                                                " is not aligned to the device's " + std::to_string(alignment) +
                                                " bytes");
        }
        ggml_backend_buffer_t buffer = ggml_backend_dev_buffer_from_host_ptr(
            device, record.mapping.data(), record.mapping.size(),
            std::min<uint64_t>(request.max_tensor_size, request.size));
        if (buffer == nullptr) return error(Code::error, "the host device cannot wrap the mapped file");
        record.buffer.reset(buffer);
        record.device = request.device;
        record.size = request.size;
        record.writable = false;
        record.mapped = request.size;
        mapped_file_bytes_ += record.mapped;
        reply->buffer = buffers_.insert(std::move(record));
        return Status::success();
    });

    dispatcher_.on<Synchronize>([this](const Synchronize::Request &request, ByteView, Empty *, ReplyTail *) {
        SessionBackend *backend = nullptr;
        Status status = backend_at(request.backend, &backend);
        if (!status) return status;
        ggml_backend_synchronize(backend->backend.get());
        return Status::success();
    });

    dispatcher_.on<ServerStatus>([this](const ServerStatus::Request &, ByteView, ServerStatus::Reply *reply,
                                        ReplyTail *tail) {
        if (status_board_ == nullptr || !status_query_allowed_) {
            return error(Code::unsupported, "status is answered only on the server's unix socket, to its own user");
        }
        publish_status();
        reply->server_pid = static_cast<uint32_t>(getppid());
        reply->max_sessions = max_sessions_;
        reply->n_devices = static_cast<uint32_t>(devices_.size());
        for (ggml_backend_dev_t device : devices_) {
            StatusDevice entry{};
            std::snprintf(entry.name, sizeof(entry.name), "%s", ggml_backend_dev_name(device));
            std::snprintf(entry.description, sizeof(entry.description), "%s", ggml_backend_dev_description(device));
            size_t free = 0, total = 0;
            ggml_backend_dev_memory(device, &free, &total);
            entry.memory_free = free;
            entry.memory_total = total;
            append_pod(tail->owned, entry);
        }
        reply->n_sessions = 0;
        for (uint32_t i = 0; i < status_board_->slots(); ++i) {
            const SessionSlot *slot = status_board_->slot(i);
            if (slot->live.load() == 0 || slot == status_slot_) continue;  // not the query itself
            StatusSession entry{};
            entry.id = slot->id;
            entry.pid = slot->pid;
            std::memcpy(entry.peer, slot->peer, sizeof(entry.peer));
            entry.peer[sizeof(entry.peer) - 1] = '\0';
            entry.started_unix = slot->started_unix;
            entry.commands = slot->commands.load(std::memory_order_relaxed);
            entry.bytes_received = slot->bytes_received.load(std::memory_order_relaxed);
            entry.bytes_sent = slot->bytes_sent.load(std::memory_order_relaxed);
            entry.graph_computes = slot->graph_computes.load(std::memory_order_relaxed);
            entry.memory_in_use = slot->memory_in_use.load(std::memory_order_relaxed);
            entry.buffers = slot->buffers.load(std::memory_order_relaxed);
            entry.backends = slot->backends.load(std::memory_order_relaxed);
            entry.mapped_file_bytes = slot->mapped_file_bytes.load(std::memory_order_relaxed);
            entry.memory_quota = slot->memory_quota.load(std::memory_order_relaxed);
            entry.max_buffers = slot->max_buffers.load(std::memory_order_relaxed);
            entry.max_backends = slot->max_backends.load(std::memory_order_relaxed);
            entry.mapped_file_quota = slot->mapped_file_quota.load(std::memory_order_relaxed);
            entry.cores_threads = slot->cores_threads.load(std::memory_order_relaxed);
            entry.cores_shared_computes = slot->cores_shared_computes.load(std::memory_order_relaxed);
            append_pod(tail->owned, entry);
            ++reply->n_sessions;
        }
        return Status::success();
    });

    dispatcher_.on<BufferFree>([this](const BufferFree::Request &request, ByteView, Empty *, ReplyTail *) {
        SessionBuffer *buffer = nullptr;
        Status status = buffer_at(request.buffer, &buffer);
        if (!status) return status;
        memory_in_use_ -= buffer->charged;
        mapped_file_bytes_ -= buffer->mapped;
        // Kept graphs may point into the buffer (or its repacked weights); the guest forgets them too.
        for (auto &slot : graph_slots_) slot.reset();
        memory_in_use_ -= weight_repack_.forget(request.buffer);
        store_fill_.forget_buffer(request.buffer);
        buffers_.erase(request.buffer);
        return Status::success();
    });

    dispatcher_.on<BufferClear>([this](const BufferClear::Request &request, ByteView, Empty *, ReplyTail *) {
        SessionBuffer *buffer = nullptr;
        Status status = buffer_at(request.buffer, &buffer);
        if (!status) return status;
        if (!buffer->writable) return error(Code::bad_request, "cannot clear a read-only buffer");
        bytes_written(request.buffer, 0, buffer->size);
        ggml_backend_buffer_clear(buffer->buffer.get(), request.value);
        return Status::success();
    });

    dispatcher_.on<BufferSetUsage>([this](const BufferSetUsage::Request &request, ByteView, Empty *, ReplyTail *) {
        SessionBuffer *buffer = nullptr;
        Status status = buffer_at(request.buffer, &buffer);
        if (!status) return status;
        if (request.usage > GGML_BACKEND_BUFFER_USAGE_COMPUTE) {
            return error(Code::bad_request, "unknown buffer usage " + std::to_string(request.usage));
        }
        const auto usage = static_cast<ggml_backend_buffer_usage>(request.usage);
        ggml_backend_buffer_set_usage(buffer->buffer.get(), usage);
        buffer->weights = usage == GGML_BACKEND_BUFFER_USAGE_WEIGHTS;
        return Status::success();
    });

    dispatcher_.on<BufferWritten>([this](const BufferWritten::Request &request, ByteView, Empty *, ReplyTail *) {
        SessionBuffer *buffer = nullptr;
        Status status = buffer_at(request.buffer, &buffer);
        if (!status) return status;
        uint64_t end = 0;
        if (__builtin_add_overflow(request.offset, request.size, &end) || end > buffer->size) {
            return error(Code::bad_request, "buffer_written: range [" + std::to_string(request.offset) + ", +" +
                                                std::to_string(request.size) + ") lies outside the buffer of " +
                                                std::to_string(buffer->size) + " bytes");
        }
        bytes_written(request.buffer, request.offset, request.size);
        return Status::success();
    });

    dispatcher_.on<BufferReset>([this](const BufferReset::Request &request, ByteView, Empty *, ReplyTail *) {
        SessionBuffer *buffer = nullptr;
        Status status = buffer_at(request.buffer, &buffer);
        if (!status) return status;
        ggml_backend_buffer_reset(buffer->buffer.get());
        return Status::success();
    });

    dispatcher_.on<InitTensor>([this](const InitTensor::Request &request, ByteView tail, Empty *, ReplyTail *) {
        SessionBuffer *buffer = nullptr;
        Status status = buffer_at(request.buffer, &buffer);
        if (!status) return status;
        BuiltTensors built;
        status = build(tail, DataPolicy::required, &built);
        if (!status) return status;
        if (built.tensors.empty()) return error(Code::bad_request, "init_tensor: no tensor");
        ggml_tensor *tensor = built.tensors.back();
        if (tensor->buffer != buffer->buffer.get()) {
            return error(Code::bad_request, "init_tensor: the tensor is not in the named buffer");
        }
        const ggml_status result = ggml_backend_buffer_init_tensor(tensor->buffer, tensor);
        if (result != GGML_STATUS_SUCCESS) {
            return error(Code::error, "init_tensor failed on the host (status " + std::to_string(result) + ")");
        }
        return Status::success();
    });

    dispatcher_.on<SetTensor>([this](const SetTensor::Request &request, ByteView tail, Empty *, ReplyTail *) {
        ggml_tensor tensor;
        Status status = range_tensor(request.range, true, &tensor);
        if (!status) return status;
        if (tail.size != request.range.size) {
            return error(Code::bad_request, "set_tensor: " + std::to_string(tail.size) + " data bytes for a range of " +
                                                std::to_string(request.range.size));
        }
        ggml_backend_tensor_set(&tensor, tail.data, 0, tail.size);
        return Status::success();
    });

    dispatcher_.on<WeightLookup>([this](const WeightLookup::Request &request, ByteView, WeightLookup::Reply *reply,
                                        ReplyTail *) {
        ggml_tensor tensor;
        StoreFill::Target target;
        Status status = store_target(request.range, "weight_lookup", &tensor, &target);
        if (!status) return status;
        bool found = false;
        status = store_fill_.lookup(target, digest_of(request.digest), &found);
        reply->found = found ? 1 : 0;
        return status;
    });

    dispatcher_.on<WeightOffer>([this](const WeightOffer::Request &request, ByteView, Empty *, ReplyTail *) {
        ggml_tensor tensor;
        StoreFill::Target target;
        Status status = store_target(request.range, "weight_offer", &tensor, &target);
        if (!status) return status;
        return store_fill_.offer(target, digest_of(request.digest));
    });

    dispatcher_.on<SetTensor2d>([this](const SetTensor2d::Request &request, ByteView tail, Empty *, ReplyTail *) {
        uint64_t total = 0;
        if (__builtin_mul_overflow(request.n_copies, request.range.size, &total) || total != tail.size) {
            return error(Code::bad_request, "set_tensor_2d: data size does not match n_copies * size");
        }
        for (uint64_t i = 0; i < request.n_copies; ++i) {
            BufferRange row = request.range;
            uint64_t step = 0;
            if (__builtin_mul_overflow(i, request.stride, &step) || __builtin_add_overflow(row.offset, step, &row.offset)) {
                return error(Code::bad_request, "set_tensor_2d: offset overflow");
            }
            ggml_tensor tensor;
            Status status = range_tensor(row, true, &tensor);
            if (!status) return status;
            ggml_backend_tensor_set(&tensor, tail.data + i * request.range.size, 0, request.range.size);
        }
        return Status::success();
    });

    dispatcher_.on<GetTensor>([this](const GetTensor::Request &request, ByteView, Empty *, ReplyTail *tail) {
        ggml_tensor tensor;
        Status status = range_tensor(request.range, false, &tensor);
        if (!status) return status;
        if (ggml_backend_buffer_is_host(tensor.buffer)) {
            tail->view = ByteView(tensor.data, request.range.size);  // sent straight from the buffer
        } else {
            tail->owned.resize(request.range.size);
            ggml_backend_tensor_get(&tensor, tail->owned.data(), 0, request.range.size);
        }
        return Status::success();
    });

    dispatcher_.on<GetTensor2d>([this](const GetTensor2d::Request &request, ByteView, Empty *, ReplyTail *tail) {
        uint64_t total = 0;
        if (__builtin_mul_overflow(request.n_copies, request.range.size, &total) ||
            total > limits_.max_message_size) {
            return error(Code::bad_request, "get_tensor_2d: reply would exceed the message size limit");
        }
        tail->owned.resize(total);
        for (uint64_t i = 0; i < request.n_copies; ++i) {
            BufferRange row = request.range;
            uint64_t step = 0;
            if (__builtin_mul_overflow(i, request.stride, &step) || __builtin_add_overflow(row.offset, step, &row.offset)) {
                return error(Code::bad_request, "get_tensor_2d: offset overflow");
            }
            ggml_tensor tensor;
            Status status = range_tensor(row, false, &tensor);
            if (!status) return status;
            ggml_backend_tensor_get(&tensor, tail->owned.data() + i * request.range.size, 0, request.range.size);
        }
        return Status::success();
    });

    dispatcher_.on<MemsetTensor>([this](const MemsetTensor::Request &request, ByteView, Empty *, ReplyTail *) {
        ggml_tensor tensor;
        Status status = range_tensor(request.range, true, &tensor);
        if (!status) return status;
        ggml_backend_tensor_memset(&tensor, request.value, 0, request.range.size);
        return Status::success();
    });

    dispatcher_.on<CopyTensor>([this](const CopyTensor::Request &request, ByteView, CopyTensor::Reply *reply,
                                      ReplyTail *) {
        if (request.src.size != request.dst.size) {
            return error(Code::bad_request, "copy_tensor: source of " + std::to_string(request.src.size) +
                                                " bytes and destination of " + std::to_string(request.dst.size) +
                                                " bytes differ");
        }
        ggml_tensor src, dst;
        Status status = range_tensor(request.src, false, &src);
        if (!status) return status;
        status = range_tensor(request.dst, true, &dst);
        if (!status) return status;
        if (request.src.buffer == request.dst.buffer && request.src.offset < request.dst.offset + request.dst.size &&
            request.dst.offset < request.src.offset + request.src.size) {
            return error(Code::bad_request, "copy_tensor: source and destination overlap");
        }
        ggml_backend_tensor_copy(&src, &dst);
        reply->copied = 1;
        return Status::success();
    });

    dispatcher_.on<BackendInit>(
        [this](const BackendInit::Request &request, ByteView, BackendInit::Reply *reply, ReplyTail *) {
            ggml_backend_dev_t device = nullptr;
            Status status = device_at(request.device, &device);
            if (!status) return status;
            if (backends_.size() >= limits_.max_backends) {
                return over_cap(backends_.size(), "backends", "--max-backends");
            }
            ggml_backend_t backend = ggml_backend_dev_init(device, nullptr);
            if (backend == nullptr) {
                return error(Code::error, std::string("cannot initialise a backend on host device ") +
                                              ggml_backend_dev_name(device));
            }
            SessionBackend record;
            record.backend.reset(backend);
            record.device = request.device;
            abort_compute_when_guest_gone(backend);
            record.set_n_threads =
                proc_address<ggml_backend_set_n_threads_t>(backend_reg(backend), "ggml_backend_set_n_threads");
            set_threads(&record, limits_.default_threads);
            reply->backend = backends_.insert(std::move(record));
            return Status::success();
        });

    dispatcher_.on<BackendFree>([this](const BackendFree::Request &request, ByteView, Empty *, ReplyTail *) {
        if (!backends_.erase(request.backend)) {
            return error(Code::not_found, "backend handle " + std::to_string(request.backend) + " is not valid");
        }
        return Status::success();
    });

    dispatcher_.on<SetNThreads>([this](const SetNThreads::Request &request, ByteView, Empty *, ReplyTail *) {
        SessionBackend *backend = nullptr;
        Status status = backend_at(request.backend, &backend);
        if (!status) return status;
        set_threads(backend, request.n_threads);
        return Status::success();
    });

    dispatcher_.on<GraphCompute>([this](const GraphCompute::Request &request, ByteView tail, Empty *,
                                        ReplyTail *) {
        SessionBackend *backend = nullptr;
        Status status = backend_at(request.backend, &backend);
        if (!status) return status;
        if (request.mode != kGraphRunOnce && request.slot >= kGraphSlots) {
            return error(Code::bad_request, "graph slot " + std::to_string(request.slot) + " does not exist");
        }
        BuiltTensors once;
        BuiltTensors *graph = &once;
        switch (request.mode) {
            case kGraphRunOnce:
            case kGraphStore:
                // A store that fails leaves the slot empty, never holding an older graph.
                if (request.mode == kGraphStore) graph_slots_[request.slot].reset();
                status = build(tail, DataPolicy::required, &once);
                if (!status) return status;
                if (limits_.repack_weights) repack_weights(backend, &once);
                if (request.mode == kGraphStore) {
                    graph_slots_[request.slot] = std::make_unique<BuiltTensors>(std::move(once));
                    graph = graph_slots_[request.slot].get();
                }
                break;
            case kGraphReplay:
                graph = graph_slots_[request.slot].get();
                if (graph == nullptr) {
                    return error(Code::bad_request, "graph slot " + std::to_string(request.slot) + " is empty");
                }
                break;
            default:
                return error(Code::bad_request, "unknown graph mode " + std::to_string(request.mode));
        }
        if (graph->graph == nullptr) return Status::success();  // an empty graph computes nothing
        // Whether this backend can compute on every tensor's buffer: once per graph
        // and backend (handles are never reused, and freeing a buffer drops every
        // kept graph), not for every token.
        if (graph->checked_for_backend != request.backend) {
            for (ggml_tensor *tensor : graph->tensors) {
                if (!ggml_backend_supports_buft(backend->backend.get(), ggml_backend_buffer_get_type(tensor->buffer))) {
                    return error(Code::bad_request, "tensor '" + printable(tensor->name) +
                                                        "' is in a buffer this backend cannot compute with");
                }
            }
            graph->checked_for_backend = request.backend;
        }
        // Not a walk over every node for every token: the graph knows whether it has any.
        if (graph->reads_unchecked_indexes) {
            Status indexes = check_data_indexes(graph->graph);
            if (!indexes) return indexes;
        }
        if (compute_gate_for_testing_ && !compute_gate_for_testing_(graph->graph)) return Status::success();
        weight_repack_.refresh();
        // A guest that hangs up now is not waited for (its compute is aborted).
        Watchdog::HangupWatch watch(watchdog_);
        const ggml_status result = compute_on_shared_cores(backend, graph->graph);
        ++counters_.graph_computes;
        if (compute_check_for_testing_) compute_check_for_testing_(graph->graph);
        for (uint64_t written : graph->writes_weights) bytes_written(written, 0, UINT64_MAX);
        if (result != GGML_STATUS_SUCCESS) {
            return error(Code::error, std::string("graph compute failed on the host: ") + ggml_status_to_string(result));
        }
        return Status::success();
    });

}

bool Session::guest_gone(void *session) {
    return static_cast<const Session *>(session)->guest_gone_.load(std::memory_order_relaxed);
}

void Session::abort_compute_when_guest_gone(ggml_backend_t backend) {
    ggml_backend_reg_t reg = backend_reg(backend);
    // The generic name first (any backend may offer it), then ggml-cpu's own.
    for (const char *name : {"ggml_backend_set_abort_callback", "ggml_backend_cpu_set_abort_callback"}) {
        auto set_abort = proc_address<ggml_backend_set_abort_callback_t>(reg, name);
        if (set_abort != nullptr) {
            set_abort(backend, &Session::guest_gone, this);
            return;
        }
    }
    // Without one the compute runs to its end, and serve() ends the session after it.
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

bool Session::fits_quota(uint64_t size) const {
    return limits_.memory_quota == 0 || (size <= limits_.memory_quota && memory_in_use_ <= limits_.memory_quota - size);
}

bool Session::device_shares_memory(ggml_backend_dev_t device) const {
    ggml_backend_dev_props props{};
    ggml_backend_dev_get_props(device, &props);
    return props.caps.buffer_from_host_ptr && ggml_backend_buft_is_host(ggml_backend_dev_buffer_type(device));
}

Status Session::allocate_shared(ggml_backend_dev_t device, uint64_t size, SessionBuffer *record, UniqueFd *fd) {
    Status status = create_shared_memory(size, "ggml-remote-buffer", fd);
    if (!status) return status;
    status = Mapping::map(fd->get(), 0, size, true, &record->mapping);
    if (!status) return status;
    // The device computes in place in the shared pages.
    ggml_backend_buffer_t buffer =
        ggml_backend_dev_buffer_from_host_ptr(device, record->mapping.data(), record->mapping.size(), size);
    if (buffer == nullptr) return error(Code::error, "the host device cannot use shared memory");
    record->buffer.reset(buffer);
    return Status::success();
}

Status Session::allocate_private(ggml_backend_dev_t device, uint64_t size, SessionBuffer *record) {
    Status status = Mapping::anonymous(size, &record->mapping);
    if (!status) return status;
    ggml_backend_buffer_t buffer =
        ggml_backend_dev_buffer_from_host_ptr(device, record->mapping.data(), record->mapping.size(), size);
    if (buffer == nullptr) {
        return error(Code::out_of_memory, "the host device could not allocate " + std::to_string(size) + " bytes");
    }
    record->buffer.reset(buffer);
    return Status::success();
}

Status Session::handle(uint16_t command, ByteView payload, ReplyFrame *reply, std::vector<UniqueFd> *fds) {
    fds_ = fds;
    Status status = run_handler(command, payload, reply);
    // A failed handshake is the guest's refusal, which its worker reports, not a command's.
    if (!status.ok() && handshaken_) {
        ++counters_.commands_refused[static_cast<size_t>(command_refusal_for(status.code()))];
    }
    return status;
}

Status Session::run_handler(uint16_t command, ByteView payload, ReplyFrame *reply) {
    const Dispatcher::RawHandler *handler = dispatcher_.find(command);
    if (handler == nullptr) return error(Code::bad_request, "unknown command " + std::to_string(command));
    if (!handshaken_ && command != static_cast<uint16_t>(CommandId::hello)) {
        return error(Code::bad_request, "the first message must be the handshake");
    }
    // A new store entry is complete once the guest does anything but write.
    if (command != static_cast<uint16_t>(CommandId::set_tensor) &&
        command != static_cast<uint16_t>(CommandId::set_tensor_2d)) {
        Status stored = store_fill_.finish_pending();
        if (!stored) return stored;
    }
    store_fill_.map_named();
    ++counters_.commands;
    // A backend that throws (std::bad_alloc for a work buffer a forged shape asks
    // for) fails this command, not the session.
    try {
        return (*handler)(payload, reply);
    } catch (const std::bad_alloc &) {
        return error(Code::out_of_memory, std::string(command_name(static_cast<CommandId>(command))) +
                                              ": the host ran out of memory");
    } catch (const std::exception &e) {
        return error(Code::error, std::string(command_name(static_cast<CommandId>(command))) + ": " + e.what());
    }
}

void Session::publish_status() {
    if (status_slot_ == nullptr) return;
    status_slot_->commands.store(counters_.commands, std::memory_order_relaxed);
    status_slot_->bytes_received.store(counters_.bytes_received, std::memory_order_relaxed);
    status_slot_->bytes_sent.store(counters_.bytes_sent, std::memory_order_relaxed);
    status_slot_->graph_computes.store(counters_.graph_computes, std::memory_order_relaxed);
    status_slot_->memory_in_use.store(memory_in_use_, std::memory_order_relaxed);
    status_slot_->buffers.store(buffers_.size(), std::memory_order_relaxed);
    status_slot_->backends.store(backends_.size(), std::memory_order_relaxed);
    status_slot_->mapped_file_bytes.store(mapped_file_bytes_, std::memory_order_relaxed);
    status_slot_->store_hits.store(store_fill_.counters().hits, std::memory_order_relaxed);
    status_slot_->store_misses.store(store_fill_.counters().misses, std::memory_order_relaxed);
    status_slot_->store_bytes_saved.store(store_fill_.counters().bytes_saved, std::memory_order_relaxed);
    for (size_t reason = 0; reason < kCommandRefusalReasons; ++reason) {
        status_slot_->commands_refused[reason].store(counters_.commands_refused[reason], std::memory_order_relaxed);
    }
}

void Session::publish_limits() {
    if (status_slot_ == nullptr) return;
    status_slot_->memory_quota.store(limits_.memory_quota, std::memory_order_relaxed);
    status_slot_->max_buffers.store(limits_.max_buffers, std::memory_order_relaxed);
    status_slot_->max_backends.store(limits_.max_backends, std::memory_order_relaxed);
    status_slot_->mapped_file_quota.store(limits_.mapped_file_quota, std::memory_order_relaxed);
    publish_status();
}

uint16_t Session::reply_flags() {
    // Only a guest on this machine spins on the host's cores.
    const bool contended = shared_memory_allowed_ && cores_.contended();
    return static_cast<uint16_t>(kFrameReply | (contended ? kFrameCoresContended : 0));
}

namespace {

// The time a frame (or a reply) of `bytes` may take on top of --frame-timeout:
// a second per MiB, so that a slow link still carries the largest message.
double transfer_seconds(int timeout_s, uint64_t bytes) { return timeout_s + static_cast<double>(bytes) / (1 << 20); }

Watchdog::Clock::time_point after(double seconds) {
    return Watchdog::Clock::now() +
           std::chrono::duration_cast<Watchdog::Clock::duration>(std::chrono::duration<double>(seconds));
}

}  // namespace

Status Session::serve(FramedStream &stream) {
    const Status outcome = serve_frames(stream);
    publish_status();  // with the last reply's bytes: the listener keeps the totals of ended sessions
    return outcome;
}

Status Session::serve_frames(FramedStream &stream) {
    FrameBuffer payload;
    Status deferred;  // the first failure of a one-way command, told with the next reply
    // A guest must not hold its worker by sending nothing or half a frame; the clock
    // never runs while the session computes.
    Watchdog watchdog(stream.fd(), &guest_gone_);
    // The compute handler reaches it through watchdog_ while serve() runs, never after.
    watchdog_ = &watchdog;
    struct ForgetWatchdogOnReturn {
        Watchdog *&pointer;
        ~ForgetWatchdogOnReturn() { pointer = nullptr; }
    } forget_watchdog{watchdog_};
    const auto handshake_deadline = after(limits_.handshake_timeout_s);
    // Whether the last reply answered a guest that waited on a compute: it now
    // works on its own until its next graph (see SpinPolicy).
    bool guest_busy = false;
    uint64_t computes_answered = 0;
    for (;;) {
        // The last frame is handled and answered (a reply may point into it until
        // sent): a large frame's memory is not kept while the guest idles. A guest
        // whose next frame comes within a few milliseconds (a model's weights, one
        // write after another) keeps it, so that each large frame does not fault in
        // fresh pages again: that halved 16 MiB writes over sockets.
        constexpr int kPauseMs = 5;
        if (payload.capacity() > FrameBuffer::kKeptBytes && !stream.input_waiting(kPauseMs)) payload.release_excess();
        if (!handshaken_ && limits_.handshake_timeout_s > 0) {
            watchdog.arm(handshake_deadline, Watchdog::Wait::handshake, limits_.handshake_timeout_s);
        } else if (handshaken_ && limits_.idle_timeout_s > 0) {
            watchdog.arm(after(limits_.idle_timeout_s), Watchdog::Wait::idle, limits_.idle_timeout_s);
        }
        FrameHeader header;
        stream.set_compute_threads(compute_threads_);
        stream.set_cores_contended(cores_.contended());
        stream.set_peer_busy(guest_busy);
        Status status = stream.receive_header(&header, limits_.max_message_size);
        stream.set_peer_busy(false);
        if (!status) {
            if (watchdog.expired()) return watchdog.failure();
            if (status.code() == Code::disconnected) return Status::success();
            FrameHeader reply{header.command, kFrameReply, static_cast<int32_t>(status.code()), 0};
            const std::string &message = status.message();
            (void)stream.send(reply, {ByteView(message.data(), message.size())});
            return status;
        }
        if (handshaken_) {
            if (limits_.frame_timeout_s > 0 && header.payload_size > 0) {
                const double seconds = transfer_seconds(limits_.frame_timeout_s, header.payload_size);
                watchdog.arm(after(seconds), Watchdog::Wait::frame, seconds, header.payload_size);
            } else {
                watchdog.disarm();
            }
        }
        status = stream.receive_payload(&payload, header.payload_size);
        if (!watchdog.disarm()) return watchdog.failure();
        if (!status) {
            if (status.code() == Code::disconnected) return Status::success();  // gone mid-message
            return status;
        }
        const ByteView frame(payload.data(), payload.size());
        counters_.bytes_received += sizeof(header) + frame.size;
        if (recorder_ != nullptr) recorder_->record(header, frame);

        ReplyFrame reply;
        std::vector<UniqueFd> fds = std::move(stream.received_fds());
        stream.received_fds().clear();
        const bool known = dispatcher_.find(header.command) != nullptr;
        const bool one_way = known && dispatcher_.one_way(header.command);
        if (!one_way && !deferred.ok()) {
            // An earlier one-way command failed: this call is answered with that
            // failure and not carried out, so nothing it would create is lost.
            status = deferred;
            deferred = Status::success();
        } else {
            status = handle(header.command, frame, &reply, &fds);
        }
        fds.clear();  // whatever a handler did not take is closed
        publish_status();
        // The guest hung up during a compute: nothing it sent after that needs serving.
        if (guest_gone_.load(std::memory_order_relaxed)) return Status::success();
        if (one_way) {
            if (!status && deferred.ok()) {
                deferred = error(status.code(), std::string(command_name(static_cast<CommandId>(header.command))) +
                                                    ": " + status.message());
            }
            continue;
        }
        FrameHeader out{header.command, reply_flags(), static_cast<int32_t>(status.code()), 0};
        const uint64_t reply_size =
            status.ok() ? reply.fixed.size() + reply.tail.bytes().size : status.message().size();
        if (limits_.frame_timeout_s > 0) {
            const double seconds = transfer_seconds(limits_.frame_timeout_s, reply_size);
            watchdog.arm(after(seconds), Watchdog::Wait::reply, seconds, reply_size);
        }
        Status sent;
        if (status.ok()) {
            const ByteView tail = reply.tail.bytes();
            const int fd = reply.tail.fd.get();
            sent = stream.send(out, {ByteView(reply.fixed), tail}, &fd, reply.tail.fd.valid() ? 1 : 0);
            counters_.bytes_sent += sizeof(out) + reply.fixed.size() + tail.size;
        } else {
            sent = stream.send(out, {ByteView(status.message().data(), status.message().size())});
        }
        if (!watchdog.disarm()) return watchdog.failure();
        if (!sent) return Status::success();
        guest_busy = counters_.graph_computes != computes_answered;
        computes_answered = counters_.graph_computes;
        if (pending_ring_ != nullptr) stream.attach_ring(std::move(pending_ring_));
        // A guest that cannot get the handshake or the command set right is not
        // given a second chance.
        if (!status.ok() && (!handshaken_ || !known)) return status;
    }
}

}  // namespace ggml_remote::host
