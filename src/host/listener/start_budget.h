// StartBudget: how many worker programs the listener starts, per peer and in all,
// over time. Every connection costs a fork and an exec before a worker can check
// anything, so a peer that connects in a loop is refused at accept, for the price
// of an accept, once it spent its budget (docs/SECURITY.md, "Floods"). A peer that
// runs as root or as the server's user is not counted: it can stop the server anyway.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "host/common/rate_bucket.h"

namespace ggml_remote::host {

// A budget holds this many seconds' worth of starts: a quiet peer may start a
// burst of sessions at once (llama-server's slots, a test suite).
constexpr int kStartBurstSeconds = 4;
// Peers whose budgets are tracked at once; more (an IPv6 flood from many /64s)
// share the server's budget only, which then refuses them.
constexpr size_t kMaxTrackedPeers = 4096;

struct StartLimits {
    int per_peer_per_second = 8;  // --max-starts-per-peer
    int per_second = 32;          // --max-starts: all peers together
};

class StartBudget {
  public:
    using Clock = RateBucket::Clock;
    enum class Verdict { start, peer_over, server_over };

    StartBudget(const StartLimits &limits, Clock::time_point now);

    // Whether one more worker may start now for the peer counted under `peer_key`;
    // when it may, the start is spent from the peer's budget and the server's.
    Verdict spend(const std::string &peer_key, Clock::time_point now);
    size_t tracked_peers() const { return peers_.size(); }

  private:
    RateBucket *bucket_of(const std::string &peer_key, Clock::time_point now);
    void forget_quiet_peers(Clock::time_point now);

    StartLimits limits_;
    RateBucket server_;
    std::map<std::string, RateBucket> peers_;
};

// Log lines for one peer's refusals: a few at once, then one a second; a flood of
// refused connections must not become a flood of log lines. The line that is
// logged says how many went unlogged since the last.
constexpr double kRefusalLinesBurst = 5;
constexpr double kRefusalLinesPerSecond = 1;

class RefusalLog {
  public:
    using Clock = RateBucket::Clock;
    // Whether to log a refusal of `peer_key` now; *unlogged: refusals not logged since.
    bool should_log(const std::string &peer_key, Clock::time_point now, uint64_t *unlogged);

  private:
    struct Peer {
        RateBucket lines;
        uint64_t unlogged = 0;
    };
    std::map<std::string, Peer> peers_;
};

}  // namespace ggml_remote::host
