// Helpers shared by the tensor-parallel tests (PeerExchange, PeerLinks).
#pragma once

#include <cstdint>

#include "transport/peer_exchange.h"

namespace ggml_remote::test_support {

// Rank `rank` of a group of `ranks` with steps of up to `slot_bytes`, its token
// all `token_byte` (another byte: another group).
inline PeerExchange::Place group_place(uint32_t rank, uint32_t ranks, uint64_t slot_bytes, uint8_t token_byte) {
    PeerExchange::Place place;
    place.rank = rank;
    place.ranks = ranks;
    place.slot_bytes = slot_bytes;
    place.token.fill(token_byte);
    return place;
}

}  // namespace ggml_remote::test_support
