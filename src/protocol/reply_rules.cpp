#include "protocol/reply_rules.h"

#include <algorithm>
#include <string>

namespace ggml_remote::protocol {

namespace {

Status refused(const char *command, const std::string &why) {
    return error(Code::bad_request, std::string("the server's reply to ") + command + " " + why);
}

Status no_tail(const char *command, uint64_t tail_size) {
    if (tail_size == 0) return Status::success();
    return refused(command, "has " + std::to_string(tail_size) + " bytes more than its kind of reply");
}

bool is_power_of_two(uint64_t value) { return value != 0 && (value & (value - 1)) == 0; }

}  // namespace

Status reply_without_tail(CommandId id, uint64_t tail_size) { return no_tail(command_name(id), tail_size); }

// Handshake: our version, a bounded device count, no capability we did not ask for.
uint64_t ReplyRule<Hello>::max_tail(const Hello::Request &, uint64_t) { return 0; }
Status ReplyRule<Hello>::check(const Hello::Request &request, const Hello::Reply &reply, uint64_t tail_size) {
    if (reply.protocol_version != request.protocol_version) {
        return refused("hello", "speaks protocol version " + std::to_string(reply.protocol_version) + ", not " +
                                    std::to_string(request.protocol_version));
    }
    if (reply.device_count > kMaxServerDevices) {
        return refused("hello", "claims " + std::to_string(reply.device_count) + " devices (at most " +
                                    std::to_string(kMaxServerDevices) + " are taken from one server)");
    }
    if ((reply.capabilities & ~request.capabilities) != 0) {
        return refused("hello", "grants capabilities that were not asked for");
    }
    return no_tail("hello", tail_size);
}

uint64_t ReplyRule<DeviceInfo>::max_tail(const DeviceInfo::Request &, uint64_t) { return kMaxDeviceStrings; }
Status ReplyRule<DeviceInfo>::check(const DeviceInfo::Request &, const DeviceInfo::Reply &reply, uint64_t) {
    if (!is_power_of_two(reply.buffer_alignment) || reply.buffer_alignment > kMaxBufferAlignment) {
        return refused("device_info", "gives a buffer alignment of " + std::to_string(reply.buffer_alignment) +
                                          " (a power of two up to " + std::to_string(kMaxBufferAlignment) +
                                          " is expected)");
    }
    if (reply.buffer_max_size == 0) return refused("device_info", "gives a largest buffer of 0 bytes");
    if (reply.shared_buffers > 2) return refused("device_info", "names an unknown kind of shared buffers");
    return Status::success();
}

// The tensor's own size is checked where the tensor is known (RemoteDevice::alloc_size).
uint64_t ReplyRule<AllocSize>::max_tail(const AllocSize::Request &, uint64_t) { return 0; }
Status ReplyRule<AllocSize>::check(const AllocSize::Request &, const AllocSize::Reply &reply, uint64_t tail_size) {
    if (reply.size > (UINT64_C(1) << 62)) return refused("alloc_size", "gives an impossible size");
    return no_tail("alloc_size", tail_size);
}

// At least the size asked (ggml places tensors up to it), at most what a
// device's rounding explains; the kind of memory one we know, with its tail.
uint64_t ReplyRule<BufferAlloc>::max_tail(const BufferAlloc::Request &, uint64_t) { return sizeof(uint64_t); }
Status ReplyRule<BufferAlloc>::check(const BufferAlloc::Request &request, const BufferAlloc::Reply &reply,
                                     uint64_t tail_size) {
    const uint64_t asked = request.size;  // a copy: the packed field binds no reference
    uint64_t most = 0;
    if (__builtin_add_overflow(asked, std::max<uint64_t>(asked, UINT64_C(1) << 20), &most)) most = UINT64_MAX;
    if (reply.size < asked || reply.size > most) {
        return refused("buffer_alloc", "gives a buffer of " + std::to_string(reply.size) + " bytes for " +
                                           std::to_string(request.size) + " asked");
    }
    if (reply.shared > BufferAlloc::kSharedInRegion) return refused("buffer_alloc", "names an unknown kind of memory");
    const uint64_t expected_tail = reply.shared == BufferAlloc::kSharedInRegion ? sizeof(uint64_t) : 0;
    if (tail_size != expected_tail) return refused("buffer_alloc", "has a tail of the wrong size");
    return Status::success();
}

// Exactly the bytes asked.
uint64_t ReplyRule<GetTensor>::max_tail(const GetTensor::Request &request, uint64_t) { return request.range.size; }
Status ReplyRule<GetTensor>::check(const GetTensor::Request &request, const GetTensor::Reply &, uint64_t tail_size) {
    if (tail_size == request.range.size) return Status::success();
    return refused("get_tensor",
                   "has " + std::to_string(tail_size) + " bytes for " + std::to_string(request.range.size) + " asked");
}

namespace {

uint64_t rows_bytes(const GetTensor2d::Request &request) {
    uint64_t bytes = 0;
    if (__builtin_mul_overflow(request.range.size, request.n_copies, &bytes)) return UINT64_MAX;
    return bytes;
}

}  // namespace

uint64_t ReplyRule<GetTensor2d>::max_tail(const GetTensor2d::Request &request, uint64_t) { return rows_bytes(request); }
Status ReplyRule<GetTensor2d>::check(const GetTensor2d::Request &request, const GetTensor2d::Reply &,
                                     uint64_t tail_size) {
    if (tail_size == rows_bytes(request)) return Status::success();
    return refused("get_tensor_2d",
                   "has " + std::to_string(tail_size) + " bytes for " + std::to_string(rows_bytes(request)) + " asked");
}

// One int32 per node and two per dependency, and no more of either than the
// request's encoded graph has bytes; the order itself is checked against the
// graph (parse_node_order).
uint64_t ReplyRule<GraphOptimize>::max_tail(const GraphOptimize::Request &, uint64_t request_tail) {
    return request_tail > (UINT64_C(1) << 40) ? UINT64_MAX : 12 * request_tail;
}
Status ReplyRule<GraphOptimize>::check(const GraphOptimize::Request &, const GraphOptimize::Reply &reply,
                                       uint64_t tail_size) {
    if (reply.has_optimizer == 0 && (reply.n_nodes != 0 || reply.n_alloc_deps != 0)) {
        return refused("graph_optimize", "orders nodes without an optimizer");
    }
    const uint64_t expected = (uint64_t{reply.n_nodes} + 2 * uint64_t{reply.n_alloc_deps}) * sizeof(int32_t);
    if (tail_size != expected) return refused("graph_optimize", "has a tail of the wrong size");
    return Status::success();
}

namespace {

// The tail of a reply with the StatusSession table and none after it: an older
// server's, or one to a request that asked for no other table.
uint64_t status_tail_without_uploads(const ServerStatus::Reply &reply) {
    return uint64_t{reply.n_devices} * sizeof(StatusDevice) + uint64_t{reply.n_sessions} * sizeof(StatusSession);
}

}  // namespace

uint64_t ReplyRule<ServerStatus>::max_tail(const ServerStatus::Request &, uint64_t) {
    return uint64_t{kMaxStatusDevices} * sizeof(StatusDevice) +
           uint64_t{kMaxStatusSessions} * (sizeof(StatusSession) + sizeof(StatusUpload));
}
Status ReplyRule<ServerStatus>::check(const ServerStatus::Request &request, const ServerStatus::Reply &reply,
                                      uint64_t tail_size) {
    if (reply.n_devices > kMaxStatusDevices || reply.n_sessions > kMaxStatusSessions) {
        return refused("server_status", "lists too many devices or sessions");
    }
    if (tail_size != status_tail_without_uploads(reply) && !status_reply_has_uploads(request, reply, tail_size)) {
        return refused("server_status", "has a tail of the wrong size");
    }
    return Status::success();
}

bool status_reply_has_uploads(const ServerStatus::Request &request, const ServerStatus::Reply &reply,
                              uint64_t tail_size) {
    return (request.tables & kStatusUploads) != 0 && reply.n_sessions != 0 &&
           tail_size == status_tail_without_uploads(reply) + uint64_t{reply.n_sessions} * sizeof(StatusUpload);
}

}  // namespace ggml_remote::protocol
