// The peer channel: how a session worker asks the listener's peer broker
// (services/peer_broker.h) for the TCP connections of a tensor-parallel group
// whose servers are on other machines (transport/peer_links.h). A worker may
// open no socket (its sandbox); the listener dials and accepts for it. One
// SOCK_SEQPACKET socket pair per worker, made at spawn; one fixed-size message
// each way per request, descriptors passed with SCM_RIGHTS.
//
//   enrol  token id, rank, ranks        the session takes part in that group as
//                                        `rank`; the higher ranks will dial it
//   dial   token id, rank, to_rank,     -> a connection to `endpoint`, which must be
//          endpoint                        one of the server's --tensor-peer, with the
//                                          peer hello sent on it
//   take   token id, from_rank,         -> the connection rank `from_rank` of an enrolled
//          timeout                         group dialled in, once it came
//   leave  token id                     the session left that group
//   offer  token id, from_rank,         a connection that came with a peer hello, from
//          to_rank, the connection         the worker that accepted it (and then ends)
//
// The listener treats every message as coming from a process a guest may have
// taken over: an offer reaches only a group some session enrolled, for a rank
// it awaits, once; a take only the channel that enrolled it.
#pragma once

#include <cstdint>

#include "protocol/commands.h"
#include "protocol/status.h"
#include "transport/unique_fd.h"

namespace ggml_remote::host::peer_channel {

enum class Kind : uint32_t { enrol = 1, dial = 2, take = 3, offer = 4, leave = 5 };

// Groups one worker may enrol at once (the session's own limit is lower).
constexpr uint32_t kMaxEnrolled = 8;
// How long the listener may take to connect to a peer server.
constexpr int kDialTimeoutMs = 5000;
// The longest wait a take may ask for: a step's longest wait.
constexpr uint32_t kMaxTakeMs = protocol::kMaxPeerWaitMs;

struct Request {
    uint32_t kind = 0;
    uint32_t rank = 0;        // enrol, dial: the asking session's; offer: the rank dialled
    uint32_t ranks = 0;       // enrol
    uint32_t other_rank = 0;  // dial: the rank dialled; take, offer: the rank that dialled
    uint32_t timeout_ms = 0;  // take
    uint32_t unused = 0;
    uint8_t token_id[16] = {};
    char endpoint[protocol::kMaxPeerEndpointBytes + 1] = {};  // dial: NUL-terminated
};

struct Reply {
    int32_t code = 0;  // protocol Code: 0 success; dial and take carry the connection
    uint32_t unused = 0;
    char message[200] = {};
};

// A worker's request and the broker's answer within `timeout_ms`, with
// `connection_to_send` (an offer's; -1: none) and the connection a dial or a take
// answers with in *connection (null: none expected). The answer's error, as the
// broker gave it.
Status ask(int channel, const Request &request, int connection_to_send, int timeout_ms, UniqueFd *connection);

}  // namespace ggml_remote::host::peer_channel
