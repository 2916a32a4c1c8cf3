#include "host/listener/start_budget.h"

#include <algorithm>

namespace ggml_remote::host {

namespace {

RateBucket bucket(int per_second, RateBucket::Clock::time_point now) {
    return RateBucket(static_cast<double>(per_second) * kStartBurstSeconds, per_second, now);
}

}  // namespace

StartBudget::StartBudget(const StartLimits &limits, Clock::time_point now)
    : limits_(limits), server_(bucket(limits.per_second, now)) {}

StartBudget::Verdict StartBudget::spend(const std::string &peer_key, Clock::time_point now) {
    RateBucket *peer = bucket_of(peer_key, now);
    if (peer != nullptr && !peer->can_spend(now)) return Verdict::peer_over;
    if (peer == nullptr || !server_.can_spend(now)) return Verdict::server_over;
    peer->spend(now);
    server_.spend(now);
    return Verdict::start;
}

// The peer's bucket, made full for a peer not seen lately; null when too many
// peers are tracked already (the caller refuses as the server's budget).
RateBucket *StartBudget::bucket_of(const std::string &peer_key, Clock::time_point now) {
    auto it = peers_.find(peer_key);
    if (it != peers_.end()) return &it->second;
    if (peers_.size() >= kMaxTrackedPeers) forget_quiet_peers(now);
    if (peers_.size() >= kMaxTrackedPeers) return nullptr;
    return &peers_.emplace(peer_key, bucket(limits_.per_peer_per_second, now)).first->second;
}

void StartBudget::forget_quiet_peers(Clock::time_point now) {
    for (auto it = peers_.begin(); it != peers_.end();) {
        it = it->second.full(now) ? peers_.erase(it) : std::next(it);
    }
}

bool RefusalLog::should_log(const std::string &peer_key, Clock::time_point now, uint64_t *unlogged) {
    auto found = peers_.find(peer_key);
    if (found == peers_.end()) {
        if (peers_.size() >= kMaxTrackedPeers) {
            for (auto it = peers_.begin(); it != peers_.end();) {
                it = it->second.lines.full(now) ? peers_.erase(it) : std::next(it);
            }
        }
        if (peers_.size() >= kMaxTrackedPeers) return false;  // logged again once the table drains
        found = peers_.emplace(peer_key, Peer{RateBucket(kRefusalLinesBurst, kRefusalLinesPerSecond, now), 0}).first;
    }
    Peer &peer = found->second;
    if (!peer.lines.spend(now)) {
        ++peer.unlogged;
        return false;
    }
    *unlogged = peer.unlogged;
    peer.unlogged = 0;
    return true;
}

}  // namespace ggml_remote::host
