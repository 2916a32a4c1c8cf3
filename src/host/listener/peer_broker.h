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
// Each worker's channel is served on a thread of its own; a take waits there.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "host/common/peer_channel.h"
#include "protocol/status.h"
#include "transport/endpoint.h"
#include "transport/peer_links.h"
#include "transport/unique_fd.h"

namespace ggml_remote::host {

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
    Status answer(const Channel &channel, const peer_channel::Request &request, std::vector<UniqueFd> &fds,
                  UniqueFd *connection);
    Status enrol(const Channel &channel, const peer_channel::Request &request);
    Status leave(const Channel &channel, const peer_channel::Request &request);
    Status dial(const peer_channel::Request &request, UniqueFd *connection) const;
    Status take(const Channel &channel, const peer_channel::Request &request, UniqueFd *connection);
    Status offer(const peer_channel::Request &request, std::vector<UniqueFd> &fds);
    void forget_groups_of(const Channel &channel);
    void forget_ended_channels();

    std::vector<Endpoint> peers_;
    std::mutex mutex_;
    std::condition_variable arrivals_;
    std::map<PeerLinks::TokenId, Group> groups_;
    std::list<std::unique_ptr<Channel>> channels_;
    std::atomic<bool> stopping_{false};
};

}  // namespace ggml_remote::host
