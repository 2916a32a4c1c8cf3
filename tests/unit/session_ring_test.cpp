// Session::serve over a shared ring (shm: sessions): tensor data that ggml reads
// from and writes to the ring where it lies, on the CPU and on Vulkan0. The same
// bytes as through a socket, at any offset and size (across the ring's wrap,
// larger than the ring, in rows), and a guest's wrong ranges and lengths refused
// with the frames kept in step.
#include <ggml-backend.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "ggml_test_support.h"
#include "host/worker/session/session.h"
#include "protocol/commands.h"

namespace ggml_remote::host {
namespace {

using namespace protocol;
using test_support::pattern_bytes;
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr uint64_t kBufferSize = 8u << 20;

// Vulkan0 as the server loads it (GGML_VK_VISIBLE_DEVICES=0 shows lavapipe); null without one.
ggml_backend_dev_t ring_test_vulkan_device() {
    setenv("GGML_VK_VISIBLE_DEVICES", "0", 0);  // before the first load: it is read once
    test_support::host_cpu_device();
    return ggml_backend_dev_by_name("Vulkan0");
}

// A session served on a socketpair whose frames, after the handshake, go through
// a shared ring, as for an shm: guest. The parameter names the served device.
class RingSession : public ::testing::TestWithParam<std::string> {
  protected:
    void SetUp() override {
        ggml_backend_dev_t vulkan = ring_test_vulkan_device();  // loads the backends with Vulkan0 visible
        ggml_backend_dev_t device = GetParam() == "CPU" ? test_support::host_cpu_device() : vulkan;
        if (device == nullptr) GTEST_SKIP() << "no " << GetParam() << " device (Vulkan: libggml0-backend-vulkan)";
        session = std::make_unique<Session>(std::vector<ggml_backend_dev_t>{device}, SessionLimits{});
        session->allow_shared_memory();
        int fds[2] = {-1, -1};
        ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
        guest = FramedStream(UniqueFd(fds[0]), "host");
        host = FramedStream(UniqueFd(fds[1]), "guest");
        server = std::thread([this] { served = session->serve(host); });
        handshake();
    }

    void TearDown() override {
        guest.close();
        if (server.joinable()) server.join();
    }

    void handshake() {
        Hello::Request hello;
        hello.capabilities = kSessionSharedMemory | kSessionSharedRing;
        send<Hello>(hello);
        std::string payload;
        ASSERT_EQ(receive_reply(&payload), Code::ok) << payload;
        Hello::Reply reply{};
        ASSERT_TRUE(read_pod(ByteView(payload.data(), payload.size()), 0, &reply));
        ASSERT_TRUE(reply.capabilities & kSessionSharedRing);
        ASSERT_FALSE(guest.received_fds().empty());
        std::unique_ptr<RingChannel> ring;
        ASSERT_TRUE(RingChannel::attach(guest.received_fds().front().get(), &ring).ok());
        guest.received_fds().clear();
        guest.attach_ring(std::move(ring));
    }

    template <class Cmd>
    void send(const typename Cmd::Request &request, ByteView tail = ByteView()) {
        FrameHeader header;
        header.command = static_cast<uint16_t>(Cmd::id);
        ASSERT_TRUE(guest.send(header, {ByteView(&request, sizeof(request)), tail}).ok());
    }

    // The next reply's status; its payload (the reply and tail, or the reason) in *payload.
    Code receive_reply(std::string *payload) {
        FrameHeader header;
        Status status = guest.receive_header(&header, 64u << 20);
        EXPECT_TRUE(status.ok()) << status.message();
        if (!status) return Code::disconnected;
        payload->assign(header.payload_size, '\0');
        EXPECT_TRUE(guest.receive(payload->data(), payload->size()).ok());
        return static_cast<Code>(header.status);
    }

    uint64_t alloc(uint64_t size) {
        send<BufferAlloc>(BufferAlloc::Request{0, size});
        std::string payload;
        EXPECT_EQ(receive_reply(&payload), Code::ok) << payload;
        guest.received_fds().clear();  // a CPU buffer's memory file: not needed here
        BufferAlloc::Reply reply{};
        EXPECT_TRUE(read_pod(ByteView(payload.data(), payload.size()), 0, &reply));
        return reply.buffer;
    }

    void set(uint64_t buffer, uint64_t offset, const std::vector<uint8_t> &data) {
        send<SetTensor>(SetTensor::Request{{buffer, offset, data.size()}}, ByteView(data));
    }

    // The bytes a GetTensor reads (after the one-way commands before it); empty on a refusal.
    std::vector<uint8_t> get(uint64_t buffer, uint64_t offset, uint64_t size, std::string *refusal = nullptr) {
        send<GetTensor>(GetTensor::Request{{buffer, offset, size}});
        std::string payload;
        const Code code = receive_reply(&payload);
        if (code != Code::ok) {
            if (refusal != nullptr) *refusal = payload;
            return {};
        }
        return std::vector<uint8_t>(payload.begin(), payload.end());
    }

    std::unique_ptr<Session> session;
    FramedStream guest, host;
    std::thread server;
    Status served = error(Code::error, "serve() did not return");
};

TEST_P(RingSession, WrittenBytesReadBackTheSameAtAnyOffsetAndSizeAcrossWrapsAndBeyondTheRing) {
    const uint64_t buffer = alloc(kBufferSize);
    // Sizes that end mid-ring, fill it exactly, cross its wrap and exceed it.
    const size_t sizes[] = {1, 4099, 300001, kRingCapacity - 16, kRingCapacity, kRingCapacity + 12345, 3u << 20};
    uint64_t offset = 5;
    uint32_t seed = 1;
    for (size_t size : sizes) {
        const std::vector<uint8_t> data = pattern_bytes(size, seed++);
        set(buffer, offset, data);
        EXPECT_EQ(get(buffer, offset, size), data) << size << " bytes at " << offset;
        offset += size + 77;
    }
    // Every write landed where it was sent and nowhere else: a second look at the first.
    EXPECT_EQ(get(buffer, 5, 1), pattern_bytes(1, 1));
}

TEST_P(RingSession, RowsWrittenAndReadInTwoDimensionsLandOnTheirStrideAndLeaveTheGaps) {
    const uint64_t buffer = alloc(kBufferSize);
    constexpr uint64_t kRow = 3000, kStride = 4096, kRows = 700;  // 2.1 MB of rows: more than the ring
    const std::vector<uint8_t> background = pattern_bytes(kRows * kStride, 9);
    set(buffer, 64, background);
    const std::vector<uint8_t> rows = pattern_bytes(kRow * kRows, 10);
    send<SetTensor2d>(SetTensor2d::Request{{buffer, 64 + 11, kRow}, kRows, kStride}, ByteView(rows));

    std::vector<uint8_t> expected = background;
    for (uint64_t i = 0; i < kRows; ++i) {
        std::copy(rows.begin() + i * kRow, rows.begin() + (i + 1) * kRow, expected.begin() + 11 + i * kStride);
    }
    EXPECT_EQ(get(buffer, 64, kRows * kStride), expected);

    send<GetTensor2d>(GetTensor2d::Request{{buffer, 64 + 11, kRow}, kRows, kStride});
    std::string payload;
    ASSERT_EQ(receive_reply(&payload), Code::ok) << payload;
    EXPECT_TRUE(std::vector<uint8_t>(payload.begin(), payload.end()) == rows);
}

TEST_P(RingSession, AWriteOutsideTheBufferIsRefusedUnwrittenAndTheFramesStayInStep) {
    const uint64_t buffer = alloc(1 << 20);
    const std::vector<uint8_t> before = pattern_bytes(1 << 20, 3);
    set(buffer, 0, before);
    // Past the end, by a range that would overflow, and on a handle that does not exist.
    set(buffer, (1 << 20) - 100, pattern_bytes(300000, 4));
    std::string refusal;
    EXPECT_TRUE(get(buffer, 0, 16, &refusal).empty());
    EXPECT_THAT(refusal, StartsWith("set_tensor: "));
    EXPECT_THAT(refusal, HasSubstr("outside buffer"));
    send<SetTensor>(SetTensor::Request{{buffer, ~0ull - 10, 600000}}, ByteView(pattern_bytes(600000, 5)));
    EXPECT_TRUE(get(buffer, 0, 16, &refusal).empty());
    EXPECT_THAT(refusal, HasSubstr("outside buffer"));
    set(buffer + 99, 0, pattern_bytes(2 << 20, 6));
    EXPECT_TRUE(get(buffer, 0, 16, &refusal).empty());
    EXPECT_THAT(refusal, HasSubstr("not valid"));
    EXPECT_EQ(get(buffer, 0, 1 << 20), before) << "a refused write changed nothing";
}

TEST_P(RingSession, DataOfAnotherLengthThanItsRangeIsRefusedUnwritten) {
    const uint64_t buffer = alloc(4 << 20);
    const std::vector<uint8_t> before = pattern_bytes(4 << 20, 7);
    set(buffer, 0, before);
    send<SetTensor>(SetTensor::Request{{buffer, 0, 1000}}, ByteView(pattern_bytes(1500000, 8)));
    std::string refusal;
    EXPECT_TRUE(get(buffer, 0, 16, &refusal).empty());
    EXPECT_THAT(refusal, HasSubstr("1500000 data bytes for a range of 1000"));
    // Rows: their count times their size is not the data sent.
    send<SetTensor2d>(SetTensor2d::Request{{buffer, 0, 1000}, 3, 2000}, ByteView(pattern_bytes(1200000, 8)));
    EXPECT_TRUE(get(buffer, 0, 16, &refusal).empty());
    EXPECT_THAT(refusal, HasSubstr("n_copies * size"));
    // Rows whose last lies past the end.
    send<SetTensor2d>(SetTensor2d::Request{{buffer, 0, 1000}, 1000, 1 << 20}, ByteView(pattern_bytes(1000000, 8)));
    EXPECT_TRUE(get(buffer, 0, 16, &refusal).empty());
    EXPECT_THAT(refusal, HasSubstr("outside buffer"));
    EXPECT_EQ(get(buffer, 0, 4 << 20), before);
}

INSTANTIATE_TEST_SUITE_P(Devices, RingSession, ::testing::Values("CPU", "Vulkan0"),
                         [](const ::testing::TestParamInfo<std::string> &info) { return info.param; });

}  // namespace
}  // namespace ggml_remote::host
