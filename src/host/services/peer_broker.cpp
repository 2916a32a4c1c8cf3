#include "host/services/peer_broker.h"

#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <utility>

#include "host/common/store_channel.h"
#include "host/services/channel_threads.h"
#include "transport/socket.h"

namespace ggml_remote::host {

using peer_channel::Kind;
using peer_channel::Reply;
using peer_channel::Request;

struct PeerBroker::Channel {
    UniqueFd fd;
    std::thread thread;
    std::atomic<bool> ended{false};
    RateBucket dials{kDialBurstPerSession, kDialsPerSecondPerSession, std::chrono::steady_clock::now()};
};

namespace {

PeerLinks::TokenId token_id_of(const Request &request) {
    PeerLinks::TokenId id;
    std::memcpy(id.data(), request.token_id, id.size());
    return id;
}

// The request's endpoint text, which must end within its field.
Status endpoint_of(const Request &request, Endpoint *endpoint) {
    const void *end = std::memchr(request.endpoint, '\0', sizeof(request.endpoint));
    if (end == nullptr) return error(Code::bad_request, "dial: the endpoint is not terminated");
    const std::string text(request.endpoint);
    if (Status s = parse_endpoint(text, endpoint); !s) return s;
    if (endpoint->kind != Endpoint::Kind::tcp && endpoint->kind != Endpoint::Kind::tls) {
        return error(Code::bad_request, "dial: a peer server is tcp://host:port or tls://host:port");
    }
    return Status::success();
}

bool same_server(const Endpoint &a, const Endpoint &b) { return a.host == b.host && a.port == b.port; }

int64_t to_ms(std::chrono::steady_clock::duration duration) {
    return std::chrono::ceil<std::chrono::milliseconds>(duration).count();
}

}  // namespace

PeerBroker::PeerBroker(std::vector<Endpoint> peers) : peers_(std::move(peers)) {}

PeerBroker::~PeerBroker() {
    stopping_.store(true);
    std::list<std::unique_ptr<Channel>> channels;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        channels.swap(channels_);
    }
    arrivals_.notify_all();
    turns_.notify_all();
    for (auto &channel : channels) (void)::shutdown(channel->fd.get(), SHUT_RDWR);
    for (auto &channel : channels) {
        if (channel->thread.joinable()) channel->thread.join();
    }
}

Status PeerBroker::connect(UniqueFd *worker_end) {
    int pair[2];
    if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) {
        return error(Code::error, std::string("socketpair: ") + std::strerror(errno));
    }
    worker_end->reset(pair[0]);
    forget_ended_channels();
    auto channel = std::make_unique<Channel>();
    channel->fd.reset(pair[1]);
    Channel *served = channel.get();
    std::lock_guard<std::mutex> lock(mutex_);
    channels_.push_back(std::move(channel));
    served->thread = std::thread(&PeerBroker::serve_channel, this, served);
    return Status::success();
}

void PeerBroker::forget_ended_channels() { join_ended_channels(mutex_, channels_); }

void PeerBroker::serve_channel(Channel *channel) {
    store_channel::NoSigpipe no_sigpipe;
    for (;;) {
        Request request;
        std::vector<UniqueFd> fds;
        // A message of another size, or more than one descriptor, ends the channel.
        if (!store_channel::receive_message(channel->fd.get(), &request, sizeof(request), &fds, 1, -1)) break;
        if (stopping_.load()) break;
        UniqueFd connection;
        const Status status = answer(*channel, request, fds, &connection);
        Reply reply;
        reply.code = static_cast<int32_t>(status.code());
        std::snprintf(reply.message, sizeof(reply.message), "%s", status.message().c_str());
        const int fd = connection.get();
        if (!store_channel::send_message(channel->fd.get(), &reply, sizeof(reply), &fd, fd >= 0 ? 1 : 0)) break;
    }
    forget_groups_of(*channel);
    // The worker hears at once that its channel ended (the descriptor is closed
    // only when the thread is joined, at the next connect).
    (void)::shutdown(channel->fd.get(), SHUT_RDWR);
    channel->ended.store(true);
}

Status PeerBroker::answer(Channel &channel, const Request &request, std::vector<UniqueFd> &fds, UniqueFd *connection) {
    if (static_cast<Kind>(request.kind) != Kind::offer && !fds.empty()) {
        return error(Code::bad_request, "only an offer comes with a connection");
    }
    switch (static_cast<Kind>(request.kind)) {
        case Kind::enrol:
            return enrol(channel, request);
        case Kind::leave:
            return leave(channel, request);
        case Kind::dial:
            return dial(channel, request, connection);
        case Kind::take:
            return take(channel, request, connection);
        case Kind::offer:
            return offer(request, fds);
    }
    return error(Code::bad_request, "no such peer channel request");
}

Status PeerBroker::enrol(const Channel &channel, const Request &request) {
    if (request.ranks < 2 || request.ranks > PeerExchange::kMaxRanks || request.rank >= request.ranks) {
        return error(Code::bad_request, "enrol: rank " + std::to_string(request.rank) + " of " +
                                            std::to_string(request.ranks) + " is no place in a group");
    }
    std::lock_guard<std::mutex> lock(mutex_);
    const auto enrolled = std::count_if(groups_.begin(), groups_.end(),
                                        [&](const auto &entry) { return entry.second.owner == &channel; });
    if (static_cast<uint32_t>(enrolled) >= peer_channel::kMaxEnrolled) {
        return error(Code::limit_exceeded, "enrol: this session is in as many groups as it may be");
    }
    Group group;
    group.owner = &channel;
    group.rank = request.rank;
    group.ranks = request.ranks;
    group.offered.assign(request.ranks, false);
    if (!groups_.emplace(token_id_of(request), std::move(group)).second) {
        return error(Code::bad_request, "enrol: another session is in a group of that token");
    }
    return Status::success();
}

Status PeerBroker::leave(const Channel &channel, const Request &request) {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = groups_.find(token_id_of(request));
    if (it == groups_.end() || it->second.owner != &channel) return error(Code::not_found, "leave: no such group");
    groups_.erase(it);
    return Status::success();
}

Status PeerBroker::dial(Channel &channel, const Request &request, UniqueFd *connection) {
    Endpoint endpoint;
    if (Status s = endpoint_of(request, &endpoint); !s) return s;
    const bool allowed =
        std::any_of(peers_.begin(), peers_.end(), [&](const Endpoint &peer) { return same_server(peer, endpoint); });
    if (!allowed) {
        return error(Code::unsupported, "this server may not reach " + endpoint.to_string() +
                                            " for tensor parallelism (start it with --tensor-peer " +
                                            endpoint.to_string() + ")");
    }
    if (Status s = spend_dial(channel, request, endpoint); !s) return s;
    endpoint.kind = Endpoint::Kind::tcp;  // the link's TLS is the workers' own, under the group's key
    if (Status s = connect_endpoint(endpoint, peer_channel::kDialTimeoutMs, connection); !s) return s;
    PeerLinks::Hello hello{};
    std::memcpy(hello.magic, PeerLinks::kHelloMagic.data(), sizeof(hello.magic));
    std::memcpy(hello.token_id, request.token_id, sizeof(hello.token_id));
    hello.from_rank = request.rank;
    hello.to_rank = request.other_rank;
    if (!write_fully(connection->get(), &hello, sizeof(hello))) {
        connection->reset();
        return error(Code::disconnected, endpoint.to_string() + " closed the connection at once");
    }
    return Status::success();
}

// One dial from the session's budget and the group's (refused when either is
// spent), then its turn in the queue of dials to that server.
Status PeerBroker::spend_dial(Channel &channel, const Request &request, const Endpoint &server) {
    const auto now = std::chrono::steady_clock::now();
    std::unique_lock<std::mutex> lock(mutex_);
    if (!channel.dials.can_spend(now)) {
        return error(Code::limit_exceeded, "dial: this session dialled as often as it may for now; try again in " +
                                               std::to_string(to_ms(channel.dials.until_next(now))) + " ms");
    }
    for (auto it = group_dials_.begin(); it != group_dials_.end();) {
        it = it->second.full(now) ? group_dials_.erase(it) : std::next(it);
    }
    const PeerLinks::TokenId id = token_id_of(request);
    auto group = group_dials_.try_emplace(id, kDialBurstPerGroup, kDialsPerSecondPerGroup, now).first;
    if (!group->second.can_spend(now)) {
        return error(Code::limit_exceeded, "dial: this group dialled as often as it may for now; try again in " +
                                               std::to_string(to_ms(group->second.until_next(now))) + " ms");
    }
    channel.dials.spend(now);
    group->second.spend(now);
    const auto deadline = now + std::chrono::milliseconds(peer_channel::kDialTimeoutMs);
    return wait_turn_to_dial(channel, server.host + ":" + std::to_string(server.port), deadline, lock);
}

// Waits, first come first served, for the server's dial budget: a guest that
// dials as often as its own budgets allow, from many sessions, delays another
// tenant's dial by the queue ahead of it, never refuses it.
Status PeerBroker::wait_turn_to_dial(const Channel &channel, const std::string &server,
                                     std::chrono::steady_clock::time_point deadline,
                                     std::unique_lock<std::mutex> &lock) {
    auto &dials = server_dials_
                      .try_emplace(server, ServerDials{RateBucket(kDialBurstPerServer, kDialsPerSecondPerServer,
                                                                  std::chrono::steady_clock::now()),
                                                       {}})
                      .first->second;
    dials.waiting.push_back(&channel);
    for (;;) {
        const auto now = std::chrono::steady_clock::now();
        const bool first = dials.waiting.front() == &channel;
        if (first && dials.budget.spend(now)) break;
        if (stopping_.load() || now >= deadline) {
            dials.waiting.erase(std::find(dials.waiting.begin(), dials.waiting.end(), &channel));
            turns_.notify_all();
            return error(Code::limit_exceeded, "dial: " + server + " is dialled as often as it may be for now");
        }
        const auto wake = first ? std::min(deadline, now + dials.budget.until_next(now)) : deadline;
        turns_.wait_until(lock, wake);
    }
    dials.waiting.pop_front();
    turns_.notify_all();
    return Status::success();
}

Status PeerBroker::take(const Channel &channel, const Request &request, UniqueFd *connection) {
    const auto timeout = std::chrono::milliseconds(std::min(request.timeout_ms, peer_channel::kMaxTakeMs));
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    const PeerLinks::TokenId id = token_id_of(request);
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
        const auto it = groups_.find(id);
        if (it == groups_.end() || it->second.owner != &channel) return error(Code::not_found, "take: no such group");
        Group &group = it->second;
        if (request.other_rank <= group.rank || request.other_rank >= group.ranks) {
            return error(Code::bad_request, "take: rank " + std::to_string(request.other_rank) + " does not dial in");
        }
        const auto arrived = group.arrived.find(request.other_rank);
        if (arrived != group.arrived.end()) {
            *connection = std::move(arrived->second);
            group.arrived.erase(arrived);
            return Status::success();
        }
        if (stopping_.load()) return error(Code::disconnected, "the listener is stopping");
        if (arrivals_.wait_until(lock, deadline) == std::cv_status::timeout) {
            return error(Code::disconnected, "rank " + std::to_string(request.other_rank) + " did not connect within " +
                                                 std::to_string(timeout.count()) + " ms");
        }
    }
}

Status PeerBroker::offer(const Request &request, std::vector<UniqueFd> &fds) {
    if (fds.size() != 1) return error(Code::bad_request, "an offer comes with one connection");
    // A worker a guest took over may send any descriptor: only a peer's TCP
    // connection is handed on to the session that awaits it.
    if (Status kind = expect_connected_tcp(fds.front().get()); !kind) {
        return error(Code::bad_request, "an offer's connection is " + kind.message());
    }
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = groups_.find(token_id_of(request));
    if (it == groups_.end()) return error(Code::not_found, "no session here is in that group");
    Group &group = it->second;
    if (request.rank != group.rank || request.other_rank <= group.rank || request.other_rank >= group.ranks ||
        group.offered[request.other_rank]) {
        return error(Code::bad_request, "the group awaits no such connection");
    }
    group.offered[request.other_rank] = true;
    group.arrived.emplace(request.other_rank, std::move(fds.front()));
    arrivals_.notify_all();
    return Status::success();
}

void PeerBroker::forget_groups_of(const Channel &channel) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = groups_.begin(); it != groups_.end();) {
        it = it->second.owner == &channel ? groups_.erase(it) : std::next(it);
    }
}

}  // namespace ggml_remote::host
