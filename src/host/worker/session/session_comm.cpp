// Tensor parallelism: this session's part in its guest's groups of servers, which
// sum partial results through a memory file the guest gave them all
// (transport/peer_exchange.h), or, across machines, over TCP connections between
// the servers (transport/peer_links.h) that the listeners make
// (services/peer_broker.h). No other server, and no other session, can reach a
// group: the file, or the token the links' keys come from, is the capability,
// and only this session's guest holds it.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "host/common/peer_channel.h"
#include "host/worker/session/session.h"

namespace ggml_remote::host {

using namespace protocol;

namespace {

// A guest runs one group per ggml meta backend; a few are plenty.
constexpr size_t kMaxGroups = 8;
// How long the listener's peer broker may take to answer, beyond a dial or a take.
constexpr int kBrokerAnswerMs = 2000;

// The place a join names: CommJoin's and CommJoinLinks' requests have the same fields.
template <typename JoinRequest>
PeerExchange::Place place_of(const JoinRequest &request) {
    PeerExchange::Place place;
    place.rank = request.rank;
    place.ranks = request.ranks;
    place.slot_bytes = request.slot_bytes;
    std::memcpy(place.token.data(), request.token, sizeof(request.token));
    return place;
}

// The join's tail: exactly `count` endpoints, each ended by a NUL, of printable
// ASCII (the listener parses them, and may dial only those of --tensor-peer).
Status peer_endpoints(ByteView tail, uint32_t count, std::vector<std::string> *endpoints) {
    const char *text = reinterpret_cast<const char *>(tail.data);
    size_t at = 0;
    for (uint32_t i = 0; i < count; ++i) {
        const void *end = at < tail.size ? std::memchr(text + at, '\0', tail.size - at) : nullptr;
        if (end == nullptr) return error(Code::bad_request, "comm_join_links: the tail holds too few endpoints");
        const std::string endpoint(text + at, static_cast<const char *>(end));
        if (endpoint.empty() || endpoint.size() > kMaxPeerEndpointBytes) {
            return error(Code::bad_request, "comm_join_links: an endpoint of 1 to " +
                                                std::to_string(kMaxPeerEndpointBytes) + " bytes is due");
        }
        for (const char c : endpoint) {
            if (c <= ' ' || c > '~') return error(Code::bad_request, "comm_join_links: an endpoint is not printable");
        }
        endpoints->push_back(endpoint);
        at += endpoint.size() + 1;
    }
    if (at != tail.size) return error(Code::bad_request, "comm_join_links: the tail holds more than its endpoints");
    return Status::success();
}

uint64_t links_bytes(const PeerExchange::Place &place) { return place.slot_bytes * place.ranks; }

peer_channel::Request channel_request(peer_channel::Kind kind, const PeerExchange::Place &place) {
    peer_channel::Request request;
    request.kind = static_cast<uint32_t>(kind);
    request.rank = place.rank;
    request.ranks = place.ranks;
    const PeerLinks::TokenId id = PeerLinks::token_id(place.token);
    std::memcpy(request.token_id, id.data(), id.size());
    return request;
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
    group.place = place;
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
    if (request.tensor.size > group->place.slot_bytes) {
        return error(Code::bad_request,
                     "comm_all_reduce: " + std::to_string(request.tensor.size) + " bytes exceed the group's slot");
    }
    if (group->over_links && !group->links.is_open()) {
        if (!group->links_failure.ok()) return group->links_failure;
        if (Status s = open_links(group); !s) return group->links_failure = s;
    }
    const size_t count = request.tensor.size / sizeof(float);
    auto sum = [&](float *values) {
        return group->over_links ? group->links.all_reduce_f32(values, count, group->wait)
                                 : group->exchange.all_reduce_f32(values, count, group->wait);
    };
    return write_range(request.tensor, [&](ggml_tensor *bytes) {
        // CPU memory is summed where it lies; a device's goes through a copy.
        if (ggml_backend_buffer_is_host(bytes->buffer)) return sum(static_cast<float *>(bytes->data));
        std::vector<float> values(count);
        ggml_backend_tensor_get(bytes, values.data(), 0, request.tensor.size);
        Status status = sum(values.data());
        if (status) ggml_backend_tensor_set(bytes, values.data(), 0, request.tensor.size);
        return status;
    });
}

Status Session::handle(const CommJoinLinks::Request &request, Call<CommJoinLinks> &call) {
    if (!peer_links_granted_) {
        return error(Code::unsupported, "comm_join_links needs a server whose listener makes peer connections");
    }
    if (groups_.size() >= kMaxGroups) return over_cap(groups_.size(), "tensor-parallel groups", "a fixed limit");
    if (request.wait_ms == 0 || request.wait_ms > kMaxPeerWaitMs) {
        return error(Code::bad_request, "comm_join_links: a step waits 1 to " + std::to_string(kMaxPeerWaitMs) + " ms");
    }
    Group group;
    group.over_links = true;
    group.place = place_of(request);
    group.wait = std::chrono::milliseconds(request.wait_ms);
    if (Status s = PeerExchange::check_place(group.place); !s) return s;
    // The links receive every rank's partial of a step at most.
    if (!fits_quota(links_bytes(group.place))) {
        return error(Code::limit_exceeded, "the group's receive buffers would exceed the session's memory quota");
    }
    std::vector<std::string> endpoints;
    if (Status s = peer_endpoints(call.tail, request.rank, &endpoints); !s) return s;
    if (Status s = peer_channel::ask(peer_channel_.get(), channel_request(peer_channel::Kind::enrol, group.place), -1,
                                     kBrokerAnswerMs, nullptr);
        !s) {
        return error(s.code(), "the listener's peer broker: " + s.message());
    }
    group.connections.resize(request.ranks);
    Status status = dial_lower_ranks(group.place, endpoints, &group.connections);
    if (!status) {
        leave_broker(group.place);
        return status;
    }
    memory_in_use_ += links_bytes(group.place);
    call.reply.comm = groups_.insert(std::move(group));
    return Status::success();
}

Status Session::dial_lower_ranks(const PeerExchange::Place &place, const std::vector<std::string> &endpoints,
                                 std::vector<UniqueFd> *connections) {
    for (uint32_t rank = 0; rank < place.rank; ++rank) {
        peer_channel::Request dial = channel_request(peer_channel::Kind::dial, place);
        dial.other_rank = rank;
        std::snprintf(dial.endpoint, sizeof(dial.endpoint), "%s", endpoints[rank].c_str());
        Status s = peer_channel::ask(peer_channel_.get(), dial, -1, kBrokerAnswerMs + peer_channel::kDialTimeoutMs,
                                     &(*connections)[rank]);
        if (!s) return error(s.code(), "rank " + std::to_string(rank) + ": " + s.message());
    }
    return Status::success();
}

void Session::leave_broker(const PeerExchange::Place &place) {
    (void)peer_channel::ask(peer_channel_.get(), channel_request(peer_channel::Kind::leave, place), -1, kBrokerAnswerMs,
                            nullptr);
}

// The group's first step: the connections of the higher ranks, from the listener,
// then TLS with every peer. A failure breaks the group (every later step fails).
Status Session::open_links(Group *group) {
    const PeerExchange::Place &place = group->place;
    Status status;
    for (uint32_t rank = place.rank + 1; status && rank < place.ranks; ++rank) {
        peer_channel::Request take = channel_request(peer_channel::Kind::take, place);
        take.other_rank = rank;
        take.timeout_ms = static_cast<uint32_t>(group->wait.count());
        status = peer_channel::ask(peer_channel_.get(), take, -1, take.timeout_ms + kBrokerAnswerMs,
                                   &group->connections[rank]);
    }
    if (status) status = PeerLinks::open(place, std::move(group->connections), group->wait, &group->links);
    group->connections.clear();
    return status;
}

Status Session::handle(const CommLeave::Request &request, Call<CommLeave> &) {
    Group *group = groups_.find(request.comm);
    if (group == nullptr) return error(Code::not_found, "no tensor-parallel group " + std::to_string(request.comm));
    if (group->over_links) {
        leave_broker(group->place);
        memory_in_use_ -= links_bytes(group->place);
    } else {
        memory_in_use_ -= PeerExchange::area_bytes(group->place);
    }
    groups_.erase(request.comm);
    return Status::success();
}

}  // namespace ggml_remote::host
