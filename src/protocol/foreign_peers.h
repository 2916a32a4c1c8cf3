// Peers that speak another protocol on our port: recognised from the first bytes
// they send, so that the server's log says in words what connected (a TLS client
// on a plain endpoint, a ggml-rpc client), instead of "a message of 1395157...
// bytes" or "unknown command 6158".
#pragma once

#include <string>

#include "protocol/wire.h"

namespace ggml_remote::protocol {

enum class ForeignPeer { none, tls_client, ggml_rpc_client };

// What the first 16 bytes a peer sent (read as our frame header) show it to be.
ForeignPeer recognise_foreign_peer(const FrameHeader &first);
// The server's log line for it, with what the operator can do; empty for none.
std::string describe_foreign_peer(ForeignPeer peer);

}  // namespace ggml_remote::protocol
