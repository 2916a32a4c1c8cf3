// FramedStream over TLS with a pre-shared key: a guest and a host on a socket pair.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "transport/connection.h"
#include "transport/tls_session.h"

namespace ggml_remote {
namespace {

using protocol::ByteView;
using protocol::FrameHeader;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr int kTimeoutMs = 5000;

PreSharedKey key(const std::string &identity, uint8_t fill) {
    return PreSharedKey{identity, std::vector<uint8_t>(32, fill)};
}

// Both ends of a socket pair after the TLS handshake (each side in its own thread,
// as guest and worker would run it), or the two outcomes when it fails.
struct TlsPair {
    TlsPair(const PreSharedKey &guest_key, const std::vector<PreSharedKey> &host_keys) {
        int fds[2] = {-1, -1};
        EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
        guest = FramedStream(UniqueFd(fds[0]), "host-peer");
        host = FramedStream(UniqueFd(fds[1]), "guest-peer");
        auto accepted = std::async(std::launch::async, [&] {
            std::unique_ptr<TlsSession> tls;
            Status status = TlsSession::accept(host.fd(), host_keys, kTimeoutMs, &tls);
            if (status) host.start_tls(std::move(tls));
            return status;
        });
        std::unique_ptr<TlsSession> tls;
        guest_status = TlsSession::connect(guest.fd(), guest_key, kTimeoutMs, &tls);
        if (guest_status)
            guest.start_tls(std::move(tls));
        else
            guest.close();  // as the guest does: the host then sees the end
        host_status = accepted.get();
    }
    FramedStream guest, host;
    Status guest_status, host_status;
};

ByteView text(const std::string &s) { return ByteView(s.data(), s.size()); }

std::vector<uint8_t> pattern(size_t size, uint32_t seed) {
    std::vector<uint8_t> bytes(size);
    uint32_t x = seed;
    for (uint8_t &b : bytes) {
        x = x * 1664525u + 1013904223u;
        b = static_cast<uint8_t>(x >> 24);
    }
    return bytes;
}

// Receives one frame: its header and payload.
std::vector<uint8_t> receive_frame(FramedStream &stream, FrameHeader *header) {
    Status status = stream.receive_header(header, ~0ull);
    EXPECT_TRUE(status.ok()) << status.message();
    std::vector<uint8_t> payload(status ? header->payload_size : 0);
    status = stream.receive(payload.data(), payload.size());
    EXPECT_TRUE(status.ok()) << status.message();
    return payload;
}

TEST(TlsStream, RightKeyCarriesFramesBothWays) {
    TlsPair pair(key("guest", 7), {key("guest", 7)});
    ASSERT_TRUE(pair.guest_status.ok()) << pair.guest_status.message();
    ASSERT_TRUE(pair.host_status.ok()) << pair.host_status.message();

    FrameHeader header;
    header.command = 5;
    const std::string first = "request", second = " tail";
    ASSERT_TRUE(pair.guest.send(header, {text(first), ByteView(), text(second)}).ok());
    FrameHeader received;
    std::vector<uint8_t> payload = receive_frame(pair.host, &received);
    EXPECT_EQ(received.command, 5);
    EXPECT_EQ(std::string(payload.begin(), payload.end()), "request tail");

    header.flags = protocol::kFrameReply;
    const std::string answer = "reply";
    ASSERT_TRUE(pair.host.send(header, {text(answer)}).ok());
    payload = receive_frame(pair.guest, &received);
    EXPECT_EQ(received.flags, protocol::kFrameReply);
    EXPECT_EQ(std::string(payload.begin(), payload.end()), "reply");
}

TEST(TlsStream, LargePayloadsArriveIntactInBothDirections) {
    TlsPair pair(key("guest", 1), {key("guest", 1)});
    ASSERT_TRUE(pair.guest_status.ok()) << pair.guest_status.message();
    // Sizes around TLS's 16 KiB record limit, and one far past the socket's buffer.
    for (size_t size : {size_t(16383), size_t(16384), size_t(16385), size_t(100000), size_t(16u << 20)}) {
        const std::vector<uint8_t> up = pattern(size, 1), down = pattern(size + 3, 2);
        FrameHeader header;
        header.command = 9;
        auto sent = std::async(std::launch::async, [&] {
            return pair.guest.send(header, {ByteView(up.data(), 10), ByteView(up.data() + 10, up.size() - 10)});
        });
        FrameHeader received;
        EXPECT_EQ(receive_frame(pair.host, &received), up) << size;
        ASSERT_TRUE(sent.get().ok());
        auto answered = std::async(std::launch::async, [&] { return pair.host.send(header, {ByteView(down)}); });
        EXPECT_EQ(receive_frame(pair.guest, &received), down) << size;
        ASSERT_TRUE(answered.get().ok());
    }
}

TEST(TlsStream, BatchedFramesArriveAsSeparateFrames) {
    TlsPair pair(key("guest", 3), {key("guest", 3)});
    ASSERT_TRUE(pair.guest_status.ok()) << pair.guest_status.message();
    std::vector<uint8_t> batch;
    for (uint16_t i = 1; i <= 100; ++i) {
        FrameHeader header;
        header.command = i;
        header.payload_size = i;
        const auto *raw = reinterpret_cast<const uint8_t *>(&header);
        batch.insert(batch.end(), raw, raw + sizeof(header));
        batch.insert(batch.end(), i, static_cast<uint8_t>(i));
    }
    ASSERT_TRUE(pair.guest.send_frames(ByteView(batch)).ok());
    for (uint16_t i = 1; i <= 100; ++i) {
        FrameHeader received;
        EXPECT_EQ(receive_frame(pair.host, &received), std::vector<uint8_t>(i, static_cast<uint8_t>(i)));
        EXPECT_EQ(received.command, i);
    }
}

TEST(TlsStream, KeyExchangeIsForwardSecret) {
    TlsPair pair(key("guest", 4), {key("guest", 4)});
    ASSERT_TRUE(pair.guest_status.ok()) << pair.guest_status.message();
    EXPECT_TRUE(pair.guest.tls()->forward_secret()) << pair.guest.tls()->description();
    EXPECT_TRUE(pair.host.tls()->forward_secret());
    EXPECT_THAT(pair.host.tls()->description(), HasSubstr("TLS1.3"));
    EXPECT_EQ(pair.host.tls()->peer_identity(), "guest");
}

TEST(TlsStream, WrongKeyFailsOnBothSidesWithAClearReason) {
    TlsPair pair(key("guest", 1), {key("guest", 2)});
    ASSERT_FALSE(pair.guest_status.ok());
    ASSERT_FALSE(pair.host_status.ok());
    EXPECT_THAT(pair.guest_status.message(), HasSubstr("wrong pre-shared key for identity 'guest'"));
    EXPECT_THAT(pair.host_status.message(), HasSubstr("wrong pre-shared key for identity 'guest'"));
    EXPECT_EQ(pair.host.tls(), nullptr);
}

TEST(TlsStream, UnknownIdentityIsRefused) {
    TlsPair pair(key("mallory", 1), {key("alice", 1), key("bob", 1)});
    ASSERT_FALSE(pair.guest_status.ok());
    ASSERT_FALSE(pair.host_status.ok());
    EXPECT_THAT(pair.guest_status.message(), HasSubstr("unknown identity 'mallory' (not in the server's key file)"));
    EXPECT_THAT(pair.host_status.message(), HasSubstr("unknown identity 'mallory'"));
}

TEST(TlsStream, EachIdentityNeedsItsOwnKey) {
    TlsPair bob(key("bob", 2), {key("alice", 1), key("bob", 2)});
    EXPECT_TRUE(bob.guest_status.ok()) << bob.guest_status.message();
    EXPECT_EQ(bob.host.tls()->peer_identity(), "bob");
    TlsPair bob_with_alices_key(key("bob", 1), {key("alice", 1), key("bob", 2)});
    EXPECT_FALSE(bob_with_alices_key.guest_status.ok());
}

TEST(TlsStream, BareServerKeyAdmitsAnyIdentityThatHoldsIt) {
    TlsPair named(key("anyone", 5), {key("", 5)});
    EXPECT_TRUE(named.guest_status.ok()) << named.guest_status.message();
    TlsPair bare(key("", 5), {key("", 5)});  // presents the default identity
    EXPECT_TRUE(bare.guest_status.ok()) << bare.guest_status.message();
    EXPECT_EQ(bare.host.tls()->peer_identity(), kDefaultPskIdentity);
    TlsPair wrong(key("anyone", 6), {key("", 5)});
    EXPECT_FALSE(wrong.guest_status.ok());
}

TEST(TlsStream, SilentPeerEndsTheHandshakeAtTheTimeLimit) {
    int fds[2] = {-1, -1};
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
    UniqueFd silent(fds[0]), host(fds[1]);
    const auto started = std::chrono::steady_clock::now();
    std::unique_ptr<TlsSession> tls;
    Status status = TlsSession::accept(host.get(), {key("guest", 1)}, 300, &tls);
    const auto took = std::chrono::steady_clock::now() - started;
    EXPECT_FALSE(status.ok());
    EXPECT_THAT(status.message(), HasSubstr("no TLS handshake within 300 ms"));
    EXPECT_LT(took, std::chrono::seconds(3));
}

TEST(TlsStream, PlainPeerIsNotMistakenForTls) {
    int fds[2] = {-1, -1};
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
    UniqueFd guest(fds[0]);
    FramedStream plain_host(UniqueFd(fds[1]), "guest-peer");
    FrameHeader header;
    header.flags = protocol::kFrameReply;
    header.status = static_cast<int32_t>(Code::limit_exceeded);
    const std::string reason = "not TLS";
    ASSERT_TRUE(plain_host.send(header, {text(reason)}).ok());
    std::unique_ptr<TlsSession> tls;
    std::string first_bytes;
    Status status = TlsSession::connect(guest.get(), key("guest", 1), kTimeoutMs, &tls, &first_bytes);
    EXPECT_FALSE(status.ok());
    ASSERT_GE(first_bytes.size(), 1u);
    EXPECT_EQ(first_bytes[0], 0) << "the guest keeps the server's first bytes to explain the failure";
}

TEST(TlsStream, HostSeesTheGuestHangUpAsADisconnect) {
    TlsPair pair(key("guest", 8), {key("guest", 8)});
    ASSERT_TRUE(pair.guest_status.ok()) << pair.guest_status.message();
    pair.guest.close();
    FrameHeader header;
    Status status = pair.host.receive_header(&header, 1024);
    EXPECT_EQ(status.code(), Code::disconnected) << status.message();
    EXPECT_THAT(status.message(), HasSubstr("connection closed by peer"));
}

TEST(TlsStream, OversizedFrameIsRefusedUnread) {
    TlsPair pair(key("guest", 8), {key("guest", 8)});
    ASSERT_TRUE(pair.guest_status.ok()) << pair.guest_status.message();
    FrameHeader header;
    const std::vector<uint8_t> big(2048);
    ASSERT_TRUE(pair.guest.send(header, {ByteView(big)}).ok());
    FrameHeader received;
    Status status = pair.host.receive_header(&received, 1024);
    EXPECT_EQ(status.code(), Code::limit_exceeded);
}

TEST(TlsStream, DescriptorsCannotTravelOverTls) {
    TlsPair pair(key("guest", 8), {key("guest", 8)});
    ASSERT_TRUE(pair.guest_status.ok()) << pair.guest_status.message();
    FrameHeader header;
    const int fd = 0;
    Status status = pair.guest.send(header, {}, &fd, 1);
    EXPECT_FALSE(status.ok());
    EXPECT_THAT(status.message(), HasSubstr("descriptors cannot travel over TLS"));
}

}  // namespace
}  // namespace ggml_remote
