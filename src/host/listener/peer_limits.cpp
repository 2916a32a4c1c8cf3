#include "host/listener/peer_limits.h"

#include <algorithm>

namespace ggml_remote::host {

int sessions_per_peer(const ListenerOptions &options) {
    if (options.max_sessions_per_peer > 0) return options.max_sessions_per_peer;
    return std::max(1, options.max_sessions / 4);
}

PeerLimits::PeerLimits(int max_per_peer, uid_t server_uid) : max_per_peer_(max_per_peer), server_uid_(server_uid) {}

bool PeerLimits::unlimited(const PeerAccount &peer) const {
    return peer.kind == PeerAccount::Kind::user && (peer.uid == 0 || peer.uid == server_uid_);
}

std::string PeerLimits::refusal(const PeerAccount &peer) const {
    const int held = sessions(peer.key);
    if (held < max_per_peer_ || unlimited(peer)) return "";
    return peer.key + " holds " + std::to_string(held) + " sessions, the most one peer may (--max-sessions-per-peer " +
           std::to_string(max_per_peer_) + ")";
}

void PeerLimits::opened(pid_t worker, const PeerAccount &peer) {
    ++sessions_[peer.key];
    accounts_[worker] = peer.key;
}

void PeerLimits::closed(pid_t worker) {
    const auto account = accounts_.find(worker);
    if (account == accounts_.end()) return;
    const auto count = sessions_.find(account->second);
    if (count != sessions_.end() && --count->second <= 0) sessions_.erase(count);
    accounts_.erase(account);
}

int PeerLimits::sessions(const std::string &key) const {
    const auto found = sessions_.find(key);
    return found == sessions_.end() ? 0 : found->second;
}

std::string PeerLimits::account_of(pid_t worker) const {
    const auto it = accounts_.find(worker);
    return it == accounts_.end() ? std::string() : it->second;
}

}  // namespace ggml_remote::host
