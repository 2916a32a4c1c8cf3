// Peers of another protocol, told from their first bytes (protocol/foreign_peers.h).
#include "protocol/foreign_peers.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "protocol/commands.h"

namespace ggml_remote::protocol {
namespace {

FrameHeader first_bytes(const std::vector<uint8_t> &bytes) {
    FrameHeader header;
    std::vector<uint8_t> padded(bytes);
    padded.resize(sizeof(header), 0xAA);
    std::memcpy(&header, padded.data(), sizeof(header));
    return header;
}

TEST(ForeignPeers, ATlsClientHelloIsATlsClient) {
    // A record of type handshake, TLS 1.0 on the record (as TLS 1.3 clients send
    // it), 0x0200 bytes, then ClientHello (1).
    EXPECT_EQ(recognise_foreign_peer(first_bytes({0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03})),
              ForeignPeer::tls_client);
    EXPECT_NE(describe_foreign_peer(ForeignPeer::tls_client).find("--tls-psk"), std::string::npos);
}

TEST(ForeignPeers, AGgmlRpcHelloIsAGgmlRpcClient) {
    // RPC_CMD_HELLO (14), then its request's size as 8 little-endian bytes.
    EXPECT_EQ(recognise_foreign_peer(first_bytes({14, 24, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0})),
              ForeignPeer::ggml_rpc_client);
    EXPECT_EQ(recognise_foreign_peer(first_bytes({14, 0, 0, 0, 0, 0, 0, 0, 0})), ForeignPeer::ggml_rpc_client);
    EXPECT_EQ(recognise_foreign_peer(first_bytes({14, 0, 0, 0, 0, 0, 0, 1, 0})), ForeignPeer::none)
        << "a size no hello has";
    EXPECT_NE(describe_foreign_peer(ForeignPeer::ggml_rpc_client).find("ggml-rpc"), std::string::npos);
}

TEST(ForeignPeers, OurOwnHelloIsNoForeignPeer) {
    FrameHeader hello{static_cast<uint16_t>(CommandId::hello), 0, 0, sizeof(Hello::Request)};
    EXPECT_EQ(recognise_foreign_peer(hello), ForeignPeer::none);
    EXPECT_EQ(recognise_foreign_peer(first_bytes({'G', 'E', 'T', ' ', '/'})), ForeignPeer::none);
    EXPECT_TRUE(describe_foreign_peer(ForeignPeer::none).empty());
}

}  // namespace
}  // namespace ggml_remote::protocol
