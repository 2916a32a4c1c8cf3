// RingChannel and FramedStream over it: frames through shared memory, descriptors
// on the socket, a dead peer noticed, and a guest's impossible counts refused.
#include "transport/shared_ring.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "transport/connection.h"

namespace ggml_remote {
namespace {

using protocol::ByteView;
using protocol::FrameHeader;
using ::testing::HasSubstr;

// A guest and a host stream over a socketpair, both switched to one ring, as
// after an shm: handshake.
struct RingPair {
    explicit RingPair(size_t capacity = 4096) {
        int fds[2] = {-1, -1};
        EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
        guest = FramedStream(UniqueFd(fds[0]), "host-peer");
        host = FramedStream(UniqueFd(fds[1]), "guest-peer");
        std::unique_ptr<RingChannel> host_ring, guest_ring;
        EXPECT_TRUE(RingChannel::create(capacity, &memory, &host_ring).ok());
        EXPECT_TRUE(RingChannel::attach(memory.get(), &guest_ring).ok());
        host.attach_ring(std::move(host_ring));
        guest.attach_ring(std::move(guest_ring));
    }
    ~RingPair() {
        if (forged_ != nullptr) ::munmap(forged_, kRingHeaderBytes);
    }
    // The ring's counters as a hostile guest can write them, through a mapping of its own.
    RingChannel::RegionHeader *forge() {
        void *region = ::mmap(nullptr, kRingHeaderBytes, PROT_READ | PROT_WRITE, MAP_SHARED, memory.get(), 0);
        EXPECT_NE(region, MAP_FAILED);
        forged_ = region == MAP_FAILED ? nullptr : region;
        return static_cast<RingChannel::RegionHeader *>(forged_);
    }
    FramedStream guest;
    FramedStream host;
    UniqueFd memory;

  private:
    void *forged_ = nullptr;
};

ByteView text(const std::string &s) { return ByteView(s.data(), s.size()); }

TEST(SharedRing, AGuestWaitingOnASilentHostGivesUpAtItsSilenceLimit) {
    RingPair pair;
    pair.guest.set_silence_limit_ms(200);  // the host stays, and says nothing
    const auto started = std::chrono::steady_clock::now();
    FrameHeader header;
    Status status = pair.guest.receive_header(&header, 1024);
    const auto waited = std::chrono::steady_clock::now() - started;
    EXPECT_EQ(status.code(), Code::disconnected);
    EXPECT_THAT(status.message(), HasSubstr("the peer was silent for 200 ms"));
    EXPECT_GE(waited, std::chrono::milliseconds(200));
    EXPECT_LT(waited, std::chrono::seconds(3));
}

// Over a ring a keep-alive is a beat of the header's heartbeat (send_keepalive on
// the host's stream), which a heeding guest's wait hears.
TEST(SharedRing, HeartbeatsEndEachSilenceOfAHeedingGuest) {
    RingPair pair;
    constexpr int kSilenceMs = 1000;
    pair.guest.heed_keepalives(0);
    pair.guest.set_silence_limit_ms(kSilenceMs);
    const auto started = std::chrono::steady_clock::now();
    std::thread server([&] {
        while (std::chrono::steady_clock::now() - started < std::chrono::milliseconds(3 * kSilenceMs)) {
            EXPECT_TRUE(pair.host.send_keepalive().ok());
            std::this_thread::sleep_for(std::chrono::milliseconds(kSilenceMs / 10));
        }
        FrameHeader reply;
        reply.command = 5;
        reply.flags = protocol::kFrameReply;
        EXPECT_TRUE(pair.host.send(reply, {}).ok());
    });
    FrameHeader header;
    Status status = pair.guest.receive_header(&header, 1024);
    server.join();
    ASSERT_TRUE(status.ok()) << status.message();
    EXPECT_EQ(header.command, 5);
    EXPECT_GE(std::chrono::steady_clock::now() - started, std::chrono::milliseconds(3 * kSilenceMs));
    char probe;
    EXPECT_EQ(::recv(pair.guest.fd(), &probe, 1, MSG_DONTWAIT), -1) << "no keep-alive went through the socket";
}

TEST(SharedRing, HeartbeatsAloneDoNotOutlastTheCap) {
    RingPair pair;
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
    Status status = pair.guest.receive_header(&header, 1024);
    const auto waited = std::chrono::steady_clock::now() - started;
    done.store(true);
    server.join();
    EXPECT_EQ(status.code(), Code::disconnected);
    EXPECT_THAT(status.message(), HasSubstr("kept the session alive for 1500 ms but sent nothing"));
    EXPECT_GE(waited, std::chrono::milliseconds(kCapMs));
    EXPECT_LT(waited, std::chrono::seconds(30));
}

TEST(SharedRing, AGuestRefusesARingFileThatCouldShrink) {
    UniqueFd file(::memfd_create("unsealed-ring", MFD_CLOEXEC));
    ASSERT_TRUE(file.valid());
    ASSERT_EQ(::ftruncate(file.get(), kRingHeaderBytes + 2 * 4096), 0);
    std::unique_ptr<RingChannel> ring;
    Status status = RingChannel::attach(file.get(), &ring);
    EXPECT_FALSE(status.ok());
    EXPECT_THAT(status.message(), HasSubstr("not sealed against shrinking"));
}

TEST(SharedRing, FramesGoBothWaysWithoutTouchingTheSocket) {
    RingPair pair;
    FrameHeader header;
    header.command = 7;
    ASSERT_TRUE(pair.guest.send(header, {text("request")}).ok());
    // Nothing went through the socket.
    char probe;
    EXPECT_EQ(::recv(pair.host.fd(), &probe, 1, MSG_DONTWAIT), -1);

    FrameHeader received;
    ASSERT_TRUE(pair.host.receive_header(&received, 1024).ok());
    EXPECT_EQ(received.command, 7);
    std::string body(received.payload_size, '\0');
    ASSERT_TRUE(pair.host.receive(body.data(), body.size()).ok());
    EXPECT_EQ(body, "request");

    header.flags = protocol::kFrameReply;
    ASSERT_TRUE(pair.host.send(header, {text("reply")}).ok());
    ASSERT_TRUE(pair.guest.receive_header(&received, 1024).ok());
    EXPECT_EQ(received.flags, protocol::kFrameReply);
    body.assign(received.payload_size, '\0');
    ASSERT_TRUE(pair.guest.receive(body.data(), body.size()).ok());
    EXPECT_EQ(body, "reply");
}

TEST(SharedRing, AFrameManyTimesTheCapacityStreamsThroughWhileTheReaderReads) {
    RingPair pair(4096);
    std::vector<uint8_t> big(1 << 20);
    std::iota(big.begin(), big.end(), 0);
    std::thread writer([&] {
        for (int i = 0; i < 3; ++i) EXPECT_TRUE(pair.guest.send(FrameHeader{}, {ByteView(big)}).ok());
    });
    for (int i = 0; i < 3; ++i) {
        FrameHeader received;
        ASSERT_TRUE(pair.host.receive_header(&received, 1u << 30).ok());
        ASSERT_EQ(received.payload_size, big.size());
        std::vector<uint8_t> got(big.size());
        ASSERT_TRUE(pair.host.receive(got.data(), got.size()).ok());
        EXPECT_EQ(got, big);
    }
    writer.join();
}

// Tensor data read and written where it lies in the ring (RingChannel::read_in_place,
// write_in_place): every byte once, in order, in pieces no larger than the ring.
TEST(SharedRing, DataReadInPlaceComesWholeInOrderAcrossWrapsAndBeyondTheRing) {
    RingPair pair(4096);
    std::vector<uint8_t> data(3 * 4096 + 1234);
    std::iota(data.begin(), data.end(), 7);
    const std::string before(1000, 'x');  // so that the data starts mid-ring
    std::thread writer([&] {
        EXPECT_TRUE(pair.guest.send(FrameHeader{}, {text(before)}).ok());
        EXPECT_TRUE(pair.guest.send(FrameHeader{}, {ByteView(data)}).ok());
    });
    FrameHeader received;
    ASSERT_TRUE(pair.host.receive_header(&received, 1 << 20).ok());
    std::string first(received.payload_size, '\0');
    ASSERT_TRUE(pair.host.receive(first.data(), first.size()).ok());
    ASSERT_TRUE(pair.host.receive_header(&received, 1 << 20).ok());
    ASSERT_EQ(received.payload_size, data.size());
    std::vector<uint8_t> got;
    size_t pieces = 0;
    ASSERT_TRUE(pair.host
                    .receive_in_place(data.size(), 1024,
                                      [&](const uint8_t *piece, size_t size) {
                                          EXPECT_LE(size, 4096u);
                                          got.insert(got.end(), piece, piece + size);
                                          ++pieces;
                                      })
                    .ok());
    writer.join();
    EXPECT_EQ(got, data);
    EXPECT_GE(pieces, 4u);
}

TEST(SharedRing, DataWrittenInPlaceArrivesAsOneFrameAfterItsFixedPart) {
    RingPair pair(4096);
    const std::string fixed = "reply";
    constexpr size_t kTail = 2 * 4096 + 999;
    std::thread writer([&] {
        FrameHeader header;
        header.command = 9;
        uint64_t at = 0;
        EXPECT_TRUE(pair.host
                        .send_in_place(header, {text(fixed)}, kTail, 1000,
                                       [&](uint8_t *piece, size_t size) {
                                           for (size_t i = 0; i < size; ++i) piece[i] = uint8_t((at + i) * 31);
                                           at += size;
                                       })
                        .ok());
    });
    FrameHeader received;
    ASSERT_TRUE(pair.guest.receive_header(&received, 1 << 20).ok());
    EXPECT_EQ(received.command, 9);
    ASSERT_EQ(received.payload_size, fixed.size() + kTail);
    std::vector<uint8_t> body(received.payload_size);
    ASSERT_TRUE(pair.guest.receive(body.data(), body.size()).ok());
    writer.join();
    EXPECT_EQ(std::string(body.begin(), body.begin() + fixed.size()), fixed);
    for (size_t i = 0; i < kTail; ++i) ASSERT_EQ(body[fixed.size() + i], uint8_t(i * 31)) << i;
}

TEST(SharedRing, AGuestThatForgesItsWrittenCountDuringAnInPlaceReadIsRefused) {
    RingPair pair(4096);
    RingChannel::RegionHeader *layout = pair.forge();
    ASSERT_NE(layout, nullptr);
    const std::vector<uint8_t> half(2000, 1);
    ASSERT_TRUE(pair.guest.send(FrameHeader{}, {ByteView(half)}).ok());
    FrameHeader received;
    ASSERT_TRUE(pair.host.receive_header(&received, 1 << 20).ok());
    size_t taken = 0;
    // The tail announced 6000 bytes; while the host copies the first piece, the
    // guest claims to have written far more than the ring holds.
    Status status = pair.host.receive_in_place(6000, 1, [&](const uint8_t *, size_t size) {
        taken += size;
        layout->rings[0].written.store(1ull << 40);
    });
    EXPECT_EQ(status.code(), Code::bad_request);
    EXPECT_THAT(status.message(), HasSubstr("impossible"));
    EXPECT_EQ(taken, half.size()) << "nothing past what was really written was handed on";
}

TEST(SharedRing, AGuestThatChangesBytesDuringAnInPlaceReadChangesOnlyThoseBytes) {
    RingPair pair(4096);
    const std::vector<uint8_t> data(3000, 5);
    ASSERT_TRUE(pair.guest.send(FrameHeader{}, {ByteView(data)}).ok());
    FrameHeader received;
    ASSERT_TRUE(pair.host.receive_header(&received, 1 << 20).ok());
    uint64_t taken = 0;
    ASSERT_TRUE(pair.host
                    .receive_in_place(data.size(), 1,
                                      [&](const uint8_t *piece, size_t size) {
                                          // The guest's scribble on the very bytes being copied.
                                          std::memset(const_cast<uint8_t *>(piece), 0xee, size);
                                          taken += size;
                                      })
                    .ok());
    EXPECT_EQ(taken, data.size());
    // The host's own counts did not move with the bytes: the next frame reads whole.
    FrameHeader next;
    next.command = 3;
    ASSERT_TRUE(pair.guest.send(next, {text("after")}).ok());
    ASSERT_TRUE(pair.host.receive_header(&received, 1024).ok());
    EXPECT_EQ(received.command, 3);
    std::string body(received.payload_size, '\0');
    ASSERT_TRUE(pair.host.receive(body.data(), body.size()).ok());
    EXPECT_EQ(body, "after");
}

TEST(SharedRing, ManySmallRoundTripsFromTwoThreadsKeepTheirOrder) {
    RingPair pair(256);  // small, so the ring wraps many times
    constexpr int kRounds = 20000;
    std::thread host([&] {
        for (int i = 0; i < kRounds; ++i) {
            FrameHeader received;
            ASSERT_TRUE(pair.host.receive_header(&received, 64).ok());
            uint32_t value = 0;
            ASSERT_TRUE(pair.host.receive(&value, sizeof(value)).ok());
            value += 1;
            ASSERT_TRUE(pair.host.send(received, {ByteView(&value, sizeof(value))}).ok());
        }
    });
    for (uint32_t i = 0; i < kRounds; ++i) {
        ASSERT_TRUE(pair.guest.send(FrameHeader{}, {ByteView(&i, sizeof(i))}).ok());
        FrameHeader received;
        ASSERT_TRUE(pair.guest.receive_header(&received, 64).ok());
        uint32_t value = 0;
        ASSERT_TRUE(pair.guest.receive(&value, sizeof(value)).ok());
        ASSERT_EQ(value, i + 1);
    }
    host.join();
}

TEST(SharedRing, DescriptorsTakeTheSocketAndArriveWithTheirFrame) {
    RingPair pair;
    UniqueFd memory;
    ASSERT_TRUE(create_shared_memory(4096, "ring-test", &memory).ok());
    const int fds[] = {memory.get()};
    ASSERT_TRUE(pair.host.send(FrameHeader{}, {text("buffer")}, fds, 1).ok());
    FrameHeader received;
    ASSERT_TRUE(pair.guest.receive_header(&received, 1024).ok());
    EXPECT_EQ(received.flags & protocol::kFrameCarriesFds, 0) << "the flag is the transport's, not the command's";
    ASSERT_EQ(pair.guest.received_fds().size(), 1u);
    EXPECT_GE(pair.guest.received_fds()[0].get(), 0);
}

TEST(SharedRing, AFrameThatAnnouncesDescriptorsThatNeverCameIsRefusedNotWaitedFor) {
    RingPair pair;
    FrameHeader header;
    header.flags = protocol::kFrameCarriesFds;  // a lie: nothing on the socket
    ASSERT_TRUE(pair.guest.send(header, {}).ok());
    FrameHeader received;
    Status status = pair.host.receive_header(&received, 1024);
    EXPECT_EQ(status.code(), Code::bad_request);
    EXPECT_THAT(status.message(), HasSubstr("descriptors that never came"));
}

// A host waiting on the ring for a frame, while `event` happens 50 ms later, is
// told the session is over within a few liveness periods.
void expect_wait_ends_after(RingPair &pair, const std::function<void()> &event) {
    std::thread other([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        event();
    });
    const auto start = std::chrono::steady_clock::now();
    FrameHeader received;
    Status status = pair.host.receive_header(&received, 1024);
    const auto waited = std::chrono::steady_clock::now() - start;
    other.join();
    EXPECT_EQ(status.code(), Code::disconnected);
    EXPECT_LT(waited, std::chrono::milliseconds(50 + 3 * kLivenessCheckMs));
}

TEST(SharedRing, AReaderWaitingForADeadPeerIsToldWithinALivenessPeriod) {
    RingPair pair;
    expect_wait_ends_after(pair, [&] { pair.guest.close(); });  // the guest's process dies: its socket closes
}

// The server's watchdog ends a stalled session by shutting its socket down; a
// worker waiting on the ring (a guest that sent half a frame) must then give up.
TEST(SharedRing, AReaderWaitingOnAHalfFrameGivesUpWhenItsOwnSocketIsShutDown) {
    RingPair pair;
    const uint8_t half_header[8] = {};
    // Half a frame header from the guest, then nothing.
    ASSERT_TRUE(pair.guest.send_frames(ByteView(half_header, sizeof(half_header))).ok());
    expect_wait_ends_after(pair, [&] { ::shutdown(pair.host.fd(), SHUT_RDWR); });
}

TEST(SharedRing, AGuestThatForgesItsWrittenCountIsRefused) {
    RingPair pair;
    RingChannel::RegionHeader *layout = pair.forge();
    ASSERT_NE(layout, nullptr);
    layout->rings[0].written.store(1ull << 40);  // far more than the ring holds
    FrameHeader received;
    Status status = pair.host.receive_header(&received, 1024);
    EXPECT_EQ(status.code(), Code::bad_request);
    EXPECT_THAT(status.message(), HasSubstr("impossible"));
}

TEST(SharedRing, AGuestThatForgesItsReadCountCannotMakeTheHostOverwrite) {
    RingPair pair;
    RingChannel::RegionHeader *layout = pair.forge();
    ASSERT_NE(layout, nullptr);
    // "Read" more than the host ever wrote.
    layout->rings[1].read.store(12345);
    Status status = pair.host.send(FrameHeader{}, {text("reply")});
    EXPECT_EQ(status.code(), Code::bad_request);
}

// Two CPUs this thread may run on, or false.
bool two_allowed_cpus(cpu_set_t *mask, int *first, int *second) {
    if (::sched_getaffinity(0, sizeof(*mask), mask) != 0 || CPU_COUNT(mask) < 2) return false;
    *first = *second = -1;
    for (int cpu = 0; cpu < CPU_SETSIZE && *second < 0; ++cpu) {
        if (!CPU_ISSET(cpu, mask)) continue;
        (*first < 0 ? *first : *second) = cpu;
    }
    return true;
}

void move_to(int cpu, const cpu_set_t &mask) {
    cpu_set_t only;
    CPU_ZERO(&only);
    CPU_SET(cpu, &only);
    ASSERT_EQ(::sched_setaffinity(0, sizeof(only), &only), 0);
    ASSERT_EQ(::sched_setaffinity(0, sizeof(mask), &mask), 0);
}

TEST(SharedRing, AGuestBehindAComputeMovesToTheWorkersCpuKeepingItsMaskAtMostEvery100Ms) {
    cpu_set_t mask;
    int here = -1, worker = -1;
    if (!two_allowed_cpus(&mask, &here, &worker)) GTEST_SKIP() << "needs two CPUs";
    UniqueFd memory;
    std::unique_ptr<RingChannel> host_ring, guest_ring;
    ASSERT_TRUE(RingChannel::create(4096, &memory, &host_ring).ok());
    ASSERT_TRUE(RingChannel::attach(memory.get(), &guest_ring).ok());
    void *region = ::mmap(nullptr, kRingHeaderBytes, PROT_READ | PROT_WRITE, MAP_SHARED, memory.get(), 0);
    ASSERT_NE(region, MAP_FAILED);
    static_cast<RingChannel::RegionHeader *>(region)->worker_cpu.store(worker);

    // The scheduler may move a thread on its own at any time, so each check gets a
    // few tries (the first ones 100 ms apart, for the rate limit).
    bool moved = false;
    for (int attempt = 0; attempt < 5 && !moved; ++attempt) {
        if (attempt > 0) std::this_thread::sleep_for(std::chrono::milliseconds(110));
        move_to(here, mask);
        guest_ring->follow_worker();
        moved = ::sched_getcpu() == worker;
    }
    EXPECT_TRUE(moved) << "the guest did not move to the worker's CPU";
    cpu_set_t after;
    ASSERT_EQ(::sched_getaffinity(0, sizeof(after), &after), 0);
    EXPECT_TRUE(CPU_EQUAL(&after, &mask)) << "the thread's own mask was not restored";

    // Not again within 100 ms: a guest that the scheduler keeps moving is left alone.
    int stayed = 0;
    for (int attempt = 0; attempt < 5; ++attempt) {
        move_to(here, mask);
        guest_ring->follow_worker();
        stayed += ::sched_getcpu() == here;
    }
    EXPECT_GE(stayed, 3);
    ::munmap(region, kRingHeaderBytes);
}

TEST(SharedRing, AttachRefusesAMemoryFileWithoutTheRingLayout) {
    UniqueFd memory;
    ASSERT_TRUE(create_shared_memory(8192, "not-a-ring", &memory).ok());
    std::unique_ptr<RingChannel> ring;
    Status status = RingChannel::attach(memory.get(), &ring);
    EXPECT_FALSE(status.ok());
    EXPECT_THAT(status.message(), HasSubstr("unknown layout"));
}

}  // namespace
}  // namespace ggml_remote
