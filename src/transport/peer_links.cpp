#include "transport/peer_links.h"

#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <sys/socket.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <string>
#include <thread>

#include "protocol/printable.h"
#include "transport/socket.h"
#include "transport/tls_session.h"

namespace ggml_remote {

namespace {

constexpr const char *kIdLabel = "ggml-remote peer link id";
constexpr const char *kKeyLabel = "ggml-remote peer link key";
constexpr size_t kDigestBytes = 32;  // SHA-256
// Floats summed per pass: small enough for the stack, large enough to vectorize.
constexpr size_t kSumChunk = 2048;
// A partial up to this size (a token's, in generation) goes out in one record
// before this rank reads: the sockets' buffers hold it, so neither side's send
// waits for the other to read, and no thread is started for the step.
constexpr uint64_t kInlineBytes = 32 << 10;
// How long a rank looks for a peer's partial before it sleeps in the read: a peer
// a few microseconds behind is then answered without a wake-up on each side
// (PeerExchange spins as long).
constexpr auto kSpin = std::chrono::microseconds(30);

using Clock = std::chrono::steady_clock;

// HMAC-SHA-256 keyed by the token over `label`: the token itself never leaves us.
bool keyed_digest(const PeerLinks::Token &token, const char *label, uint8_t (&digest)[kDigestBytes]) {
    return gnutls_hmac_fast(GNUTLS_MAC_SHA256, token.data(), token.size(), label, std::strlen(label), digest) == 0;
}

// What is left of `deadline` for one wait; at least 1 ms, so a late wait still
// takes what already arrived instead of meaning "no limit".
int remaining_ms(Clock::time_point deadline) { return std::max(ms_until(deadline), 1); }

// What precedes each partial on a link.
struct MessageHeader {
    uint32_t step;
    uint32_t reserved;  // 0; not checked, so it may take a meaning later
    uint64_t bytes;
};
static_assert(sizeof(MessageHeader) == 16);

std::string peer_name(uint32_t rank) { return "peer rank " + std::to_string(rank); }

// `status` of a TLS call on the link to `rank`, with the rank and the step named.
Status about(uint32_t rank, uint32_t step, const Status &status) {
    return error(status.code(), peer_name(rank) + ", step " + std::to_string(step) + ": " + status.message());
}

}  // namespace

PeerLinks::PeerLinks() = default;
PeerLinks::~PeerLinks() = default;
PeerLinks::PeerLinks(PeerLinks &&) noexcept = default;
PeerLinks &PeerLinks::operator=(PeerLinks &&) noexcept = default;

PeerLinks::TokenId PeerLinks::token_id(const Token &token) {
    uint8_t digest[kDigestBytes] = {};
    TokenId id{};
    if (keyed_digest(token, kIdLabel, digest)) std::memcpy(id.data(), digest, id.size());
    return id;
}

PreSharedKey PeerLinks::tls_key(const Token &token) {
    uint8_t digest[kDigestBytes] = {};
    const TokenId id = token_id(token);
    PreSharedKey key;
    key.identity = hex_bytes(id.data(), id.size());
    // An empty key on failure: TLS then refuses it, and the open fails.
    if (keyed_digest(token, kKeyLabel, digest)) key.key.assign(digest, digest + kDigestBytes);
    ::explicit_bzero(digest, sizeof(digest));
    return key;
}

Status PeerLinks::open(const PeerExchange::Place &place, std::vector<UniqueFd> links, std::chrono::milliseconds timeout,
                       PeerLinks *links_out) {
    if (Status s = PeerExchange::check_place(place); !s) return s;
    if (links.size() != place.ranks) {
        return error(Code::bad_request, "a group of " + std::to_string(place.ranks) +
                                            " ranks needs as many links, not " + std::to_string(links.size()));
    }
    for (uint32_t rank = 0; rank < place.ranks; ++rank) {
        if (rank == place.rank && links[rank].valid()) {
            return error(Code::bad_request, "rank " + std::to_string(rank) + " (ours) was given a link to itself");
        }
        if (rank != place.rank && !links[rank].valid()) {
            return error(Code::bad_request, "no link to " + peer_name(rank));
        }
    }
    const auto deadline = Clock::now() + timeout;
    const PreSharedKey key = tls_key(place.token);
    PeerLinks group;
    group.place_ = place;
    group.links_.resize(place.ranks);
    // In rank order on every rank, each pair once: no two ranks wait for each other.
    for (uint32_t peer = 0; peer < place.ranks; ++peer) {
        if (peer == place.rank) continue;
        Link &link = group.links_[peer];
        link.fd = std::move(links[peer]);
        Status s = peer < place.rank ? TlsSession::connect(link.fd.get(), key, remaining_ms(deadline), &link.tls)
                                     : TlsSession::accept(link.fd.get(), {key}, remaining_ms(deadline), &link.tls);
        if (!s) return error(s.code(), "TLS with " + peer_name(peer) + ": " + s.message());
        if (Status named = group.exchange_ranks(peer, deadline); !named) return named;
    }
    *links_out = std::move(group);
    return Status::success();
}

// Each side names its rank first thing: a link the listener paired wrongly (or a
// peer that lies) is refused before it carries a partial.
Status PeerLinks::exchange_ranks(uint32_t peer, Clock::time_point deadline) {
    TlsSession &tls = *links_[peer].tls;
    const uint32_t ours = place_.rank;
    uint32_t named = 0;
    Status s = tls.write(&ours, sizeof(ours));
    if (s) {
        tls.set_read_timeout_ms(remaining_ms(deadline));
        s = tls.read(&named, sizeof(named));
    }
    if (!s) return error(s.code(), "naming ranks with " + peer_name(peer) + ": " + s.message());
    if (named != peer) {
        return error(Code::bad_request, "the link to " + peer_name(peer) + " leads to a peer that says it is rank " +
                                            std::to_string(named));
    }
    return Status::success();
}

Status PeerLinks::all_reduce_f32(float *values, size_t count, std::chrono::milliseconds timeout) {
    if (!broken_.ok()) return broken_;
    if (!is_open()) return error(Code::bad_request, "the group's links are not open");
    const uint64_t bytes = uint64_t{count} * sizeof(float);
    if (bytes > place_.slot_bytes) {
        return error(Code::bad_request, "an all-reduce of " + std::to_string(bytes) +
                                            " bytes exceeds the group's slot of " + std::to_string(place_.slot_bytes));
    }
    if (step_ == UINT32_MAX) return fail(error(Code::limit_exceeded, "the group ran out of steps; join a new one"));
    const uint32_t step = ++step_;
    const auto deadline = Clock::now() + timeout;
    const int timeout_ms = static_cast<int>(std::clamp<int64_t>(timeout.count(), 1, INT_MAX));
    for (uint32_t peer = 0; peer < place_.ranks && timeout_ms != write_timeout_ms_; ++peer) {
        if (peer == place_.rank) continue;
        if (Status s = links_[peer].tls->set_write_timeout_ms(timeout_ms); !s) return fail(s);
    }
    write_timeout_ms_ = timeout_ms;  // a socket option: set when it changes, not each step
    received_.resize(size_t{place_.ranks} * count);

    if (bytes <= kInlineBytes) {
        if (Status s = send_all(step, values, count); !s) return fail(s);
        if (Status s = receive_all(step, count, deadline); !s) return fail(s);
        sum_in_rank_order(values, count);
        return Status::success();
    }
    // Sends and receives at once: with both directions full, neither would drain.
    Status sent;
    std::thread sender([&] { sent = send_all(step, values, count); });
    Status received = receive_all(step, count, deadline);
    if (!received) shut_down_links();  // the sender may wait on a peer that reads no more
    sender.join();
    if (!received) return fail(received);
    if (!sent) return fail(sent);
    sum_in_rank_order(values, count);
    return Status::success();
}

Status PeerLinks::send_all(uint32_t step, const float *values, size_t count) {
    const MessageHeader header{step, 0, uint64_t{count} * sizeof(float)};
    // A small partial goes with its header in one record: one send, one packet.
    const bool together = header.bytes <= kInlineBytes;
    if (together) {
        outgoing_.resize(sizeof(header) + header.bytes);
        std::memcpy(outgoing_.data(), &header, sizeof(header));
        std::memcpy(outgoing_.data() + sizeof(header), values, header.bytes);
    }
    for (uint32_t peer = 0; peer < place_.ranks; ++peer) {
        if (peer == place_.rank) continue;
        TlsSession &tls = *links_[peer].tls;
        Status s;
        if (together) {
            s = tls.write(outgoing_.data(), outgoing_.size());
        } else {
            s = tls.write(&header, sizeof(header));
            if (s) s = tls.write(values, header.bytes);
        }
        if (!s) return about(peer, step, s);
    }
    return Status::success();
}

Status PeerLinks::receive_all(uint32_t step, size_t count, Clock::time_point deadline) {
    for (uint32_t peer = 0; peer < place_.ranks; ++peer) {
        if (peer == place_.rank) continue;
        if (Status s = receive_from(peer, step, count, deadline); !s) return s;
    }
    return Status::success();
}

Status PeerLinks::receive_from(uint32_t peer, uint32_t step, size_t count, Clock::time_point deadline) {
    TlsSession &tls = *links_[peer].tls;
    const uint64_t bytes = uint64_t{count} * sizeof(float);
    MessageHeader header{};
    const auto spin_until = Clock::now() + kSpin;
    while (!tls.readable_now() && Clock::now() < spin_until) {
    }
    tls.set_read_timeout_ms(remaining_ms(deadline));
    if (Status s = tls.read(&header, sizeof(header)); !s) return about(peer, step, s);
    if (header.step != step) {
        return error(Code::bad_request, peer_name(peer) + " sent step " + std::to_string(header.step) + " where " +
                                            std::to_string(step) + " was due");
    }
    if (header.bytes != bytes) {
        return error(Code::bad_request, peer_name(peer) + " sent " + std::to_string(header.bytes) + " bytes where " +
                                            std::to_string(bytes) + " were due");
    }
    tls.set_read_timeout_ms(remaining_ms(deadline));
    if (Status s = tls.read(received_.data() + size_t{peer} * count, bytes); !s) return about(peer, step, s);
    return Status::success();
}

// The same additions in the same order on every rank, so the same bits. Ours are
// still in `values`, which is written chunk by chunk only after that chunk is summed.
void PeerLinks::sum_in_rank_order(float *values, size_t count) const {
    std::array<const float *, PeerExchange::kMaxRanks> partials{};
    for (uint32_t rank = 0; rank < place_.ranks; ++rank) {
        partials[rank] = rank == place_.rank ? values : received_.data() + size_t{rank} * count;
    }
    float sum[kSumChunk];
    for (size_t start = 0; start < count; start += kSumChunk) {
        const size_t n = std::min(kSumChunk, count - start);
        std::memcpy(sum, partials[0] + start, n * sizeof(float));
        for (uint32_t rank = 1; rank < place_.ranks; ++rank) {
            const float *partial = partials[rank] + start;
            for (size_t i = 0; i < n; ++i) sum[i] += partial[i];
        }
        std::memcpy(values + start, sum, n * sizeof(float));
    }
}

void PeerLinks::shut_down_links() {
    for (Link &link : links_) {
        if (link.fd.valid()) (void)::shutdown(link.fd.get(), SHUT_RDWR);
    }
}

// The group is broken for good: its peers learn it at once from the closed links.
Status PeerLinks::fail(Status status) {
    if (broken_.ok()) broken_ = std::move(status);
    shut_down_links();
    return broken_;
}

}  // namespace ggml_remote
