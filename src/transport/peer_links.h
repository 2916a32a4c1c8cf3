// PeerLinks: how the servers of one guest's tensor-parallel group on different
// machines sum their partial results (ggml's comm all-reduce, llama.cpp's
// -sm tensor), server to server over TCP, with no bytes through the guest.
// PeerExchange (peer_exchange.h) does the same through memory on one machine.
//
// The guest gives each server the same random group token over its own
// session. Each pair of servers shares one TCP connection that the listeners
// made (services/peer_broker.h); over it runs TLS 1.3 with a key derived from
// the token, so only servers the guest told the token reach each other, and
// nothing on the path reads or changes a partial.
//
// Each all-reduce is a step: every rank sends its partial to every other rank,
// receives theirs, and adds all of them in rank order, so every rank holds bit
// for bit the same sum. A message is {step, bytes} then the bytes; both must be
// what this rank expects from its own count (sizes come from our side, never
// from the peer). Everything a peer sends is hostile input: a wrong step or
// size, a TLS failure, silence past the timeout or a closed connection fails
// the step, and every later step at once with the same reason.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "protocol/status.h"
#include "transport/peer_exchange.h"
#include "transport/tls_key.h"
#include "transport/unique_fd.h"

namespace ggml_remote {

class TlsSession;

class PeerLinks {
  public:
    using Token = PeerExchange::Token;
    // What a listener may see of a group: names the group's connections, and
    // gives away neither the token nor the key.
    using TokenId = std::array<uint8_t, 16>;

    // The first bytes on a new connection between servers, before TLS: how the
    // accepting server tells a peer link from a guest (whose first byte is never
    // kHelloMagic[0]) and finds the session it belongs to.
    static constexpr std::array<uint8_t, 8> kHelloMagic = {0xC7, 'G', 'R', 'P', 'E', 'E', 'R', '1'};
    struct Hello {
        uint8_t magic[8];
        uint8_t token_id[16];
        uint32_t from_rank;
        uint32_t to_rank;
    };
    static_assert(sizeof(Hello) == 32);

    PeerLinks();
    ~PeerLinks();
    PeerLinks(PeerLinks &&) noexcept;
    PeerLinks &operator=(PeerLinks &&) noexcept;

    // HMAC-SHA-256 of the token under a fixed label, cut to 16 bytes.
    static TokenId token_id(const Token &token);
    // The TLS key of the group's links: HMAC-SHA-256 of the token under another
    // label, with the hex of token_id as its identity. Public for tests that play
    // a peer; it wipes itself.
    static PreSharedKey tls_key(const Token &token);

    // Starts the group for `place` (checked with PeerExchange::check_place) with
    // `links[r]`, a connected socket to rank r, for every rank but ours (ours
    // empty). Does the TLS handshakes, within `timeout`: with each lower rank as
    // the client, with each higher one as the server, in rank order (one order
    // for every pair, so no two ranks wait for each other). A handshake that
    // fails, or a peer that names another rank first thing, fails the open.
    static Status open(const PeerExchange::Place &place, std::vector<UniqueFd> links, std::chrono::milliseconds timeout,
                       PeerLinks *links_out);

    // Sums `count` floats at `values` with the same of every other rank, in rank
    // order, waiting for each at most `timeout`. A failure breaks the group for
    // good. Sends while it receives: large partials never fill both directions.
    Status all_reduce_f32(float *values, size_t count, std::chrono::milliseconds timeout);

    bool is_open() const { return !links_.empty(); }
    const PeerExchange::Place &place() const { return place_; }
    uint32_t steps() const { return step_; }

  private:
    struct Link {
        UniqueFd fd;
        std::unique_ptr<TlsSession> tls;
    };
    Status exchange_ranks(uint32_t peer, std::chrono::steady_clock::time_point deadline);
    // Sends our partial to every peer in rank order (the step's sending thread).
    Status send_all(uint32_t step, const float *values, size_t count);
    // Receives every peer's partial of `step` into received_, in rank order.
    Status receive_all(uint32_t step, size_t count, std::chrono::steady_clock::time_point deadline);
    Status receive_from(uint32_t peer, uint32_t step, size_t count, std::chrono::steady_clock::time_point deadline);
    void sum_in_rank_order(float *values, size_t count) const;
    // Ends every connection, so a sending thread blocked on one returns at once.
    void shut_down_links();
    Status fail(Status status);

    PeerExchange::Place place_;
    std::vector<Link> links_;  // by rank; ours has no session
    std::vector<float> received_;
    std::vector<uint8_t> outgoing_;  // a small partial with its header
    int write_timeout_ms_ = -1;
    uint32_t step_ = 0;
    Status broken_;
};

}  // namespace ggml_remote
