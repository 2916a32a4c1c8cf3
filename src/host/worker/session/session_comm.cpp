// Tensor parallelism: this session's part in its guest's groups of servers, which
// sum partial results through a memory file the guest gave them all
// (transport/peer_exchange.h). No other server, and no other session, can reach
// a group: the file is the capability, and only this session's guest holds it.
#include <cstring>
#include <vector>

#include "host/worker/session/session.h"

namespace ggml_remote::host {

using namespace protocol;

namespace {

// A guest runs one group per ggml meta backend; a few are plenty.
constexpr size_t kMaxGroups = 8;

PeerExchange::Place place_of(const CommJoin::Request &request) {
    PeerExchange::Place place;
    place.rank = request.rank;
    place.ranks = request.ranks;
    place.slot_bytes = request.slot_bytes;
    std::memcpy(place.token.data(), request.token, sizeof(request.token));
    return place;
}

}  // namespace

Status Session::handle(const CommJoin::Request &request, Call<CommJoin> &call) {
    if (!peer_exchange_granted_) return error(Code::unsupported, "comm_join needs a session on a unix socket");
    if (call.fds.size() != 1) return error(Code::bad_request, "comm_join needs exactly one file descriptor");
    if (groups_.size() >= kMaxGroups) return over_cap(groups_.size(), "tensor-parallel groups", "a fixed limit");
    if (request.wait_ms == 0 || request.wait_ms > kMaxPeerWaitMs) {
        return error(Code::bad_request, "comm_join: a step waits 1 to " + std::to_string(kMaxPeerWaitMs) + " ms");
    }
    const PeerExchange::Place place = place_of(request);
    if (Status s = PeerExchange::check_place(place); !s) return s;
    // The file is the guest's memory, but mapped here for the session's life.
    if (!fits_quota(PeerExchange::area_bytes(place))) {
        return error(Code::limit_exceeded, "the group's memory file would exceed the session's memory quota");
    }
    Group group;
    group.wait = std::chrono::milliseconds(request.wait_ms);
    UniqueFd file = std::move(call.fds.front());
    call.fds.clear();
    if (Status s = PeerExchange::attach(std::move(file), place, &group.exchange); !s) return s;
    memory_in_use_ += PeerExchange::area_bytes(place);
    call.reply.comm = groups_.insert(std::move(group));
    return Status::success();
}

Status Session::handle(const CommAllReduce::Request &request, Call<CommAllReduce> &) {
    Group *group = groups_.find(request.comm);
    if (group == nullptr) return error(Code::not_found, "no tensor-parallel group " + std::to_string(request.comm));
    if (request.tensor.size % sizeof(float) != 0 || request.tensor.offset % alignof(float) != 0) {
        return error(Code::bad_request, "comm_all_reduce: " + std::to_string(request.tensor.size) + " bytes at " +
                                            std::to_string(request.tensor.offset) + " are no aligned F32 values");
    }
    if (request.tensor.size > group->exchange.place().slot_bytes) {
        return error(Code::bad_request,
                     "comm_all_reduce: " + std::to_string(request.tensor.size) + " bytes exceed the group's slot");
    }
    const size_t count = request.tensor.size / sizeof(float);
    return write_range(request.tensor, [&](ggml_tensor *bytes) {
        // CPU memory is summed where it lies; a device's goes through a copy.
        if (ggml_backend_buffer_is_host(bytes->buffer)) {
            return group->exchange.all_reduce_f32(static_cast<float *>(bytes->data), count, group->wait);
        }
        std::vector<float> values(count);
        ggml_backend_tensor_get(bytes, values.data(), 0, request.tensor.size);
        Status status = group->exchange.all_reduce_f32(values.data(), count, group->wait);
        if (status) ggml_backend_tensor_set(bytes, values.data(), 0, request.tensor.size);
        return status;
    });
}

Status Session::handle(const CommLeave::Request &request, Call<CommLeave> &) {
    Group *group = groups_.find(request.comm);
    if (group == nullptr) return error(Code::not_found, "no tensor-parallel group " + std::to_string(request.comm));
    memory_in_use_ -= PeerExchange::area_bytes(group->exchange.place());
    groups_.erase(request.comm);
    return Status::success();
}

}  // namespace ggml_remote::host
