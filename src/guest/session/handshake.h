// The handshake: the hello a new connection starts with, what the guest asks the
// server for and what it grants, and the stream's settings for the calls after it.
#pragma once

#include <cstdint>
#include <string>

#include "guest/guest_options.h"
#include "transport/connection.h"

namespace ggml_remote::guest {

// What the guest asks for; asked again, the same, on every new connection.
struct HandshakeAsk {
    bool shared_memory = false;  // shared buffers (shm: endpoints)
    bool region_heap = false;    // buffers in an ivshmem region's heap
    bool peer_exchange = false;  // tensor-parallel groups (unix sockets: descriptors pass)
    bool peer_links = false;     // tensor-parallel groups across machines (tcp://, tls://)
};

// What the server granted.
struct SessionTerms {
    uint32_t device_count = 0;
    bool shared_memory = false;
    bool weight_store = false;   // the server keeps a weight store for this session
    bool model_library = false;  // and published models: worth asking for any weight
    bool region_heap = false;
    bool peer_exchange = false;  // the session may join tensor-parallel groups (CommJoin)
    bool peer_links = false;     // and groups across machines (CommJoinLinks)
    bool keeps_alive = false;    // the server's keep-alives: a silence of seconds loses it
};

// The hello exchange on a new `stream`, within options.connect_timeout_ms (a peer
// that accepts and never answers must not hang the application at start-up);
// then sets the stream up for calls. `name` names the server in messages.
Status handshake(FramedStream &stream, const std::string &name, const GuestOptions &options, const HandshakeAsk &ask,
                 SessionTerms *terms);

}  // namespace ggml_remote::guest
