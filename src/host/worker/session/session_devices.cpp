// Session: the handlers of the handshake and of the questions about devices.
#include <unistd.h>

#include <cstddef>
#include <cstdio>
#include <cstring>
#include <type_traits>
#include <vector>

#include "abi/ggml_backend_abi_v3.h"
#include "host/worker/session/session.h"

namespace ggml_remote::host {

using namespace protocol;

namespace {

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

StatusDevice status_of_device(ggml_backend_dev_t device) {
    StatusDevice entry{};
    std::snprintf(entry.name, sizeof(entry.name), "%s", ggml_backend_dev_name(device));
    std::snprintf(entry.description, sizeof(entry.description), "%s", ggml_backend_dev_description(device));
    size_t free = 0, total = 0;
    ggml_backend_dev_memory(device, &free, &total);
    entry.memory_free = free;
    entry.memory_total = total;
    return entry;
}

// The figures the list puts in the reply fill StatusSession's run of uint64_t
// between started_unix and the core-scheduling fields, each once: none of the
// wire struct's figures is left uncopied, and a line marked in_reply that the
// struct lacks does not compile.
constexpr size_t kReplyFiguresBegin = offsetof(StatusSession, started_unix) + sizeof(int64_t);
constexpr size_t kReplyFiguresEnd = offsetof(StatusSession, cores_threads);
constexpr size_t kFiguresInReply = 0
#define GGML_REMOTE_FIGURE_COUNT(field, kind, reply, metric, from, help) GGML_REMOTE_FIGURE_IF_##reply(+1)
    GGML_REMOTE_SESSION_FIGURES(GGML_REMOTE_FIGURE_COUNT);
#undef GGML_REMOTE_FIGURE_COUNT
static_assert(kFiguresInReply * sizeof(uint64_t) == kReplyFiguresEnd - kReplyFiguresBegin,
              "every figure of StatusSession comes from one line of GGML_REMOTE_SESSION_FIGURES");
#define GGML_REMOTE_FIGURE_IN_STATUS_SESSION(field, kind, reply, metric, from, help)                             \
    GGML_REMOTE_FIGURE_IF_##reply(static_assert(std::is_same<decltype(StatusSession::field), uint64_t>::value && \
                                                    offsetof(StatusSession, field) >= kReplyFiguresBegin &&      \
                                                    offsetof(StatusSession, field) < kReplyFiguresEnd,           \
                                                #field " is one of StatusSession's figures");)
GGML_REMOTE_SESSION_FIGURES(GGML_REMOTE_FIGURE_IN_STATUS_SESSION)
#undef GGML_REMOTE_FIGURE_IN_STATUS_SESSION

// The same for StatusUpload: the figures marked in_upload_table fill all of it.
constexpr size_t kFiguresInUploadTable = 0
#define GGML_REMOTE_FIGURE_COUNT(field, kind, reply, metric, from, help) GGML_REMOTE_FIGURE_IF_UPLOAD_##reply(+1)
    GGML_REMOTE_SESSION_FIGURES(GGML_REMOTE_FIGURE_COUNT);
#undef GGML_REMOTE_FIGURE_COUNT
static_assert(kFiguresInUploadTable * sizeof(uint64_t) == sizeof(StatusUpload),
              "every figure of StatusUpload comes from one line of GGML_REMOTE_SESSION_FIGURES");
#define GGML_REMOTE_FIGURE_IN_STATUS_UPLOAD(field, kind, reply, metric, from, help)                                  \
    GGML_REMOTE_FIGURE_IF_UPLOAD_##reply(static_assert(std::is_same<decltype(StatusUpload::field), uint64_t>::value, \
                                                       #field " is one of StatusUpload's figures");)
GGML_REMOTE_SESSION_FIGURES(GGML_REMOTE_FIGURE_IN_STATUS_UPLOAD)
#undef GGML_REMOTE_FIGURE_IN_STATUS_UPLOAD

StatusSession status_of_session(const SessionSlot &slot) {
    StatusSession entry{};
    entry.id = slot.id;
    entry.pid = slot.pid;
    std::memcpy(entry.peer, slot.peer, sizeof(entry.peer));
    entry.peer[sizeof(entry.peer) - 1] = '\0';
    entry.started_unix = slot.started_unix;
    // The list's figures that the reply carries; the wire struct itself is fixed
    // (commands.h), and the asserts above keep the two in step.
    const SessionFigureValues figures = load_figures(slot);
#define GGML_REMOTE_FIGURE_TO_REPLY(field, kind, reply, metric, from, help) \
    GGML_REMOTE_FIGURE_IF_##reply(entry.field = figures.field;)
    GGML_REMOTE_SESSION_FIGURES(GGML_REMOTE_FIGURE_TO_REPLY)
#undef GGML_REMOTE_FIGURE_TO_REPLY
    entry.cores_threads = slot.cores_threads.load(std::memory_order_relaxed);
    entry.cores_shared_computes = slot.cores_shared_computes.load(std::memory_order_relaxed);
    return entry;
}

StatusUpload upload_of_session(const SessionSlot &slot) {
    StatusUpload entry{};
    const SessionFigureValues figures = load_figures(slot);
#define GGML_REMOTE_FIGURE_TO_UPLOAD(field, kind, reply, metric, from, help) \
    GGML_REMOTE_FIGURE_IF_UPLOAD_##reply(entry.field = figures.field;)
    GGML_REMOTE_SESSION_FIGURES(GGML_REMOTE_FIGURE_TO_UPLOAD)
#undef GGML_REMOTE_FIGURE_TO_UPLOAD
    return entry;
}

}  // namespace

Status Session::handle(const Hello::Request &request, Call<Hello> &call) {
    if (request.magic != kHelloMagic) {
        return error(Code::bad_request, "not a ggml-remote guest (bad handshake magic)");
    }
    if (handshaken_) {
        // One handshake per session: each would make a new shared ring.
        return error(Code::bad_request, "the handshake was already done in this session");
    }
    if (request.protocol_version != kProtocolVersion) {
        return error(Code::version_mismatch, "protocol version mismatch: the guest speaks version " +
                                                 std::to_string(request.protocol_version) +
                                                 ", this server speaks version " + std::to_string(kProtocolVersion) +
                                                 "; use the same ggml-remote release on both sides");
    }
    handshaken_ = true;
    shared_memory_ = shared_memory_allowed_ && (request.capabilities & kSessionSharedMemory) != 0;
    call.reply.protocol_version = kProtocolVersion;
    call.reply.device_count = static_cast<uint32_t>(devices_.size());
    call.reply.capabilities = shared_memory_ ? uint64_t(kSessionSharedMemory) : 0;
    weight_store_granted_ = store_fill_.enabled() && (request.capabilities & kSessionWeightStore) != 0;
    if (weight_store_granted_) call.reply.capabilities |= kSessionWeightStore;
    if (weight_store_granted_ && model_library_offered_ && (request.capabilities & kSessionModelLibrary) != 0) {
        call.reply.capabilities |= kSessionModelLibrary;
    }
    // Descriptors pass on a unix socket: a guest there may give its servers a file.
    peer_exchange_granted_ = shared_memory_allowed_ && (request.capabilities & kSessionPeerExchange) != 0;
    if (peer_exchange_granted_) call.reply.capabilities |= kSessionPeerExchange;
    // The listener dials and accepts for the worker, which may open no socket.
    peer_links_granted_ = peer_channel_.valid() && (request.capabilities & kSessionPeerLinks) != 0;
    if (peer_links_granted_) call.reply.capabilities |= kSessionPeerLinks;
    // Costs the guest's reader nothing and this worker a frame a second while it computes.
    keepalive_granted_ = (request.capabilities & kSessionKeepAlive) != 0;
    if (keepalive_granted_) call.reply.capabilities |= kSessionKeepAlive;
    region_heap_granted_ = region_ != nullptr && (request.capabilities & kSessionRegionHeap) != 0;
    if (region_heap_granted_) call.reply.capabilities |= kSessionRegionHeap;
    if (shared_memory_ && (request.capabilities & kSessionSharedRing)) {
        // serve() switches to the ring once this reply, which carries it, is out.
        if (Status s = RingChannel::create(kRingCapacity, &call.reply_tail.fd, &pending_ring_); !s) return s;
        call.reply.capabilities |= kSessionSharedRing;
    }
    return Status::success();
}

Status Session::handle(const DeviceInfo::Request &request, Call<DeviceInfo> &call) {
    ggml_backend_dev_t device = nullptr;
    if (Status s = device_at(request.device, &device); !s) return s;
    ggml_backend_dev_props props{};
    ggml_backend_dev_get_props(device, &props);
    ggml_backend_buffer_type_t buft = ggml_backend_dev_buffer_type(device);
    call.reply.type = props.type;
    uint32_t caps = 0;
    if (props.caps.async) caps |= kCapAsync;
    if (props.caps.host_buffer) caps |= kCapCpuMemoryBufferType;
    if (props.caps.buffer_from_host_ptr) caps |= kCapBufferFromCpuMemory;
    if (props.caps.events) caps |= kCapEvents;
    if (props.caps.mmap_support) caps |= kCapMmap;
    call.reply.caps = caps;
    call.reply.memory_free = props.memory_free;
    call.reply.memory_total = props.memory_total;
    call.reply.buffer_alignment = ggml_backend_buft_get_alignment(buft);
    call.reply.buffer_max_size = ggml_backend_buft_get_max_size(buft);
    call.reply.buffer_in_cpu_memory = ggml_backend_buft_is_host(buft) ? 1 : 0;
    describe_buffer_hooks(buft, &call.reply);
    call.reply.shared_buffers = !shares_with_guest(device) ? 0 : shared_memory_ ? 1 : 2;
    for (const char *text : {props.name, props.description, ggml_backend_buft_name(buft)}) {
        const std::string s = text != nullptr ? text : "";
        call.reply_tail.owned.insert(call.reply_tail.owned.end(), s.begin(), s.end());
        call.reply_tail.owned.push_back('\0');
    }
    return Status::success();
}

Status Session::handle(const DeviceMemory::Request &request, Call<DeviceMemory> &call) {
    ggml_backend_dev_t device = nullptr;
    if (Status s = device_at(request.device, &device); !s) return s;
    size_t free = 0, total = 0;
    ggml_backend_dev_memory(device, &free, &total);
    call.reply.memory_free = free;
    call.reply.memory_total = total;
    return Status::success();
}

Status Session::op_query(uint32_t device_index, ByteView list, const char *command, ggml_backend_dev_t *device,
                         BuiltTensors *built) {
    if (Status s = device_at(device_index, device); !s) return s;
    if (Status s = build(list, DataPolicy::none, built); !s) return s;
    if (built->tensors.empty()) return error(Code::bad_request, std::string(command) + ": no tensor");
    return Status::success();
}

Status Session::handle(const SupportsOp::Request &request, Call<SupportsOp> &call) {
    ggml_backend_dev_t device = nullptr;
    BuiltTensors built;
    if (Status s = op_query(request.device, call.tail, "supports_op", &device, &built); !s) return s;
    call.reply.supported = ggml_backend_dev_supports_op(device, built.tensors.back()) ? 1 : 0;
    return Status::success();
}

Status Session::handle(const AllocSize::Request &request, Call<AllocSize> &call) {
    ggml_backend_dev_t device = nullptr;
    BuiltTensors built;
    if (Status s = op_query(request.device, call.tail, "alloc_size", &device, &built); !s) return s;
    call.reply.size = ggml_backend_buft_get_alloc_size(ggml_backend_dev_buffer_type(device), built.tensors.back());
    return Status::success();
}

Status Session::handle(const ServerStatus::Request &request, Call<ServerStatus> &call) {
    if (status_board_ == nullptr || !status_query_allowed_) {
        return error(Code::unsupported, "status is answered only on the server's unix socket, to its own user");
    }
    publish_status();
    call.reply.server_pid = static_cast<uint32_t>(getppid());
    call.reply.max_sessions = max_sessions_;
    call.reply.n_devices = static_cast<uint32_t>(devices_.size());
    for (ggml_backend_dev_t device : devices_) append_pod(call.reply_tail.owned, status_of_device(device));
    // Read once: a slot that goes live or ends between the tables would misalign them.
    std::vector<const SessionSlot *> listed;
    for (uint32_t i = 0; i < status_board_->slots(); ++i) {
        const SessionSlot *slot = status_board_->slot(i);
        if (slot->live.load() == 0 || slot == status_slot_) continue;  // not the query itself
        listed.push_back(slot);
    }
    call.reply.n_sessions = static_cast<uint32_t>(listed.size());
    for (const SessionSlot *slot : listed) append_pod(call.reply_tail.owned, status_of_session(*slot));
    if ((request.tables & kStatusUploads) != 0) {
        for (const SessionSlot *slot : listed) append_pod(call.reply_tail.owned, upload_of_session(*slot));
    }
    return Status::success();
}

}  // namespace ggml_remote::host
