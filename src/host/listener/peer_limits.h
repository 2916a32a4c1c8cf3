// Fairness between peers (--max-sessions-per-peer): one user on the unix socket,
// or one address on TCP, cannot take every session of the server.
#pragma once

#include <sys/types.h>

#include <map>
#include <string>

#include "host/listener/listener_options.h"
#include "transport/peer_account.h"

namespace ggml_remote::host {

// The cap of --max-sessions-per-peer, or by default a quarter of --max-sessions
// (16 of the default 64) and at least 1: one peer can never fill a server that
// has room for more than one guest.
int sessions_per_peer(const ListenerOptions &options);

// Counts the sessions each peer holds, by the worker that serves them.
class PeerLimits {
  public:
    // Each peer may hold `max_per_peer` sessions, but for unix peers that run as
    // root or as `server_uid`: they can stop or trace the server anyway.
    PeerLimits(int max_per_peer, uid_t server_uid);

    // Empty when `peer` may open one more session; else why not, for the guest and the log.
    std::string refusal(const PeerAccount &peer) const;
    // A session of `peer`, served by `worker`, started.
    void opened(pid_t worker, const PeerAccount &peer);
    // `worker`'s session ended; a worker that was never opened changes nothing.
    void closed(pid_t worker);
    // Whether `peer` is a unix peer that runs as root or as the server's user: no
    // limit of the listener's applies to it (it can stop or trace the server anyway).
    bool unlimited(const PeerAccount &peer) const;
    // How many sessions the peer counted under `key` holds.
    int sessions(const std::string &key) const;
    // The key of the peer whose session `worker` serves ("" for none): its tenant in /metrics.
    std::string account_of(pid_t worker) const;

  private:
    int max_per_peer_;
    uid_t server_uid_;
    std::map<std::string, int> sessions_;    // by PeerAccount::key
    std::map<pid_t, std::string> accounts_;  // worker -> its peer's key
};

}  // namespace ggml_remote::host
