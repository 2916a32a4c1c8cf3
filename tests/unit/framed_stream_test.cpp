// FramedStream: frames (header + payload) over a connected stream socket.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "transport/connection.h"
#include "transport/shared_memory.h"

namespace ggml_remote {
namespace {

using protocol::ByteView;
using protocol::FrameHeader;
using ::testing::HasSubstr;

enum class Socket { unix_pair, tcp_loopback };

// Two connected streams, as a guest and its host would hold them: a unix socket
// pair, or both ends of a TCP connection over loopback (whose reads go through
// the stream's inbox).
struct StreamPair {
    explicit StreamPair(Socket kind = Socket::unix_pair) {
        int fds[2] = {-1, -1};
        if (kind == Socket::unix_pair) {
            EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
        } else {
            connect_over_loopback(fds);
        }
        guest = FramedStream(UniqueFd(fds[0]), "host-peer");
        host = FramedStream(UniqueFd(fds[1]), "guest-peer");
    }
    static void connect_over_loopback(int fds[2]) {
        UniqueFd listener(::socket(AF_INET, SOCK_STREAM, 0));
        sockaddr_in address{};
        address.sin_family = AF_INET;
        address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t length = sizeof(address);
        ASSERT_EQ(::bind(listener.get(), reinterpret_cast<sockaddr *>(&address), sizeof(address)), 0);
        ASSERT_EQ(::listen(listener.get(), 1), 0);
        ASSERT_EQ(::getsockname(listener.get(), reinterpret_cast<sockaddr *>(&address), &length), 0);
        fds[0] = ::socket(AF_INET, SOCK_STREAM, 0);
        ASSERT_EQ(::connect(fds[0], reinterpret_cast<sockaddr *>(&address), sizeof(address)), 0);
        fds[1] = ::accept(listener.get(), nullptr, nullptr);
        ASSERT_GE(fds[1], 0);
    }
    FramedStream guest;
    FramedStream host;
};

// The tests that hold for every kind of socket.
class FramedStreamOverEach : public ::testing::TestWithParam<Socket> {};

ByteView text(const std::string &s) { return ByteView(s.data(), s.size()); }

std::string receive_text(FramedStream &stream, size_t size) {
    std::string out(size, '\0');
    Status status = stream.receive(out.data(), out.size());
    EXPECT_TRUE(status.ok()) << status.message();
    return out;
}

TEST_P(FramedStreamOverEach, FrameCarriesHeaderFieldsAndTheConcatenatedParts) {
    StreamPair pair(GetParam());
    FrameHeader header;
    header.command = 11;
    header.flags = protocol::kFrameReply;
    header.status = static_cast<int32_t>(Code::not_found);
    const std::string first = "head", third = "tail!";
    ASSERT_TRUE(pair.guest.send(header, {text(first), ByteView(), text(third)}).ok());

    FrameHeader received;
    ASSERT_TRUE(pair.host.receive_header(&received, 1024).ok());
    EXPECT_EQ(received.command, 11);
    EXPECT_EQ(received.flags, protocol::kFrameReply);
    EXPECT_EQ(received.status, static_cast<int32_t>(Code::not_found));
    EXPECT_EQ(received.payload_size, 9u);
    EXPECT_EQ(receive_text(pair.host, 9), "headtail!");
}

TEST_P(FramedStreamOverEach, SenderComputesThePayloadSizeItself) {
    StreamPair pair(GetParam());
    FrameHeader header;
    header.payload_size = 123456;  // stale value from the caller: ignored
    const std::string body = "abc";
    ASSERT_TRUE(pair.guest.send(header, {text(body)}).ok());
    FrameHeader received;
    ASSERT_TRUE(pair.host.receive_header(&received, 1024).ok());
    EXPECT_EQ(received.payload_size, 3u);
}

TEST_P(FramedStreamOverEach, FrameWithoutPartsHasAnEmptyPayload) {
    StreamPair pair(GetParam());
    FrameHeader header;
    header.command = 1;
    ASSERT_TRUE(pair.guest.send(header, {}).ok());
    const std::string next = "x";
    ASSERT_TRUE(pair.guest.send(header, {text(next)}).ok());

    FrameHeader received;
    ASSERT_TRUE(pair.host.receive_header(&received, 1024).ok());
    EXPECT_EQ(received.payload_size, 0u);
    ASSERT_TRUE(pair.host.receive_header(&received, 1024).ok());
    EXPECT_EQ(received.payload_size, 1u);
    EXPECT_EQ(receive_text(pair.host, 1), "x");
}

TEST_P(FramedStreamOverEach, FramesArriveInOrderBackToBack) {
    StreamPair pair(GetParam());
    for (uint16_t command = 1; command <= 3; ++command) {
        FrameHeader header;
        header.command = command;
        const std::string body(command, static_cast<char>('a' + command));
        ASSERT_TRUE(pair.guest.send(header, {text(body)}).ok());
    }
    for (uint16_t command = 1; command <= 3; ++command) {
        FrameHeader received;
        ASSERT_TRUE(pair.host.receive_header(&received, 1024).ok());
        EXPECT_EQ(received.command, command);
        EXPECT_EQ(receive_text(pair.host, received.payload_size),
                  std::string(command, static_cast<char>('a' + command)));
    }
}

TEST_P(FramedStreamOverEach, LargeFrameLargerThanTheSocketBufferArrivesIntact) {
    StreamPair pair(GetParam());
    std::vector<uint8_t> big(3u << 20);
    std::iota(big.begin(), big.end(), uint8_t(0));
    const std::string prefix = "prefix";
    std::vector<uint8_t> received;
    Status receiver_status;
    std::thread receiver([&] {
        FrameHeader header;
        receiver_status = pair.host.receive_header(&header, 16u << 20);
        if (!receiver_status) return;
        received.resize(header.payload_size);
        receiver_status = pair.host.receive(received.data(), received.size());
    });
    Status sent = pair.guest.send(FrameHeader{}, {text(prefix), ByteView(big), text(prefix)});
    receiver.join();
    ASSERT_TRUE(sent.ok()) << sent.message();
    ASSERT_TRUE(receiver_status.ok()) << receiver_status.message();
    ASSERT_EQ(received.size(), big.size() + 2 * prefix.size());
    EXPECT_EQ(std::string(received.begin(), received.begin() + 6), prefix);
    EXPECT_TRUE(std::equal(big.begin(), big.end(), received.begin() + 6));
    EXPECT_EQ(std::string(received.end() - 6, received.end()), prefix);
}

TEST_P(FramedStreamOverEach, TooManyPartsAreRefusedWithoutSending) {
    StreamPair pair(GetParam());
    const std::string byte = "b";
    Status status = pair.guest.send(FrameHeader{}, {text(byte), text(byte), text(byte), text(byte), text(byte),
                                                    text(byte), text(byte), text(byte)});
    EXPECT_EQ(status.code(), Code::error);
    EXPECT_THAT(status.message(), HasSubstr("too many frame parts"));
}

TEST_P(FramedStreamOverEach, PayloadOverTheLimitIsRefusedUnread) {
    StreamPair pair(GetParam());
    const std::string body(100, 'p');
    ASSERT_TRUE(pair.guest.send(FrameHeader{}, {text(body)}).ok());
    FrameHeader received;
    Status status = pair.host.receive_header(&received, 99);
    EXPECT_EQ(status.code(), Code::limit_exceeded);
    EXPECT_THAT(status.message(), HasSubstr("100 bytes"));
    EXPECT_THAT(status.message(), HasSubstr("limit of 99"));
    EXPECT_EQ(received.payload_size, 100u);
}

TEST_P(FramedStreamOverEach, PayloadExactlyAtTheLimitIsAccepted) {
    StreamPair pair(GetParam());
    const std::string body(100, 'p');
    ASSERT_TRUE(pair.guest.send(FrameHeader{}, {text(body)}).ok());
    FrameHeader received;
    EXPECT_TRUE(pair.host.receive_header(&received, 100).ok());
}

TEST_P(FramedStreamOverEach, DiscardSkipsARefusedPayloadSoTheNextFrameCanBeRead) {
    StreamPair pair(GetParam());
    const std::string refused(200000, 'r'), accepted = "ok";
    std::thread sender([&] {
        (void)pair.guest.send(FrameHeader{}, {text(refused)});
        FrameHeader second;
        second.command = 2;
        (void)pair.guest.send(second, {text(accepted)});
    });
    FrameHeader received;
    EXPECT_EQ(pair.host.receive_header(&received, 1000).code(), Code::limit_exceeded);
    EXPECT_TRUE(pair.host.discard(received.payload_size).ok());
    ASSERT_TRUE(pair.host.receive_header(&received, 1000).ok());
    EXPECT_EQ(received.command, 2);
    EXPECT_EQ(receive_text(pair.host, received.payload_size), "ok");
    sender.join();
}

TEST_P(FramedStreamOverEach, PeerClosedBeforeAHeaderIsDisconnected) {
    StreamPair pair(GetParam());
    pair.guest.close();
    FrameHeader received;
    Status status = pair.host.receive_header(&received, 1024);
    EXPECT_EQ(status.code(), Code::disconnected);
    EXPECT_THAT(status.message(), HasSubstr("guest-peer"));
    EXPECT_THAT(status.message(), HasSubstr("closed by peer"));
}

TEST_P(FramedStreamOverEach, PeerClosedInsideAPayloadIsDisconnected) {
    StreamPair pair(GetParam());
    FrameHeader header;
    header.payload_size = 10;  // promise 10 bytes, deliver 3 by hand
    ASSERT_EQ(::send(pair.guest.fd(), &header, sizeof(header), 0), static_cast<ssize_t>(sizeof(header)));
    ASSERT_EQ(::send(pair.guest.fd(), "abc", 3, 0), 3);
    pair.guest.close();
    FrameHeader received;
    ASSERT_TRUE(pair.host.receive_header(&received, 1024).ok());
    std::vector<uint8_t> payload(received.payload_size);
    EXPECT_EQ(pair.host.receive(payload.data(), payload.size()).code(), Code::disconnected);
}

// Payloads into a FrameBuffer: memory follows the bytes that came, not the header.

TEST_P(FramedStreamOverEach, HeaderAnnouncingAHugePayloadCommitsOnlyTheFirstStep) {
    StreamPair pair(GetParam());
    FrameHeader header;
    header.payload_size = 256u << 20;  // announced; 100 bytes come, then the peer is gone
    const std::vector<uint8_t> some(100, 7);
    ASSERT_EQ(::send(pair.guest.fd(), &header, sizeof(header), 0), static_cast<ssize_t>(sizeof(header)));
    ASSERT_EQ(::send(pair.guest.fd(), some.data(), some.size(), 0), static_cast<ssize_t>(some.size()));
    pair.guest.close();
    FrameHeader received;
    ASSERT_TRUE(pair.host.receive_header(&received, 512u << 20).ok());
    FrameBuffer payload;
    EXPECT_EQ(pair.host.receive_payload(&payload, received.payload_size).code(), Code::disconnected);
    EXPECT_LE(payload.capacity(), FrameBuffer::kFirstStep);
}

TEST_P(FramedStreamOverEach, LargePayloadArrivesWholeThroughAGrowingBuffer) {
    StreamPair pair(GetParam());
    std::vector<uint8_t> big((5u << 20) + 123);
    std::iota(big.begin(), big.end(), uint8_t(0));
    FrameBuffer payload;
    Status receiver_status;
    std::thread receiver([&] {
        FrameHeader header;
        receiver_status = pair.host.receive_header(&header, 16u << 20);
        if (receiver_status) receiver_status = pair.host.receive_payload(&payload, header.payload_size);
    });
    Status sent = pair.guest.send(FrameHeader{}, {ByteView(big)});
    receiver.join();
    ASSERT_TRUE(sent.ok()) << sent.message();
    ASSERT_TRUE(receiver_status.ok()) << receiver_status.message();
    ASSERT_EQ(payload.size(), big.size());
    EXPECT_TRUE(std::equal(big.begin(), big.end(), payload.data()));
}

TEST_P(FramedStreamOverEach, EmptyPayloadNeedsNoMemory) {
    StreamPair pair(GetParam());
    ASSERT_TRUE(pair.guest.send(FrameHeader{}, {}).ok());
    FrameHeader header;
    ASSERT_TRUE(pair.host.receive_header(&header, 1024).ok());
    FrameBuffer payload;
    ASSERT_TRUE(pair.host.receive_payload(&payload, header.payload_size).ok());
    EXPECT_EQ(payload.size(), 0u);
    EXPECT_EQ(payload.capacity(), 0u);
}

TEST(FrameBuffer, GrowsByDoublingWhatCameFromTheFirstStepUpToTheTotal) {
    constexpr size_t kTotal = 1000000;
    EXPECT_EQ(FrameBuffer::next_step(0, 100), 100u);
    EXPECT_EQ(FrameBuffer::next_step(0, kTotal), FrameBuffer::kFirstStep);
    EXPECT_EQ(FrameBuffer::next_step(FrameBuffer::kFirstStep, kTotal), 2 * FrameBuffer::kFirstStep);
    EXPECT_EQ(FrameBuffer::next_step(400000, kTotal), 800000u);
    EXPECT_EQ(FrameBuffer::next_step(800000, kTotal), kTotal);
    EXPECT_EQ(FrameBuffer::next_step(SIZE_MAX / 2 + 1, SIZE_MAX), SIZE_MAX) << "no overflow";
}

TEST(FrameBuffer, ResizeKeepsTheBytesItHeld) {
    FrameBuffer buffer;
    ASSERT_TRUE(buffer.resize(3).ok());
    std::memcpy(buffer.data(), "abc", 3);
    ASSERT_TRUE(buffer.resize(3u << 20).ok());
    EXPECT_EQ(std::string(reinterpret_cast<const char *>(buffer.data()), 3), "abc");
    buffer.data()[(3u << 20) - 1] = 1;  // the whole size is there
}

TEST(FrameBuffer, CapacityBeyondWhatIsKeptIsGivenBackAfterALargeFrame) {
    FrameBuffer buffer;
    ASSERT_TRUE(buffer.resize(8u << 20).ok());
    std::memset(buffer.data(), 1, buffer.size());
    buffer.release_excess();
    EXPECT_EQ(buffer.capacity(), FrameBuffer::kKeptBytes);
    ASSERT_TRUE(buffer.resize(FrameBuffer::kKeptBytes).ok());
    EXPECT_EQ(buffer.data()[FrameBuffer::kKeptBytes - 1], 1) << "what is kept still holds its bytes";

    FrameBuffer small;
    ASSERT_TRUE(small.resize(100).ok());
    const size_t capacity = small.capacity();
    small.release_excess();
    EXPECT_EQ(small.capacity(), capacity) << "a small frame's memory is kept for the next";
}

TEST(FrameBuffer, AnImpossibleSizeIsAnErrorNotACrash) {
    FrameBuffer buffer;
    EXPECT_EQ(buffer.resize(SIZE_MAX - 10).code(), Code::out_of_memory);
    EXPECT_EQ(buffer.resize(size_t(1) << 62).code(), Code::out_of_memory);
}

TEST(FramedStream, SendingToAClosedPeerIsDisconnectedNotSigpipe) {
    StreamPair pair;
    pair.host.close();
    const std::string body = "anyone there?";
    Status status = pair.guest.send(FrameHeader{}, {text(body)});
    EXPECT_EQ(status.code(), Code::disconnected);
    EXPECT_THAT(status.message(), HasSubstr("host-peer"));
}

INSTANTIATE_TEST_SUITE_P(Sockets, FramedStreamOverEach, ::testing::Values(Socket::unix_pair, Socket::tcp_loopback),
                         [](const ::testing::TestParamInfo<Socket> &info) {
                             return info.param == Socket::unix_pair ? "unix" : "tcp";
                         });

// TCP reads ahead: many frames come with one read, and a frame may come in pieces.
TEST(FramedStreamOverTcp, ManyFramesSentAtOnceAreTakenApartAcrossTheInbox) {
    StreamPair pair(Socket::tcp_loopback);
    std::vector<uint8_t> frames;
    constexpr uint16_t kFrames = 300;  // about 150 KiB: more than one inbox
    for (uint16_t i = 0; i < kFrames; ++i) {
        FrameHeader header;
        header.command = i;
        header.payload_size = (i * 37u) % 1000;
        const auto *bytes = reinterpret_cast<const uint8_t *>(&header);
        frames.insert(frames.end(), bytes, bytes + sizeof(header));
        for (uint64_t k = 0; k < header.payload_size; ++k) frames.push_back(static_cast<uint8_t>(i + k));
    }
    std::thread sender([&] { EXPECT_TRUE(pair.guest.send_frames(ByteView(frames)).ok()); });
    for (uint16_t i = 0; i < kFrames; ++i) {
        FrameHeader received;
        ASSERT_TRUE(pair.host.receive_header(&received, 1024).ok());
        ASSERT_EQ(received.command, i);
        ASSERT_EQ(received.payload_size, (i * 37u) % 1000);
        std::vector<uint8_t> payload(received.payload_size);
        ASSERT_TRUE(pair.host.receive(payload.data(), payload.size()).ok());
        for (size_t k = 0; k < payload.size(); ++k) ASSERT_EQ(payload[k], static_cast<uint8_t>(i + k)) << i;
    }
    sender.join();
}

TEST(FramedStreamOverTcp, AFrameThatComesAByteAtATimeIsPutTogether) {
    StreamPair pair(Socket::tcp_loopback);
    FrameHeader header;
    header.command = 9;
    header.payload_size = 5;
    std::string bytes(reinterpret_cast<const char *>(&header), sizeof(header));
    bytes += "hello";
    std::thread sender([&] {
        for (char byte : bytes) {
            ASSERT_EQ(::send(pair.guest.fd(), &byte, 1, 0), 1);
            std::this_thread::sleep_for(std::chrono::microseconds(200));
        }
    });
    FrameHeader received;
    ASSERT_TRUE(pair.host.receive_header(&received, 1024).ok());
    EXPECT_EQ(received.command, 9);
    EXPECT_EQ(receive_text(pair.host, received.payload_size), "hello");
    sender.join();
}

// Descriptors (unix sockets): they ride on the frame and wait in received_fds().

TEST(FramedStream, DescriptorsTravelWithTheirFrame) {
    StreamPair pair;
    UniqueFd memory;
    ASSERT_TRUE(create_shared_memory(4096, "framed-stream-test", &memory).ok());
    ASSERT_EQ(::pwrite(memory.get(), "shared", 6, 0), 6);
    const int fds[] = {memory.get()};
    const std::string body = "with fd";
    ASSERT_TRUE(pair.guest.send(FrameHeader{}, {text(body)}, fds, 1).ok());

    FrameHeader received;
    ASSERT_TRUE(pair.host.receive_header(&received, 1024).ok());
    ASSERT_EQ(pair.host.received_fds().size(), 1u);
    const int passed = pair.host.received_fds()[0].get();
    EXPECT_NE(passed, memory.get());
    char contents[6] = {};
    ASSERT_EQ(::pread(passed, contents, sizeof(contents), 0), 6);
    EXPECT_EQ(std::string(contents, 6), "shared");
    EXPECT_EQ(receive_text(pair.host, received.payload_size), "with fd");
}

TEST(FramedStream, NextFrameHeaderDropsUntakenDescriptors) {
    StreamPair pair;
    UniqueFd memory;
    ASSERT_TRUE(create_shared_memory(64, "framed-stream-test", &memory).ok());
    const int fds[] = {memory.get(), memory.get()};
    ASSERT_TRUE(pair.guest.send(FrameHeader{}, {}, fds, 2).ok());
    ASSERT_TRUE(pair.guest.send(FrameHeader{}, {}).ok());
    FrameHeader received;
    ASSERT_TRUE(pair.host.receive_header(&received, 1024).ok());
    EXPECT_EQ(pair.host.received_fds().size(), 2u);
    ASSERT_TRUE(pair.host.receive_header(&received, 1024).ok());
    EXPECT_TRUE(pair.host.received_fds().empty());
}

TEST(FramedStream, MoreDescriptorsThanAFrameCarriesAreRefused) {
    StreamPair pair;
    UniqueFd memory;
    ASSERT_TRUE(create_shared_memory(64, "framed-stream-test", &memory).ok());
    std::vector<int> fds(kMaxFdsPerFrame + 1, memory.get());
    Status status = pair.guest.send(FrameHeader{}, {}, fds.data(), fds.size());
    EXPECT_EQ(status.code(), Code::error);
    EXPECT_THAT(status.message(), HasSubstr("too many descriptors"));
}

TEST(FramedStream, UnconnectedStreamRefusesToSendOrReceive) {
    FramedStream stream;
    EXPECT_FALSE(stream.connected());
    EXPECT_EQ(stream.send(FrameHeader{}, {}).code(), Code::disconnected);
    FrameHeader header;
    EXPECT_EQ(stream.receive_header(&header, 16).code(), Code::disconnected);
    uint8_t byte = 0;
    EXPECT_EQ(stream.receive(&byte, 1).code(), Code::disconnected);
}

TEST(FramedStream, CloseReleasesTheSocket) {
    StreamPair pair;
    EXPECT_TRUE(pair.guest.connected());
    pair.guest.close();
    EXPECT_FALSE(pair.guest.connected());
    EXPECT_EQ(pair.guest.fd(), -1);
}

}  // namespace
}  // namespace ggml_remote

namespace ggml_remote {
namespace {

// A reply filled as it is sent (a device's bytes, GetTensor2d's rows) goes out over
// a socket a bounded piece at a time: the whole frame never lies in memory.
TEST(FramedStreamFilled, ALargeTailIsFilledInBoundedPiecesOverASocket) {
    StreamPair pair;
    constexpr uint64_t kTail = 3 * kFilledPieceBytes + 12345;
    const std::string fixed = "fixed part";
    size_t largest_piece = 0, pieces = 0;
    uint64_t at = 0;
    std::thread sender([&] {
        FrameHeader header;
        header.command = 7;
        const Status sent = pair.host.send_in_place(header, {ByteView(fixed.data(), fixed.size())}, kTail, 1000,
                                                    [&](uint8_t *piece, size_t size) {
                                                        for (size_t i = 0; i < size; ++i) piece[i] = uint8_t(at + i);
                                                        at += size;
                                                        largest_piece = std::max(largest_piece, size);
                                                        ++pieces;
                                                    });
        EXPECT_TRUE(sent.ok()) << sent.message();
    });
    FrameHeader header;
    ASSERT_TRUE(pair.guest.receive_header(&header, kTail + 100).ok());
    ASSERT_EQ(header.payload_size, fixed.size() + kTail);
    std::vector<uint8_t> payload(header.payload_size);
    ASSERT_TRUE(pair.guest.receive(payload.data(), payload.size()).ok());
    sender.join();
    EXPECT_EQ(std::string(payload.begin(), payload.begin() + fixed.size()), fixed);
    for (uint64_t i = 0; i < kTail; i += 4099) ASSERT_EQ(payload[fixed.size() + i], uint8_t(i)) << "byte " << i;
    EXPECT_EQ(at, kTail);
    EXPECT_LE(largest_piece, kFilledPieceBytes);
    EXPECT_EQ(pieces, 4u);
}

// A capped stream (vsock guests, see guest/session/connector.cpp) writes at most
// the cap per system call: over a packet socket each write is one packet.
TEST(FramedStream, CappedWritesSplitAFrameIntoPiecesNoLargerThanTheCap) {
    int fds[2] = {-1, -1};
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET, 0, fds), 0);
    FramedStream sender(UniqueFd(fds[0]), "receiver");
    UniqueFd receiver(fds[1]);
    sender.cap_writes(1000);
    std::vector<uint8_t> first(1500), second(700);
    std::iota(first.begin(), first.end(), uint8_t{1});
    std::iota(second.begin(), second.end(), uint8_t{7});
    ASSERT_TRUE(sender.send(FrameHeader{}, {ByteView(first), ByteView(second)}).ok());
    std::vector<uint8_t> received;
    std::vector<size_t> pieces;
    uint8_t packet[4096];
    while (received.size() < sizeof(FrameHeader) + first.size() + second.size()) {
        const ssize_t got = ::recv(receiver.get(), packet, sizeof(packet), 0);
        ASSERT_GT(got, 0);
        pieces.push_back(static_cast<size_t>(got));
        received.insert(received.end(), packet, packet + got);
    }
    EXPECT_EQ(pieces, (std::vector<size_t>{1000, 1000, 216}));
    std::vector<uint8_t> payload(first);
    payload.insert(payload.end(), second.begin(), second.end());
    EXPECT_TRUE(std::equal(payload.begin(), payload.end(), received.begin() + sizeof(FrameHeader)));
}

// Keep-alives (kSessionKeepAlive): header-only frames the guest's reader consumes.
FrameHeader reply_header(uint16_t command) {
    FrameHeader header;
    header.command = command;
    header.flags = protocol::kFrameReply;
    return header;
}

TEST_P(FramedStreamOverEach, AHeedingReaderConsumesKeepAlivesAndReturnsTheReplyAfterThem) {
    StreamPair pair(GetParam());
    pair.guest.heed_keepalives(0);
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(pair.host.send_keepalive().ok());
    ASSERT_TRUE(pair.host.send(reply_header(7), {text("done")}).ok());
    FrameHeader header;
    ASSERT_TRUE(pair.guest.receive_header(&header, 64).ok());
    EXPECT_EQ(header.command, 7);
    EXPECT_EQ(header.flags, protocol::kFrameReply);
    EXPECT_EQ(header.payload_size, 4u);
    EXPECT_EQ(receive_text(pair.guest, 4), "done");
}

TEST_P(FramedStreamOverEach, AKeepAliveIsAPlainFrameToAReaderThatDoesNotHeedThem) {
    StreamPair pair(GetParam());
    ASSERT_TRUE(pair.host.send_keepalive().ok());
    FrameHeader header;
    ASSERT_TRUE(pair.guest.receive_header(&header, 64).ok());
    EXPECT_EQ(header.flags, protocol::kFrameKeepAlive) << "not a reply: its caller refuses it";
    EXPECT_EQ(header.payload_size, 0u);
}

TEST_P(FramedStreamOverEach, AKeepAliveThatCarriesAPayloadIsRefused) {
    StreamPair pair(GetParam());
    pair.guest.heed_keepalives(0);
    FrameHeader forged;
    forged.flags = protocol::kFrameKeepAlive;
    ASSERT_TRUE(pair.host.send(forged, {text("smuggled")}).ok());
    FrameHeader header;
    Status status = pair.guest.receive_header(&header, 64);
    EXPECT_EQ(status.code(), Code::bad_request);
    EXPECT_THAT(status.message(), HasSubstr("a keep-alive that carries more than a header"));
}

// The keep-alives come faster than the silence limit for longer than it: the
// wait outlives the limit, and ends with the reply.
TEST_P(FramedStreamOverEach, KeepAlivesEndEachSilence) {
    StreamPair pair(GetParam());
    constexpr int kSilenceMs = 1000;
    pair.guest.heed_keepalives(0);
    pair.guest.set_silence_limit_ms(kSilenceMs);
    const auto started = std::chrono::steady_clock::now();
    std::thread server([&] {
        while (std::chrono::steady_clock::now() - started < std::chrono::milliseconds(3 * kSilenceMs)) {
            EXPECT_TRUE(pair.host.send_keepalive().ok());
            std::this_thread::sleep_for(std::chrono::milliseconds(kSilenceMs / 10));
        }
        EXPECT_TRUE(pair.host.send(reply_header(3), {}).ok());
    });
    FrameHeader header;
    Status status = pair.guest.receive_header(&header, 64);
    server.join();
    ASSERT_TRUE(status.ok()) << status.message();
    EXPECT_EQ(header.command, 3);
    EXPECT_GE(std::chrono::steady_clock::now() - started, std::chrono::milliseconds(3 * kSilenceMs));
}

// A server that only keeps alive, and never answers, is given up at the cap.
TEST_P(FramedStreamOverEach, KeepAlivesAloneDoNotOutlastTheCap) {
    StreamPair pair(GetParam());
    constexpr int kCapMs = 1500;
    pair.guest.heed_keepalives(kCapMs);
    pair.guest.set_silence_limit_ms(kCapMs);
    std::atomic<bool> done{false};
    std::thread server([&] {
        while (!done.load()) {
            (void)pair.host.send_keepalive();
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
    });
    const auto started = std::chrono::steady_clock::now();
    FrameHeader header;
    Status status = pair.guest.receive_header(&header, 64);
    const auto waited = std::chrono::steady_clock::now() - started;
    done.store(true);
    server.join();
    EXPECT_EQ(status.code(), Code::disconnected);
    EXPECT_THAT(status.message(), HasSubstr("kept the session alive for 1500 ms but sent nothing else"));
    EXPECT_GE(waited, std::chrono::milliseconds(kCapMs));
    EXPECT_LT(waited, std::chrono::seconds(30));
}

// A guest that reads nothing while its server computes fills its socket; the
// server's keep-alives are then skipped, never waited for.
TEST(FramedStream, AKeepAliveToAFullSocketIsSkippedNotWaitedFor) {
    StreamPair pair;
    ASSERT_EQ(::fcntl(pair.host.fd(), F_SETFL, O_NONBLOCK), 0);
    const std::vector<uint8_t> filler(4096);
    while (::send(pair.host.fd(), filler.data(), filler.size(), MSG_NOSIGNAL) > 0) {
    }
    ASSERT_EQ(::fcntl(pair.host.fd(), F_SETFL, 0), 0);  // blocking again, as a worker's socket is
    const auto started = std::chrono::steady_clock::now();
    EXPECT_TRUE(pair.host.send_keepalive().ok());
    EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(5));
}

}  // namespace
}  // namespace ggml_remote
