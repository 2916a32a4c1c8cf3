#include "protocol/foreign_peers.h"

#include <cstdint>
#include <cstring>

namespace ggml_remote::protocol {

namespace {

constexpr uint8_t kTlsHandshakeRecord = 0x16;
constexpr uint8_t kTlsMajorVersion = 0x03;
// ggml-rpc: a request is one command byte, a 64-bit size, then that many bytes;
// every client opens with RPC_CMD_HELLO, whose request is short.
constexpr uint8_t kRpcHelloCommand = 14;
constexpr uint64_t kRpcHelloMaxBytes = 256;

}  // namespace

ForeignPeer recognise_foreign_peer(const FrameHeader &first) {
    uint8_t bytes[sizeof(FrameHeader)];
    std::memcpy(bytes, &first, sizeof(bytes));
    // A TLS record: content type 22 (handshake), then version 3.x (SSL 3 to TLS 1.3).
    if (bytes[0] == kTlsHandshakeRecord && bytes[1] == kTlsMajorVersion && bytes[2] <= 0x04) {
        return ForeignPeer::tls_client;
    }
    uint64_t rpc_size = 0;
    std::memcpy(&rpc_size, bytes + 1, sizeof(rpc_size));  // little-endian, as ggml-rpc writes it
    if (bytes[0] == kRpcHelloCommand && rpc_size <= kRpcHelloMaxBytes) return ForeignPeer::ggml_rpc_client;
    return ForeignPeer::none;
}

std::string describe_foreign_peer(ForeignPeer peer) {
    switch (peer) {
        case ForeignPeer::tls_client:
            return "a TLS client on a plain endpoint (it sent a TLS ClientHello): this endpoint speaks plain "
                   "TCP; start the server with --tls-psk FILE to serve tls:// guests, or connect with tcp://";
        case ForeignPeer::ggml_rpc_client:
            return "a ggml-rpc client (llama.cpp --rpc): this is ggml-remote-server, which serves the "
                   "libggml-remote.so plugin (GGML_BACKEND_PATH, GGML_REMOTE_SERVERS=tcp://host:port), "
                   "not ggml-rpc's protocol";
        case ForeignPeer::none:
            break;
    }
    return std::string();
}

}  // namespace ggml_remote::protocol
