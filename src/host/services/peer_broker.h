// PeerBroker: the listener's part in tensor-parallel groups whose servers are on
// different machines (transport/peer_links.h). Workers may open no socket, so
// the listener dials a peer server for a worker, and hands a worker the
// connections that peers dialled in (host/common/peer_channel.h).
//
// It dials only the endpoints named by --tensor-peer (an allow-list: a guest
// cannot turn the server on other hosts), and it gives a connection that came
// in only to the session that enrolled its group, for a rank that group awaits,
// once. The bytes on a connection are never read here: the worker that
// accepted it read the peer hello in its sandbox, and the two workers then
// authenticate each other with TLS under a key only the guest gave them.
//
// Dials are bounded over time, so that no guest can make this server hammer a
// peer server (which counts every dial against this server's address, and would
// then refuse another tenant's link): each session has a budget of dials, each
// group another, and the dials to one peer server wait their turn, first come
// first served, for a budget kept under what that peer starts for one address
// (listener/start_budget.h). An offered connection must be a connected TCP socket.
//
// Each worker's channel is served on a thread of its own; a take or a dial waits there.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "host/common/peer_channel.h"
#include "host/common/rate_bucket.h"
#include "protocol/status.h"
#include "transport/endpoint.h"
#include "transport/peer_links.h"
#include "transport/unique_fd.h"

namespace ggml_remote::host {

// Dials a session may make: a burst, then one every few seconds (a guest that
// joins a group dials each higher rank's server once, and again after a reconnect).
constexpr double kDialBurstPerSession = 8;
constexpr double kDialsPerSecondPerSession = 0.5;
// Dials for one group (by its token), whichever sessions make them.
constexpr double kDialBurstPerGroup = 2.0 * PeerExchange::kMaxRanks;
constexpr double kDialsPerSecondPerGroup = 0.5;
// Dials to one peer server, all sessions together: half of what that server
// starts for one address by default (--max-starts-per-peer 8, a burst of 32).
constexpr double kDialBurstPerServer = 16;
constexpr double kDialsPerSecondPerServer = 4;

class PeerBroker {
  public:
    // `peers`: the servers this one may dial (--tensor-peer), tcp:// or tls://.
    explicit PeerBroker(std::vector<Endpoint> peers);
    ~PeerBroker();
    PeerBroker(const PeerBroker &) = delete;
    PeerBroker &operator=(const PeerBroker &) = delete;

    // A new worker's channel; its end in *worker_end.
    Status connect(UniqueFd *worker_end);

  private:
    struct Channel;
    struct Group {
        const Channel *owner = nullptr;
        uint32_t rank = 0;
        uint32_t ranks = 0;
        std::map<uint32_t, UniqueFd> arrived;  // by the rank that dialled, until taken
        std::vector<bool> offered;             // by rank: each higher rank comes once
    };

    void serve_channel(Channel *channel);
    Status answer(Channel &channel, const peer_channel::Request &request, std::vector<UniqueFd> &fds,
                  UniqueFd *connection);
    Status enrol(const Channel &channel, const peer_channel::Request &request);
    Status leave(const Channel &channel, const peer_channel::Request &request);
    Status dial(Channel &channel, const peer_channel::Request &request, UniqueFd *connection);
    Status spend_dial(Channel &channel, const peer_channel::Request &request, const Endpoint &server);
    Status wait_turn_to_dial(const Channel &channel, const std::string &server,
                             std::chrono::steady_clock::time_point deadline, std::unique_lock<std::mutex> &lock);
    Status take(const Channel &channel, const peer_channel::Request &request, UniqueFd *connection);
    Status offer(const peer_channel::Request &request, std::vector<UniqueFd> &fds);
    void forget_groups_of(const Channel &channel);
    void forget_ended_channels();

    std::vector<Endpoint> peers_;
    std::mutex mutex_;
    std::condition_variable arrivals_;
    std::condition_variable turns_;  // a dial's turn in a server's queue
    std::map<PeerLinks::TokenId, Group> groups_;
    std::map<PeerLinks::TokenId, RateBucket> group_dials_;  // forgotten once full again
    struct ServerDials {
        RateBucket budget;
        std::deque<const Channel *> waiting;  // first come, first served
    };
    std::map<std::string, ServerDials> server_dials_;  // by peer server, host:port
    std::list<std::unique_ptr<Channel>> channels_;
    std::atomic<bool> stopping_{false};
};

}  // namespace ggml_remote::host
