// Session: one guest's view of the host, driven in-process through handle() and
// serve(), on the host's CPU device.
#include "host/worker/session/session.h"

#include <dirent.h>
#include <ggml-backend.h>
#include <ggml.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "ggml_test_support.h"
#include "host/common/peer_channel.h"
#include "host/common/store_channel.h"
#include "host/services/store_owner.h"
#include "protocol/commands.h"
#include "protocol/content_digest.h"
#include "protocol/tensor_codec.h"
#include "transport/peer_exchange.h"
#include "transport/shared_memory.h"

namespace ggml_remote::host {
namespace {

using namespace protocol;
using test_support::bytes_of;
using test_support::floats_of;
using test_support::GgmlContext;
using test_support::host_cpu_device;
using test_support::metadata_context;
using test_support::PlacementArena;
using ::testing::Each;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

// What one handle() call gave back; the tail is copied because it may be a view
// of buffer memory.
struct Outcome {
    Status status;
    std::vector<uint8_t> fixed;
    std::vector<uint8_t> tail;
    UniqueFd fd;  // a descriptor the reply passes along, if any

    template <class Reply>
    Reply reply() const {
        Reply value{};
        EXPECT_EQ(fixed.size(), sizeof(Reply));
        EXPECT_TRUE(read_pod(ByteView(fixed), 0, &value));
        return value;
    }
};

GraphCompute::Request graph_request(uint64_t backend, GraphMode mode = kGraphRunOnce, uint32_t slot = 0) {
    GraphCompute::Request request{};
    request.backend = backend;
    request.mode = mode;
    request.slot = slot;
    return request;
}

class CpuSession : public ::testing::Test {
  protected:
    void SetUp() override {
        cpu = host_cpu_device();
        ASSERT_NE(cpu, nullptr) << "ggml has no CPU device";
        start(SessionLimits{});
    }

    void start(const SessionLimits &limits) { session = std::make_unique<Session>(served_devices(), limits); }
    // What the session serves: the CPU here, another device in a fixture below.
    virtual std::vector<ggml_backend_dev_t> served_devices() const { return {cpu}; }

    // On the fixture's session, or on `on` (from another thread).
    Outcome handle_raw(uint16_t command, const std::vector<uint8_t> &payload, std::vector<UniqueFd> *fds = nullptr,
                       Session *on = nullptr) {
        ReplyFrame reply;
        Outcome outcome;
        outcome.status = (on != nullptr ? on : session.get())->handle(command, ByteView(payload), &reply, fds);
        outcome.fixed = reply.fixed;
        const ByteView tail = reply.tail.bytes();
        outcome.tail.assign(tail.data, tail.data + tail.size);
        outcome.fd = std::move(reply.tail.fd);
        return outcome;
    }

    template <class Cmd>
    Outcome call(const typename Cmd::Request &request, ByteView tail = ByteView(), std::vector<UniqueFd> *fds = nullptr,
                 Session *on = nullptr) {
        std::vector<uint8_t> payload;
        append_pod(payload, request);
        payload.insert(payload.end(), tail.data, tail.data + tail.size);
        return handle_raw(static_cast<uint16_t>(Cmd::id), payload, fds, on);
    }

    void hello(uint64_t capabilities = 0) {
        Hello::Request request;
        request.capabilities = capabilities;
        Outcome outcome = call<Hello>(request);
        ASSERT_TRUE(outcome.status.ok()) << outcome.status.message();
    }

    uint64_t alloc(uint64_t size) {
        Outcome outcome = call<BufferAlloc>(BufferAlloc::Request{0, size});
        EXPECT_TRUE(outcome.status.ok()) << outcome.status.message();
        return outcome.status.ok() ? outcome.reply<BufferAlloc::Reply>().buffer : 0;
    }

    Status set(uint64_t buffer, uint64_t offset, const std::vector<uint8_t> &data) {
        return call<SetTensor>(SetTensor::Request{{buffer, offset, data.size()}}, ByteView(data)).status;
    }

    std::vector<uint8_t> get(uint64_t buffer, uint64_t offset, uint64_t size) {
        Outcome outcome = call<GetTensor>(GetTensor::Request{{buffer, offset, size}});
        EXPECT_TRUE(outcome.status.ok()) << outcome.status.message();
        return outcome.tail;
    }

    uint64_t backend() {
        Outcome outcome = call<BackendInit>(BackendInit::Request{0});
        EXPECT_TRUE(outcome.status.ok()) << outcome.status.message();
        return outcome.status.ok() ? outcome.reply<BackendInit::Reply>().backend : 0;
    }

    ggml_backend_dev_t cpu = nullptr;
    std::unique_ptr<Session> session;
};

// The handshake.

TEST_F(CpuSession, EveryCommandBeforeTheHandshakeIsRefused) {
    EXPECT_EQ(call<DeviceInfo>(DeviceInfo::Request{0}).status.code(), Code::bad_request);
    EXPECT_EQ(call<BufferAlloc>(BufferAlloc::Request{0, 64}).status.code(), Code::bad_request);
    EXPECT_EQ(call<BackendInit>(BackendInit::Request{0}).status.code(), Code::bad_request);
    Status status = call<DeviceMemory>(DeviceMemory::Request{0}).status;
    EXPECT_EQ(status.code(), Code::bad_request);
    EXPECT_THAT(status.message(), HasSubstr("handshake"));
    EXPECT_EQ(session->buffer_count(), 0u);
    EXPECT_EQ(session->counters().commands, 0u);
}

TEST_F(CpuSession, HelloAnswersWithTheProtocolVersionAndDeviceCount) {
    Outcome outcome = call<Hello>(Hello::Request{});
    ASSERT_TRUE(outcome.status.ok()) << outcome.status.message();
    const Hello::Reply reply = outcome.reply<Hello::Reply>();
    EXPECT_EQ(reply.protocol_version, kProtocolVersion);
    EXPECT_EQ(reply.device_count, 1u);
    EXPECT_EQ(reply.capabilities, 0u);
    EXPECT_TRUE(outcome.tail.empty());
}

TEST_F(CpuSession, KeepAlivesAreGrantedOnlyToAGuestThatAsksForThem) {
    Hello::Request request;
    request.capabilities = kSessionKeepAlive;
    Outcome outcome = call<Hello>(request);
    ASSERT_TRUE(outcome.status.ok()) << outcome.status.message();
    EXPECT_EQ(outcome.reply<Hello::Reply>().capabilities, uint64_t(kSessionKeepAlive));
    // A new session, of an older guest: it would not know the frame.
    start(SessionLimits{});
    outcome = call<Hello>(Hello::Request{});
    ASSERT_TRUE(outcome.status.ok()) << outcome.status.message();
    EXPECT_EQ(outcome.reply<Hello::Reply>().capabilities & kSessionKeepAlive, 0u);
}

TEST_F(CpuSession, CommandsAreServedAfterTheHandshake) {
    hello();
    EXPECT_TRUE(call<DeviceMemory>(DeviceMemory::Request{0}).status.ok());
    EXPECT_EQ(session->counters().commands, 2u);
}

// llama.cpp clears its KV cache when it makes it: in the worker's own memory the
// cleared pages take no memory until written.
TEST_F(CpuSession, AClearToZeroLeavesTheWorkersOwnPagesUnbacked) {
    hello();
    constexpr uint64_t kSize = 8u << 20;
    const uint64_t buffer = alloc(kSize);
    ASSERT_TRUE(set(buffer, 0, std::vector<uint8_t>(kSize, 0x5A)).ok());
    std::vector<uint8_t> payload;
    append_pod(payload, GetTensor::Request{{buffer, 0, 1}});
    ReplyFrame reply;
    ASSERT_TRUE(session->handle(static_cast<uint16_t>(CommandId::get_tensor), ByteView(payload), &reply).ok());
    const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
    auto *start = const_cast<uint8_t *>(reply.tail.bytes().data);
    auto resident_pages = [&] {
        std::vector<unsigned char> pages(kSize / page);
        EXPECT_EQ(::mincore(start, kSize, pages.data()), 0);
        return std::count_if(pages.begin(), pages.end(), [](unsigned char p) { return (p & 1) != 0; });
    };
    ASSERT_EQ(resident_pages(), static_cast<long>(kSize / page));
    ASSERT_TRUE(call<BufferClear>(BufferClear::Request{buffer, 0}).status.ok());
    EXPECT_EQ(resident_pages(), 0);
    EXPECT_EQ(get(buffer, kSize / 2, 4096), std::vector<uint8_t>(4096, 0));
    ASSERT_TRUE(call<BufferClear>(BufferClear::Request{buffer, 7}).status.ok());
    EXPECT_EQ(get(buffer, kSize - 4096, 4096), std::vector<uint8_t>(4096, 7)) << "another value is written";
}

TEST_F(CpuSession, HelloWithTheWrongMagicIsABadRequestAndOpensNothing) {
    Hello::Request request;
    request.magic = 0x50545448;  // "HTTP"
    Outcome outcome = call<Hello>(request);
    EXPECT_EQ(outcome.status.code(), Code::bad_request);
    EXPECT_THAT(outcome.status.message(), HasSubstr("magic"));
    EXPECT_EQ(call<DeviceInfo>(DeviceInfo::Request{0}).status.code(), Code::bad_request);
}

TEST_F(CpuSession, HelloWithAnotherVersionNamesBothVersions) {
    Hello::Request request;
    request.protocol_version = kProtocolVersion + 1;
    Outcome outcome = call<Hello>(request);
    EXPECT_EQ(outcome.status.code(), Code::version_mismatch);
    EXPECT_THAT(outcome.status.message(), HasSubstr("guest speaks version " + std::to_string(kProtocolVersion + 1)));
    EXPECT_THAT(outcome.status.message(), HasSubstr("server speaks version " + std::to_string(kProtocolVersion)));
    EXPECT_EQ(call<DeviceInfo>(DeviceInfo::Request{0}).status.code(), Code::bad_request);
}

TEST_F(CpuSession, ShortHelloIsABadRequest) {
    Outcome outcome = handle_raw(static_cast<uint16_t>(CommandId::hello), {0x47, 0x52, 0x4d, 0x54});
    EXPECT_EQ(outcome.status.code(), Code::bad_request);
    EXPECT_THAT(outcome.status.message(), HasSubstr("too short"));
}

TEST_F(CpuSession, UnknownCommandIdsAreBadRequests) {
    hello();
    for (uint16_t command : {uint16_t(0), static_cast<uint16_t>(CommandId::count_), uint16_t(0xffff)}) {
        Outcome outcome = handle_raw(command, {});
        EXPECT_EQ(outcome.status.code(), Code::bad_request) << command;
        EXPECT_THAT(outcome.status.message(), HasSubstr("unknown command " + std::to_string(command)));
    }
}

// Calls f(Cmd{}) for every command of the protocol's list.
template <class F>
void for_each_command(F f) {
    std::apply([&f](auto... command) { (f(command), ...); }, AllCommands{});
}

TEST_F(CpuSession, EveryCommandHasAHandler) {
    hello();
    for_each_command([this](auto command) {
        using Cmd = decltype(command);
        Outcome outcome = call<Cmd>(typename Cmd::Request{});
        EXPECT_THAT(outcome.status.message(), Not(HasSubstr("unknown command"))) << command_name(Cmd::id);
    });
}

TEST_F(CpuSession, EveryCommandWithoutATailRefusesOneByteMore) {
    hello();
    const std::vector<uint8_t> one_more = {0};
    size_t without_tail = 0;
    for_each_command([&](auto command) {
        using Cmd = decltype(command);
        if (takes_tail(Cmd::id)) return;
        ++without_tail;
        Outcome outcome = call<Cmd>(typename Cmd::Request{}, ByteView(one_more));
        EXPECT_EQ(outcome.status.code(), Code::bad_request) << command_name(Cmd::id);
        EXPECT_THAT(outcome.status.message(), HasSubstr("takes no tail")) << command_name(Cmd::id);
    });
    EXPECT_GT(without_tail, 0u);
}

TEST_F(CpuSession, AValidRequestWithOneByteMoreIsRefusedAndNotCarriedOut) {
    hello();
    const uint64_t buffer = alloc(16);
    ASSERT_TRUE(call<BufferClear>(BufferClear::Request{buffer, 0}).status.ok());
    const std::vector<uint8_t> one_more = {0};
    Outcome outcome = call<BufferClear>(BufferClear::Request{buffer, 0x5a}, ByteView(one_more));
    EXPECT_EQ(outcome.status.code(), Code::bad_request);
    EXPECT_THAT(outcome.status.message(),
                HasSubstr("buffer_clear: request of " + std::to_string(sizeof(BufferClear::Request) + 1) + " bytes"));
    EXPECT_THAT(get(buffer, 0, 16), Each(0));
}

TEST_F(CpuSession, AHelloLongerThanOursStillNamesBothVersions) {
    Hello::Request request;
    request.protocol_version = kProtocolVersion + 1;
    const std::vector<uint8_t> newer_fields(8, 0);
    Outcome outcome = call<Hello>(request, ByteView(newer_fields));
    EXPECT_EQ(outcome.status.code(), Code::version_mismatch);
}

// Devices.

TEST_F(CpuSession, DeviceInfoDescribesTheHostCpu) {
    hello();
    Outcome outcome = call<DeviceInfo>(DeviceInfo::Request{0});
    ASSERT_TRUE(outcome.status.ok()) << outcome.status.message();
    const DeviceInfo::Reply reply = outcome.reply<DeviceInfo::Reply>();
    EXPECT_EQ(reply.type, static_cast<uint32_t>(GGML_BACKEND_DEVICE_TYPE_CPU));
    EXPECT_GT(reply.buffer_alignment, 0u);
    EXPECT_EQ(reply.buffer_alignment & (reply.buffer_alignment - 1), 0u) << "alignment is a power of two";
    EXPECT_EQ(reply.buffer_in_cpu_memory, 1);
    EXPECT_GT(reply.buffer_max_size, 0u);

    // Tail: name, description and buffer type name, each NUL-terminated.
    ASSERT_FALSE(outcome.tail.empty());
    EXPECT_EQ(outcome.tail.back(), '\0');
    std::vector<std::string> strings;
    std::string current;
    for (uint8_t byte : outcome.tail) {
        if (byte == '\0') {
            strings.push_back(current);
            current.clear();
        } else {
            current.push_back(static_cast<char>(byte));
        }
    }
    ASSERT_EQ(strings.size(), 3u);
    EXPECT_EQ(strings[0], ggml_backend_dev_name(cpu));
    EXPECT_EQ(strings[1], ggml_backend_dev_description(cpu));
    EXPECT_EQ(strings[2], ggml_backend_buft_name(ggml_backend_dev_buffer_type(cpu)));
    EXPECT_FALSE(strings[0].empty());
}

TEST_F(CpuSession, DeviceMemoryReportsFreeWithinTotal) {
    hello();
    Outcome outcome = call<DeviceMemory>(DeviceMemory::Request{0});
    ASSERT_TRUE(outcome.status.ok()) << outcome.status.message();
    const DeviceMemory::Reply reply = outcome.reply<DeviceMemory::Reply>();
    EXPECT_GT(reply.memory_total, 0u);
    EXPECT_LE(reply.memory_free, reply.memory_total);
}

TEST_F(CpuSession, DeviceIndexPastTheLastIsNotFound) {
    hello();
    Status status = call<DeviceInfo>(DeviceInfo::Request{1}).status;
    EXPECT_EQ(status.code(), Code::not_found);
    EXPECT_THAT(status.message(), HasSubstr("device 1 does not exist"));
    EXPECT_EQ(call<BufferAlloc>(BufferAlloc::Request{7, 64}).status.code(), Code::not_found);
    EXPECT_EQ(call<BackendInit>(BackendInit::Request{1}).status.code(), Code::not_found);
}

// Buffers and their bytes.

TEST_F(CpuSession, BufferAllocReturnsAHandleAndTheSize) {
    hello();
    Outcome outcome = call<BufferAlloc>(BufferAlloc::Request{0, 4096});
    ASSERT_TRUE(outcome.status.ok()) << outcome.status.message();
    const BufferAlloc::Reply reply = outcome.reply<BufferAlloc::Reply>();
    EXPECT_EQ(reply.buffer, 1u);
    EXPECT_EQ(reply.size, 4096u);
    EXPECT_EQ(session->buffer_count(), 1u);
    EXPECT_EQ(session->memory_in_use(), 4096u);
}

TEST_F(CpuSession, SetThenGetReturnsTheSameBytes) {
    hello();
    const uint64_t buffer = alloc(256);
    const std::vector<uint8_t> data = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13};
    ASSERT_TRUE(set(buffer, 100, data).ok());
    EXPECT_EQ(get(buffer, 100, data.size()), data);
    EXPECT_EQ(get(buffer, 103, 3), (std::vector<uint8_t>{4, 5, 6}));
}

TEST_F(CpuSession, SetAndGetReachTheLastByteOfABuffer) {
    hello();
    const uint64_t buffer = alloc(64);
    ASSERT_TRUE(set(buffer, 60, {0xde, 0xad, 0xbe, 0xef}).ok());
    EXPECT_EQ(get(buffer, 60, 4), (std::vector<uint8_t>{0xde, 0xad, 0xbe, 0xef}));
}

TEST_F(CpuSession, SetWhoseDataDisagreesWithItsRangeIsRefused) {
    hello();
    const uint64_t buffer = alloc(64);
    const std::vector<uint8_t> four = {1, 2, 3, 4};
    Status status = call<SetTensor>(SetTensor::Request{{buffer, 0, 8}}, ByteView(four)).status;
    EXPECT_EQ(status.code(), Code::bad_request);
    EXPECT_THAT(status.message(), HasSubstr("4 data bytes for a range of 8"));
}

TEST_F(CpuSession, SetAndGetPastTheEndOfTheBufferAreRefused) {
    hello();
    const uint64_t buffer = alloc(64);
    const std::vector<uint8_t> eight(8, 0x11);
    Status status = set(buffer, 60, eight);
    EXPECT_EQ(status.code(), Code::bad_request);
    EXPECT_THAT(status.message(), HasSubstr("outside buffer"));
    EXPECT_EQ(call<GetTensor>(GetTensor::Request{{buffer, 60, 8}}).status.code(), Code::bad_request);
    EXPECT_EQ(call<GetTensor>(GetTensor::Request{{buffer, 65, 0}}).status.code(), Code::bad_request);
    EXPECT_EQ(call<MemsetTensor>(MemsetTensor::Request{{buffer, 64, 1}, 0}).status.code(), Code::bad_request);
}

TEST_F(CpuSession, RangesWhoseEndOverflowsAreRefused) {
    hello();
    const uint64_t buffer = alloc(64);
    const std::vector<uint8_t> eight(8, 0x11);
    EXPECT_EQ(set(buffer, UINT64_MAX - 3, eight).code(), Code::bad_request);
    EXPECT_EQ(call<GetTensor>(GetTensor::Request{{buffer, 16, UINT64_MAX - 8}}).status.code(), Code::bad_request);
    EXPECT_EQ(call<GetTensor>(GetTensor::Request{{buffer, UINT64_MAX, 2}}).status.code(), Code::bad_request);
    EXPECT_EQ(call<MemsetTensor>(MemsetTensor::Request{{buffer, 8, UINT64_MAX}, 0}).status.code(), Code::bad_request);
}

TEST_F(CpuSession, TwoDimensionalSetAndGetUseTheStride) {
    hello();
    const uint64_t buffer = alloc(64);
    ASSERT_TRUE(call<BufferClear>(BufferClear::Request{buffer, 0}).status.ok());
    const std::vector<uint8_t> rows = {1, 2, 3, 4, 5, 6};  // 3 rows of 2 bytes, 16 apart
    ASSERT_TRUE(call<SetTensor2d>(SetTensor2d::Request{{buffer, 4, 2}, 3, 16}, ByteView(rows)).status.ok());
    EXPECT_EQ(get(buffer, 0, 8), (std::vector<uint8_t>{0, 0, 0, 0, 1, 2, 0, 0}));
    EXPECT_EQ(get(buffer, 20, 2), (std::vector<uint8_t>{3, 4}));
    EXPECT_EQ(get(buffer, 36, 2), (std::vector<uint8_t>{5, 6}));
    Outcome outcome = call<GetTensor2d>(GetTensor2d::Request{{buffer, 4, 2}, 3, 16});
    ASSERT_TRUE(outcome.status.ok()) << outcome.status.message();
    EXPECT_EQ(outcome.tail, rows);
}

TEST_F(CpuSession, TwoDimensionalRowsPastTheEndAreRefused) {
    hello();
    const uint64_t buffer = alloc(64);
    const std::vector<uint8_t> rows(8, 9);
    EXPECT_EQ(call<SetTensor2d>(SetTensor2d::Request{{buffer, 0, 2}, 4, 32}, ByteView(rows)).status.code(),
              Code::bad_request);
    EXPECT_EQ(call<GetTensor2d>(GetTensor2d::Request{{buffer, 0, 2}, 2, UINT64_MAX}).status.code(), Code::bad_request);
    EXPECT_EQ(call<SetTensor2d>(SetTensor2d::Request{{buffer, 0, 2}, 3, 8}, ByteView(rows)).status.code(),
              Code::bad_request)
        << "8 bytes of data for 3 rows of 2";
}

TEST_F(CpuSession, MemsetWritesOnlyItsRange) {
    hello();
    const uint64_t buffer = alloc(32);
    ASSERT_TRUE(call<BufferClear>(BufferClear::Request{buffer, 0}).status.ok());
    ASSERT_TRUE(call<MemsetTensor>(MemsetTensor::Request{{buffer, 8, 4}, 7}).status.ok());
    const std::vector<uint8_t> bytes = get(buffer, 0, 16);
    EXPECT_EQ(bytes, (std::vector<uint8_t>{0, 0, 0, 0, 0, 0, 0, 0, 7, 7, 7, 7, 0, 0, 0, 0}));
}

TEST_F(CpuSession, BufferClearFillsEveryByte) {
    hello();
    const uint64_t buffer = alloc(100);
    ASSERT_TRUE(call<BufferClear>(BufferClear::Request{buffer, 0xab}).status.ok());
    EXPECT_THAT(get(buffer, 0, 100), Each(0xab));
}

TEST_F(CpuSession, CopyMovesBytesBetweenTwoBuffers) {
    hello();
    const uint64_t source = alloc(64);
    const uint64_t destination = alloc(64);
    ASSERT_TRUE(call<BufferClear>(BufferClear::Request{destination, 0}).status.ok());
    const std::vector<uint8_t> pattern = {9, 8, 7, 6, 5, 4, 3, 2};
    ASSERT_TRUE(set(source, 8, pattern).ok());
    Outcome outcome = call<CopyTensor>(CopyTensor::Request{{source, 8, 8}, {destination, 40, 8}});
    ASSERT_TRUE(outcome.status.ok()) << outcome.status.message();
    EXPECT_EQ(outcome.reply<CopyTensor::Reply>().copied, 1);
    EXPECT_EQ(get(destination, 40, 8), pattern);
    EXPECT_THAT(get(destination, 0, 40), Each(0));
    EXPECT_EQ(get(source, 8, 8), pattern);
}

TEST_F(CpuSession, CopyWithinOneBufferWorksWhenRangesAreDisjoint) {
    hello();
    const uint64_t buffer = alloc(64);
    ASSERT_TRUE(set(buffer, 0, {1, 2, 3, 4}).ok());
    ASSERT_TRUE(call<CopyTensor>(CopyTensor::Request{{buffer, 0, 4}, {buffer, 4, 4}}).status.ok());
    EXPECT_EQ(get(buffer, 0, 8), (std::vector<uint8_t>{1, 2, 3, 4, 1, 2, 3, 4}));
}

TEST_F(CpuSession, CopyBetweenOverlappingRangesIsRefused) {
    hello();
    const uint64_t buffer = alloc(64);
    Status status = call<CopyTensor>(CopyTensor::Request{{buffer, 0, 8}, {buffer, 4, 8}}).status;
    EXPECT_EQ(status.code(), Code::bad_request);
    EXPECT_THAT(status.message(), HasSubstr("overlap"));
}

TEST_F(CpuSession, CopyOfDifferentSizesOrOutOfRangeIsRefused) {
    hello();
    const uint64_t source = alloc(64);
    const uint64_t destination = alloc(16);
    EXPECT_EQ(call<CopyTensor>(CopyTensor::Request{{source, 0, 8}, {destination, 0, 4}}).status.code(),
              Code::bad_request);
    EXPECT_EQ(call<CopyTensor>(CopyTensor::Request{{source, 0, 32}, {destination, 0, 32}}).status.code(),
              Code::bad_request);
    EXPECT_EQ(call<CopyTensor>(CopyTensor::Request{{source, 0, 8}, {999, 0, 8}}).status.code(), Code::not_found);
}

TEST_F(CpuSession, FreedBufferHandleIsStale) {
    hello();
    const uint64_t buffer = alloc(64);
    ASSERT_TRUE(call<BufferFree>(BufferFree::Request{buffer}).status.ok());
    EXPECT_EQ(session->buffer_count(), 0u);
    EXPECT_EQ(session->memory_in_use(), 0u);

    const std::vector<uint8_t> data = {1};
    Status status = set(buffer, 0, data);
    EXPECT_EQ(status.code(), Code::not_found);
    EXPECT_THAT(status.message(), HasSubstr("buffer handle " + std::to_string(buffer)));
    EXPECT_EQ(call<GetTensor>(GetTensor::Request{{buffer, 0, 1}}).status.code(), Code::not_found);
    EXPECT_EQ(call<MemsetTensor>(MemsetTensor::Request{{buffer, 0, 1}, 0}).status.code(), Code::not_found);
    EXPECT_EQ(call<BufferClear>(BufferClear::Request{buffer, 0}).status.code(), Code::not_found);
    EXPECT_EQ(call<BufferReset>(BufferReset::Request{buffer}).status.code(), Code::not_found);
    EXPECT_EQ(call<BufferFree>(BufferFree::Request{buffer}).status.code(), Code::not_found);
}

TEST_F(CpuSession, ANewBufferStartsZeroedWhereAFreedOneHeldData) {
    hello();
    for (int round = 0; round < 2; ++round) {
        const uint64_t buffer = alloc(4096);
        EXPECT_EQ(get(buffer, 0, 4096), std::vector<uint8_t>(4096, 0)) << "round " << round;
        ASSERT_TRUE(set(buffer, 0, std::vector<uint8_t>(4096, 0xab)).ok());
        ASSERT_TRUE(call<BufferFree>(BufferFree::Request{buffer}).status.ok());
    }
}

TEST_F(CpuSession, BufferHandlesAreNotReusedAfterFree) {
    hello();
    const uint64_t first = alloc(64);
    ASSERT_TRUE(call<BufferFree>(BufferFree::Request{first}).status.ok());
    const uint64_t second = alloc(64);
    EXPECT_NE(second, first);
    EXPECT_EQ(call<GetTensor>(GetTensor::Request{{first, 0, 1}}).status.code(), Code::not_found);
    EXPECT_EQ(call<GetTensor>(GetTensor::Request{{0, 0, 1}}).status.code(), Code::not_found);
}

// Session limits.

TEST_F(CpuSession, AllocationBeyondTheMemoryQuotaIsRefused) {
    SessionLimits limits;
    limits.memory_quota = 1024;
    start(limits);
    hello();
    const uint64_t first = alloc(600);
    Outcome over = call<BufferAlloc>(BufferAlloc::Request{0, 600});
    EXPECT_EQ(over.status.code(), Code::limit_exceeded);
    EXPECT_THAT(over.status.message(), HasSubstr("quota of 1024 bytes"));
    EXPECT_EQ(session->memory_in_use(), 600u);
    EXPECT_EQ(session->buffer_count(), 1u);

    alloc(424);  // exactly up to the quota
    EXPECT_EQ(session->memory_in_use(), 1024u);
    EXPECT_EQ(call<BufferAlloc>(BufferAlloc::Request{0, 1}).status.code(), Code::limit_exceeded);

    ASSERT_TRUE(call<BufferFree>(BufferFree::Request{first}).status.ok());
    EXPECT_EQ(session->memory_in_use(), 424u);
    alloc(600);
    EXPECT_EQ(session->memory_in_use(), 1024u);
}

TEST_F(CpuSession, AllocationLargerThanTheWholeQuotaIsRefusedWithoutOverflow) {
    SessionLimits limits;
    limits.memory_quota = 1024;
    start(limits);
    hello();
    alloc(512);
    EXPECT_EQ(call<BufferAlloc>(BufferAlloc::Request{0, 1025}).status.code(), Code::limit_exceeded);
    EXPECT_EQ(call<BufferAlloc>(BufferAlloc::Request{0, UINT64_MAX}).status.code(), Code::limit_exceeded);
    EXPECT_EQ(call<BufferAlloc>(BufferAlloc::Request{0, UINT64_MAX - 511}).status.code(), Code::limit_exceeded);
    EXPECT_EQ(session->memory_in_use(), 512u);
}

TEST_F(CpuSession, BufferCountLimitIsEnforcedAndFreedSlotsCanBeReused) {
    SessionLimits limits;
    limits.max_buffers = 2;
    start(limits);
    hello();
    const uint64_t first = alloc(16);
    alloc(16);
    Outcome third = call<BufferAlloc>(BufferAlloc::Request{0, 16});
    EXPECT_EQ(third.status.code(), Code::limit_exceeded);
    EXPECT_THAT(third.status.message(), HasSubstr("2 buffers"));
    ASSERT_TRUE(call<BufferFree>(BufferFree::Request{first}).status.ok());
    EXPECT_TRUE(call<BufferAlloc>(BufferAlloc::Request{0, 16}).status.ok());
}

// Op queries.

// Every kind of object a guest can make the host create has a cap.

TEST_F(CpuSession, BackendsBeyondTheCapAreRefusedAndAFreedOneMakesRoom) {
    SessionLimits limits;
    limits.max_backends = 2;
    start(limits);
    hello();
    const uint64_t first = backend();
    backend();
    Outcome third = call<BackendInit>(BackendInit::Request{0});
    EXPECT_EQ(third.status.code(), Code::limit_exceeded);
    EXPECT_THAT(third.status.message(), HasSubstr("2 backends (--max-backends)"));
    EXPECT_EQ(session->backend_count(), 2u);
    ASSERT_TRUE(call<BackendFree>(BackendFree::Request{first}).status.ok());
    EXPECT_NE(backend(), 0u);
}

TEST_F(CpuSession, BackendsAreCappedByDefault) {
    hello();
    const uint32_t cap = SessionLimits{}.max_backends;
    ASSERT_GT(cap, 0u);
    ASSERT_LE(cap, 64u) << "each backend holds a thread pool: the default cap must be small";
    for (uint32_t i = 0; i < cap; ++i) ASSERT_NE(backend(), 0u);
    EXPECT_EQ(call<BackendInit>(BackendInit::Request{0}).status.code(), Code::limit_exceeded);
}

// Refusals are counted by the class of their error, for the metrics endpoint.

TEST_F(CpuSession, RefusedCommandsAreCountedByTheClassOfTheirError) {
    SessionLimits limits;
    limits.max_backends = 1;
    start(limits);
    hello();
    backend();
    EXPECT_EQ(call<BackendInit>(BackendInit::Request{0}).status.code(), Code::limit_exceeded);
    EXPECT_EQ(call<BufferFree>(BufferFree::Request{12345}).status.code(), Code::not_found);
    EXPECT_EQ(handle_raw(0xffff, {}).status.code(), Code::bad_request);
    const auto &refused = session->counters().commands_refused;
    EXPECT_EQ(refused[static_cast<size_t>(CommandRefusal::limit_reached)], 1u);
    EXPECT_EQ(refused[static_cast<size_t>(CommandRefusal::invalid_request)], 2u);
    EXPECT_EQ(refused[static_cast<size_t>(CommandRefusal::unsupported)], 0u);
    EXPECT_EQ(refused[static_cast<size_t>(CommandRefusal::host_error)], 0u);
}

TEST_F(CpuSession, AFailedHandshakeIsNoCommandRefusal) {
    Hello::Request request;
    request.protocol_version = kProtocolVersion + 1;
    EXPECT_EQ(call<Hello>(request).status.code(), Code::version_mismatch);
    EXPECT_EQ(call<DeviceInfo>(DeviceInfo::Request{0}).status.code(), Code::bad_request);
    EXPECT_FALSE(session->handshaken());
    EXPECT_THAT(session->counters().commands_refused, Each(0u));
}

TEST_F(CpuSession, SecondHandshakeIsRefusedAndTheSessionGoesOn) {
    hello();
    Outcome again = call<Hello>(Hello::Request{});
    EXPECT_EQ(again.status.code(), Code::bad_request);
    EXPECT_THAT(again.status.message(), HasSubstr("already"));
    EXPECT_NE(alloc(64), 0u);
}

TEST_F(CpuSession, SupportsOpAnswersForAPlainAdd) {
    hello();
    GgmlContext ctx = metadata_context();
    ggml_tensor *x = ggml_new_tensor_1d(ctx.get(), GGML_TYPE_F32, 16);
    ggml_tensor *sum = ggml_add(ctx.get(), x, x);
    TensorListEncoder encoder{TensorListEncoder::Locator()};
    encoder.add(sum);
    const std::vector<uint8_t> list = encoder.finish();
    Outcome outcome = call<SupportsOp>(SupportsOp::Request{0}, ByteView(list));
    ASSERT_TRUE(outcome.status.ok()) << outcome.status.message();
    EXPECT_EQ(outcome.reply<SupportsOp::Reply>().supported, 1);
}

TEST_F(CpuSession, AllocSizeOfAPlainTensorIsItsBytes) {
    hello();
    GgmlContext ctx = metadata_context();
    ggml_tensor *x = ggml_new_tensor_2d(ctx.get(), GGML_TYPE_F32, 16, 3);
    TensorListEncoder encoder{TensorListEncoder::Locator()};
    encoder.add(x);
    const std::vector<uint8_t> list = encoder.finish();
    Outcome outcome = call<AllocSize>(AllocSize::Request{0}, ByteView(list));
    ASSERT_TRUE(outcome.status.ok()) << outcome.status.message();
    EXPECT_EQ(outcome.reply<AllocSize::Reply>().size, 16u * 3 * sizeof(float));
}

TEST_F(CpuSession, OpQueryNamingABufferIsRefused) {
    hello();
    const uint64_t buffer = alloc(64);
    GgmlContext ctx = metadata_context();
    PlacementArena arena(buffer, 64);
    ggml_tensor *x = ggml_new_tensor_1d(ctx.get(), GGML_TYPE_F32, 4);
    arena.place(x, 0);
    TensorListEncoder encoder(arena.locator());
    encoder.add(ggml_add(ctx.get(), x, x));
    const std::vector<uint8_t> list = encoder.finish();
    EXPECT_EQ(call<SupportsOp>(SupportsOp::Request{0}, ByteView(list)).status.code(), Code::bad_request);
    EXPECT_EQ(call<SupportsOp>(SupportsOp::Request{0}).status.code(), Code::bad_request) << "no tensor list";
}

// graph_optimize: the host backend's node order, asked before the guest allocates.

// A graph of x + y, (x + y) * 2 and x * y, without data: what the guest's scheduler
// has when it asks. With `arena`, x has data in the arena's buffer instead.
std::vector<uint8_t> optimize_list(ggml_context *ctx, PlacementArena *arena = nullptr) {
    ggml_tensor *x = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 8), *y = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 8);
    ggml_tensor *sum = ggml_add(ctx, x, y);
    ggml_tensor *twice = ggml_scale(ctx, sum, 2.0f);
    ggml_tensor *product = ggml_mul(ctx, x, y);
    if (arena != nullptr) arena->place(x, 0);
    TensorListEncoder encoder(arena != nullptr ? arena->locator() : TensorListEncoder::Locator());
    for (ggml_tensor *node : {sum, twice, product}) encoder.add_node(node);
    return encoder.finish();
}

TEST_F(CpuSession, GraphOptimizeOnABackendWithoutOneKeepsTheOrder) {
    hello();
    const uint64_t cpu_backend = backend();
    GgmlContext ctx = metadata_context();
    Outcome outcome = call<GraphOptimize>(GraphOptimize::Request{cpu_backend}, ByteView(optimize_list(ctx.get())));
    ASSERT_TRUE(outcome.status.ok()) << outcome.status.message();
    EXPECT_EQ(outcome.reply<GraphOptimize::Reply>().has_optimizer, 0);
    EXPECT_TRUE(outcome.tail.empty());
}

TEST_F(CpuSession, GraphOptimizeOnAnUnknownBackendIsNotFound) {
    hello();
    GgmlContext ctx = metadata_context();
    EXPECT_EQ(call<GraphOptimize>(GraphOptimize::Request{77}, ByteView(optimize_list(ctx.get()))).status.code(),
              Code::not_found);
}

// Graph compute: the guest's graph, placed by the guest at offsets in a session buffer.
class CpuSessionGraph : public CpuSession {
  protected:
    void SetUp() override {
        CpuSession::SetUp();
        if (HasFatalFailure()) return;
        hello();
        buffer = alloc(kBufferSize);
        ASSERT_TRUE(call<BufferClear>(BufferClear::Request{buffer, 0}).status.ok());
        compute_backend = backend();
        arena = std::make_unique<PlacementArena>(buffer, 4096);
    }

    ggml_tensor *vector(const char *name) {
        ggml_tensor *tensor = ggml_new_tensor_1d(ctx.get(), GGML_TYPE_F32, kLength);
        ggml_set_name(tensor, name);
        return tensor;
    }

    // Sends the graph of `outputs` as the guest backend does: ggml_build_forward_expand
    // (which marks each node GGML_TENSOR_FLAG_COMPUTE), then every node in order.
    Outcome compute(std::initializer_list<ggml_tensor *> outputs) {
        ggml_cgraph *graph = ggml_new_graph(ctx.get());
        for (ggml_tensor *output : outputs) ggml_build_forward_expand(graph, output);
        return compute_nodes(graph);
    }

    Outcome compute_nodes(ggml_cgraph *graph) { return compute_list(encode_nodes(graph)); }

    std::vector<uint8_t> encode_nodes(ggml_cgraph *graph) {
        TensorListEncoder encoder(arena->locator());
        for (int i = 0; i < ggml_graph_n_nodes(graph); ++i) encoder.add_node(ggml_graph_node(graph, i));
        EXPECT_FALSE(encoder.failed()) << encoder.error();
        return encoder.finish();
    }

    Outcome compute_list(const std::vector<uint8_t> &list, GraphMode mode = kGraphRunOnce, uint32_t slot = 0) {
        return call<GraphCompute>(graph_request(compute_backend, mode, slot), ByteView(list));
    }

    Outcome replay(uint32_t slot) { return call<GraphCompute>(graph_request(compute_backend, kGraphReplay, slot)); }

    // c = a + b over the fixture's buffer: a at 0, b at 32, c at 64; a and b set.
    std::vector<uint8_t> sum_graph() {
        ggml_tensor *a = vector("a"), *b = vector("b");
        ggml_tensor *c = ggml_add(ctx.get(), a, b);
        arena->place(a, 0);
        arena->place(b, 32);
        arena->place(c, 64);
        EXPECT_TRUE(set(buffer, 0, bytes_of(a_values)).ok());
        EXPECT_TRUE(set(buffer, 32, bytes_of(b_values)).ok());
        ggml_cgraph *graph = ggml_new_graph(ctx.get());
        ggml_build_forward_expand(graph, c);
        return encode_nodes(graph);
    }

    static constexpr int64_t kLength = 8;  // 32 bytes of f32
    static constexpr uint64_t kBufferSize = 128;
    GgmlContext ctx = metadata_context(256, 4);
    uint64_t buffer = 0;
    uint64_t compute_backend = 0;
    std::unique_ptr<PlacementArena> arena;
    const std::vector<float> a_values = {1, 2, 3, 4, 5, 6, 7, 8};
    const std::vector<float> b_values = {10, 20, 30, 40, 50, 60, 70, 80};
};

TEST_F(CpuSessionGraph, AddComputesIntoItsPlaceInTheBuffer) {
    ggml_tensor *a = vector("a"), *b = vector("b");
    ggml_tensor *c = ggml_add(ctx.get(), a, b);
    arena->place(a, 0);
    arena->place(b, 32);
    arena->place(c, 64);
    ASSERT_TRUE(set(buffer, 0, bytes_of(a_values)).ok());
    ASSERT_TRUE(set(buffer, 32, bytes_of(b_values)).ok());

    Outcome outcome = compute({c});
    ASSERT_TRUE(outcome.status.ok()) << outcome.status.message();
    EXPECT_TRUE(outcome.fixed.empty()) << "graph_compute is one-way: no reply of its own";
    EXPECT_THAT(floats_of(get(buffer, 64, 32)), ElementsAre(11, 22, 33, 44, 55, 66, 77, 88));
    EXPECT_THAT(floats_of(get(buffer, 0, 32)), ElementsAre(1, 2, 3, 4, 5, 6, 7, 8));
    EXPECT_EQ(session->counters().graph_computes, 1u);
}

// /metrics' histograms: each compute is timed, and so is a CPU compute's wait for
// cores (none here: it is alone); a round trip is timed by serve(), not here.
TEST_F(CpuSessionGraph, EachComputeIsObservedInTheHistograms) {
    const std::vector<uint8_t> graph = sum_graph();
    ASSERT_TRUE(compute_list(graph).status.ok());
    ASSERT_TRUE(compute_list(graph).status.ok());
    const SessionCounters figures = session->counters();
    const auto histogram = [&](SessionHistogram which) { return figures.histograms[static_cast<size_t>(which)]; };
    EXPECT_EQ(histogram(SessionHistogram::graph_compute).count(), 2u);
    EXPECT_EQ(histogram(SessionHistogram::cores_wait).count(), 2u);
    EXPECT_EQ(histogram(SessionHistogram::cores_wait).sum_ns, 0u);
    EXPECT_EQ(histogram(SessionHistogram::compute_round_trip).count(), 0u);
}

TEST_F(CpuSessionGraph, NodesComputeInOrderAndReuseEarlierResults) {
    ggml_tensor *a = vector("a"), *b = vector("b");
    ggml_tensor *sum = ggml_add(ctx.get(), a, b);
    ggml_tensor *product = ggml_mul(ctx.get(), sum, a);
    arena->place(a, 0);
    arena->place(b, 32);
    arena->place(sum, 64);
    arena->place(product, 96);
    ASSERT_TRUE(set(buffer, 0, bytes_of(a_values)).ok());
    ASSERT_TRUE(set(buffer, 32, bytes_of(b_values)).ok());

    Outcome outcome = compute({sum, product});
    ASSERT_TRUE(outcome.status.ok()) << outcome.status.message();
    EXPECT_THAT(floats_of(get(buffer, 96, 32)), ElementsAre(11, 44, 99, 176, 275, 396, 539, 704));
}

TEST_F(CpuSessionGraph, NodeWhoseComputeFlagTheGuestClearedIsSkipped) {
    ggml_tensor *a = vector("a"), *b = vector("b");
    ggml_tensor *sum = ggml_add(ctx.get(), a, b);
    arena->place(a, 0);
    arena->place(b, 32);
    arena->place(sum, 64);
    ASSERT_TRUE(set(buffer, 0, bytes_of(a_values)).ok());
    ASSERT_TRUE(set(buffer, 32, bytes_of(b_values)).ok());
    ggml_cgraph *graph = ggml_new_graph(ctx.get());
    ggml_build_forward_expand(graph, sum);
    ASSERT_NE(sum->flags & GGML_TENSOR_FLAG_COMPUTE, 0);
    sum->flags &= ~GGML_TENSOR_FLAG_COMPUTE;  // as ggml's scheduler does for a node another one fused

    Outcome outcome = compute_nodes(graph);
    ASSERT_TRUE(outcome.status.ok()) << outcome.status.message();
    EXPECT_THAT(get(buffer, 64, 32), Each(0));
}

TEST_F(CpuSessionGraph, TensorWhoseDataRunsPastItsBufferIsRefusedAndNothingIsComputed) {
    ggml_tensor *a = vector("a"), *b = vector("b");
    ggml_tensor *sum = ggml_add(ctx.get(), a, b);
    ggml_tensor *product = ggml_mul(ctx.get(), sum, a);
    ggml_set_name(product, "product");
    arena->place(a, 0);
    arena->place(b, 32);
    arena->place(sum, 64);
    arena->place(product, kBufferSize - 16);  // 32 bytes from 16 before the end
    ASSERT_TRUE(set(buffer, 0, bytes_of(a_values)).ok());
    ASSERT_TRUE(set(buffer, 32, bytes_of(b_values)).ok());

    Outcome outcome = compute({sum, product});
    EXPECT_EQ(outcome.status.code(), Code::bad_request);
    EXPECT_THAT(outcome.status.message(), HasSubstr("'product'"));
    EXPECT_THAT(outcome.status.message(), HasSubstr("outside its buffer of 128 bytes"));
    EXPECT_THAT(get(buffer, 64, 64), Each(0)) << "the first node was computed before the refusal";
    EXPECT_EQ(session->counters().graph_computes, 0u);
}

// Issue 14's out-of-bounds write: POOL_1D's kernel walks src[0]'s rows and writes
// result row i at i * nb[1], even where the result claims ne[1] = 1, so the span
// check (which multiplies nb[1] by ne[1] - 1 = 0) never sees that stride. Here the
// result is one 4-float row at 64 with nb[1] = 32: the kernel would write rows 1-3
// at 96, 128 and 160, past the result and into the canary after it.
TEST_F(CpuSessionGraph, AStrideOfASizeOneDimensionCannotAimAWrite) {
    ggml_tensor *rows = ggml_new_tensor_2d(ctx.get(), GGML_TYPE_F32, 4, 4);
    ggml_tensor *pooled = ggml_pool_1d(ctx.get(), rows, GGML_OP_POOL_MAX, 1, 1, 0);
    pooled->ne[1] = 1;
    pooled->nb[1] = 32;
    pooled->nb[2] = pooled->nb[3] = 32;
    ggml_set_name(pooled, "aimed");
    arena->place(rows, 0);
    arena->place(pooled, 64);
    const std::vector<uint8_t> canary(kBufferSize - 80, 0xA5);
    ASSERT_TRUE(set(buffer, 80, canary).ok());
    ASSERT_TRUE(set(buffer, 0, std::vector<uint8_t>(64, 0x3F)).ok());

    Outcome outcome = compute({pooled});
    EXPECT_EQ(outcome.status.code(), Code::bad_request) << outcome.status.message();
    EXPECT_THAT(outcome.status.message(), HasSubstr("'aimed'"));
    EXPECT_EQ(get(buffer, 80, kBufferSize - 80), canary) << "the kernel wrote past the result";
}

TEST_F(CpuSessionGraph, TensorWithoutABufferIsRefused) {
    ggml_tensor *a = vector("a"), *b = vector("b");
    ggml_tensor *sum = ggml_add(ctx.get(), a, b);
    ggml_set_name(sum, "sum");
    arena->place(a, 0);
    arena->place(b, 32);  // sum has no data anywhere

    Outcome outcome = compute({sum});
    EXPECT_EQ(outcome.status.code(), Code::bad_request);
    EXPECT_THAT(outcome.status.message(), HasSubstr("'sum'"));
    EXPECT_THAT(outcome.status.message(), HasSubstr("has no buffer"));
    EXPECT_EQ(session->counters().graph_computes, 0u);
}

TEST_F(CpuSessionGraph, TensorInAFreedBufferIsRefused) {
    ggml_tensor *a = vector("a"), *b = vector("b");
    ggml_tensor *sum = ggml_add(ctx.get(), a, b);
    arena->place(a, 0);
    arena->place(b, 32);
    arena->place(sum, 64);
    ASSERT_TRUE(call<BufferFree>(BufferFree::Request{buffer}).status.ok());

    Outcome outcome = compute({sum});
    EXPECT_EQ(outcome.status.code(), Code::bad_request);
    EXPECT_THAT(outcome.status.message(), HasSubstr("not valid"));
}

TEST_F(CpuSessionGraph, ViewThatDoesNotLieInsideItsSourceIsRefused) {
    ggml_tensor *a = vector("a");
    arena->place(a, 0);
    ggml_tensor *view = ggml_view_1d(ctx.get(), a, 4, 16);
    ggml_tensor *doubled = ggml_scale(ctx.get(), view, 2.0f);
    arena->place(doubled, 64);
    arena->place(view, 48);  // claims view_offs 16 but sits 48 bytes in

    Outcome outcome = compute({doubled});
    EXPECT_EQ(outcome.status.code(), Code::bad_request);
    EXPECT_THAT(outcome.status.message(), HasSubstr("view"));
}

TEST_F(CpuSessionGraph, ComputeOnAnUnknownBackendIsNotFound) {
    ggml_tensor *a = vector("a");
    arena->place(a, 0);
    TensorListEncoder encoder(arena->locator());
    encoder.add_node(a);
    const std::vector<uint8_t> graph = encoder.finish();
    EXPECT_EQ(call<GraphCompute>(graph_request(compute_backend + 1), ByteView(graph)).status.code(), Code::not_found);
    ASSERT_TRUE(call<BackendFree>(BackendFree::Request{compute_backend}).status.ok());
    EXPECT_EQ(call<GraphCompute>(graph_request(compute_backend), ByteView(graph)).status.code(), Code::not_found);
}

TEST_F(CpuSessionGraph, EmptyGraphSucceedsWithoutComputing) {
    TensorListEncoder encoder(arena->locator());
    const std::vector<uint8_t> graph = encoder.finish();
    Outcome outcome = call<GraphCompute>(graph_request(compute_backend), ByteView(graph));
    ASSERT_TRUE(outcome.status.ok()) << outcome.status.message();
    EXPECT_TRUE(outcome.fixed.empty()) << "graph_compute is one-way: no reply of its own";
}

// Graph slots: a graph the guest sends again is kept by the host and replayed.

TEST_F(CpuSessionGraph, StoredGraphReplaysOverTheCurrentData) {
    ASSERT_TRUE(compute_list(sum_graph(), kGraphStore, 3).status.ok());
    EXPECT_THAT(floats_of(get(buffer, 64, 32)), ElementsAre(11, 22, 33, 44, 55, 66, 77, 88));
    ASSERT_TRUE(set(buffer, 0, bytes_of({100, 100, 100, 100, 100, 100, 100, 100})).ok());

    Outcome outcome = replay(3);
    ASSERT_TRUE(outcome.status.ok()) << outcome.status.message();
    EXPECT_THAT(floats_of(get(buffer, 64, 32)), ElementsAre(110, 120, 130, 140, 150, 160, 170, 180));
    EXPECT_EQ(session->counters().graph_computes, 2u);
}

TEST_F(CpuSessionGraph, ReplayOfAnEmptySlotIsRefused) {
    Outcome outcome = replay(0);
    EXPECT_EQ(outcome.status.code(), Code::bad_request);
    EXPECT_THAT(outcome.status.message(), HasSubstr("slot 0 is empty"));
}

TEST_F(CpuSessionGraph, RunOnceLeavesTheSlotsAlone) {
    ASSERT_TRUE(compute_list(sum_graph(), kGraphRunOnce, 2).status.ok());
    EXPECT_EQ(replay(2).status.code(), Code::bad_request);
}

TEST_F(CpuSessionGraph, SlotPastTheLastIsRefused) {
    const std::vector<uint8_t> list = sum_graph();
    EXPECT_EQ(compute_list(list, kGraphStore, kGraphSlots).status.code(), Code::bad_request);
    EXPECT_EQ(replay(kGraphSlots).status.code(), Code::bad_request);
    EXPECT_EQ(replay(UINT32_MAX).status.code(), Code::bad_request);
    EXPECT_THAT(floats_of(get(buffer, 64, 32)), Each(0));
}

TEST_F(CpuSessionGraph, UnknownGraphModeIsRefused) {
    Outcome outcome = compute_list(sum_graph(), static_cast<GraphMode>(7), 0);
    EXPECT_EQ(outcome.status.code(), Code::bad_request);
    EXPECT_THAT(outcome.status.message(), HasSubstr("unknown graph mode 7"));
}

TEST_F(CpuSessionGraph, FreeingAnyBufferEmptiesEverySlot) {
    ASSERT_TRUE(compute_list(sum_graph(), kGraphStore, 0).status.ok());
    ASSERT_TRUE(compute_list(sum_graph(), kGraphStore, 5).status.ok());
    const uint64_t unrelated = alloc(16);
    ASSERT_TRUE(call<BufferFree>(BufferFree::Request{unrelated}).status.ok());
    EXPECT_EQ(replay(0).status.code(), Code::bad_request);
    EXPECT_EQ(replay(5).status.code(), Code::bad_request);
}

TEST_F(CpuSessionGraph, ReplayAfterItsBufferIsFreedIsRefused) {
    ASSERT_TRUE(compute_list(sum_graph(), kGraphStore, 1).status.ok());
    ASSERT_TRUE(call<BufferFree>(BufferFree::Request{buffer}).status.ok());
    EXPECT_EQ(replay(1).status.code(), Code::bad_request) << "the kept graph points into freed memory";
}

TEST_F(CpuSessionGraph, FailedStoreLeavesTheSlotEmpty) {
    // The guest's GraphCache records a store as done; if the host kept the slot's
    // previous graph, the guest's next replay of the new bytes would silently
    // compute the old graph.
    ASSERT_TRUE(compute_list(sum_graph(), kGraphStore, 4).status.ok());
    std::vector<uint8_t> broken = sum_graph();
    test_support::edit_wire_tensor(broken, 2, [](WireTensor &t) { t.data_offset = kBufferSize; });
    ASSERT_EQ(compute_list(broken, kGraphStore, 4).status.code(), Code::bad_request);
    EXPECT_EQ(replay(4).status.code(), Code::bad_request);
}

// A guest can describe an op ggml's kernels would trip over: a missing source, or
// sources whose shapes the op cannot combine. The host answers; it does not crash.
TEST_F(CpuSessionGraph, NodeMissingASourceItsOpNeedsIsRefused) {
    // BUG (src/protocol/tensor_codec.cpp decode_tensor_list / src/host/worker/graph/graph_builder.cpp build_tensors):
    // nothing checks that a node has the sources its op needs; the CPU kernel dereferences the null src[1] (SIGSEGV).
    ggml_tensor *a = vector("a"), *b = vector("b");
    ggml_tensor *sum = ggml_add(ctx.get(), a, b);
    arena->place(a, 0);
    arena->place(b, 32);
    arena->place(sum, 64);
    ggml_cgraph *graph = ggml_new_graph(ctx.get());
    ggml_build_forward_expand(graph, sum);
    std::vector<uint8_t> list = encode_nodes(graph);
    test_support::edit_wire_tensor(list, 2, [](WireTensor &t) { t.src[1] = -1; });

    EXPECT_EQ(compute_list(list).status.code(), Code::bad_request);
}

TEST_F(CpuSessionGraph, NodeWhoseSourceShapesDoNotFitItsOpIsRefused) {
    // BUG (src/host/worker/graph/graph_builder.cpp build_tensors): op shapes are not checked against ggml's own rules,
    // so the CPU kernel's GGML_ASSERT(ggml_can_repeat(src1, src0)) aborts the host process.
    ggml_tensor *a = vector("a"), *b = vector("b");
    ggml_tensor *sum = ggml_add(ctx.get(), a, b);
    arena->place(a, 0);
    arena->place(b, 32);
    arena->place(sum, 64);
    ggml_cgraph *graph = ggml_new_graph(ctx.get());
    ggml_build_forward_expand(graph, sum);
    std::vector<uint8_t> list = encode_nodes(graph);
    test_support::edit_wire_tensor(list, 1, [](WireTensor &t) {  // b: 8 elements become 3, which cannot broadcast to 8
        t.ne[0] = 3;
        t.nb[1] = t.nb[2] = t.nb[3] = 12;
    });

    EXPECT_EQ(compute_list(list).status.code(), Code::bad_request);
}

TEST_F(CpuSessionGraph, TransposedViewOfTheLastTensorInABufferComputes) {
    // a is 4 x 3 and fills the last 48 bytes of the buffer; its transpose is a
    // view over exactly those bytes, so the graph is valid.
    ggml_tensor *a = ggml_new_tensor_2d(ctx.get(), GGML_TYPE_F32, 4, 3);
    arena->place(a, kBufferSize - 48);
    ggml_tensor *transposed = ggml_transpose(ctx.get(), a);
    ggml_tensor *copy = ggml_cont(ctx.get(), transposed);
    arena->place(copy, 0);
    ASSERT_TRUE(set(buffer, kBufferSize - 48, bytes_of({0, 1, 2, 3, 10, 11, 12, 13, 20, 21, 22, 23})).ok());

    Outcome outcome = compute({copy});
    ASSERT_TRUE(outcome.status.ok()) << outcome.status.message();
    EXPECT_THAT(floats_of(get(buffer, 0, 48)), ElementsAre(0, 10, 20, 1, 11, 21, 2, 12, 22, 3, 13, 23));
}

// Shared memory: for a guest on the same machine, buffers are memory files both
// sides map, and model files are mapped by the host instead of copied.

// A memory file holding `bytes`, standing in for a guest's model file.
UniqueFd file_holding(const std::vector<uint8_t> &bytes) {
    UniqueFd fd(::memfd_create("model.gguf", MFD_CLOEXEC));
    EXPECT_TRUE(fd.valid());
    EXPECT_EQ(::pwrite(fd.get(), bytes.data(), bytes.size(), 0), static_cast<ssize_t>(bytes.size()));
    return fd;
}

std::vector<uint8_t> counting_bytes(size_t size) {
    std::vector<uint8_t> bytes(size);
    for (size_t i = 0; i < size; ++i) bytes[i] = static_cast<uint8_t>(i % 251);
    return bytes;
}

// Tensor parallelism: the session joins its guest's group of servers through a
// memory file (PeerExchange) and sums a tensor with the other servers'.
class CpuSessionInGroup : public CpuSession {
  protected:
    void SetUp() override {
        CpuSession::SetUp();
        session->allow_shared_memory();
        Hello::Request request;
        request.capabilities = kSessionPeerExchange;
        Outcome outcome = call<Hello>(request);
        ASSERT_TRUE(outcome.status.ok()) << outcome.status.message();
        ASSERT_NE(outcome.reply<Hello::Reply>().capabilities & kSessionPeerExchange, 0u);
        ASSERT_TRUE(PeerExchange::create_area(place(0), &file).ok());
    }

    PeerExchange::Place place(uint32_t rank) const {
        PeerExchange::Place place;
        place.rank = rank;
        place.ranks = 2;
        place.slot_bytes = 4096;
        place.token.fill(5);
        return place;
    }

    CommJoin::Request join_request(uint32_t wait_ms = 5000) const {
        CommJoin::Request request{};
        request.rank = 0;
        request.ranks = 2;
        request.slot_bytes = 4096;
        request.wait_ms = wait_ms;
        std::memset(request.token, 5, sizeof(request.token));
        return request;
    }

    Outcome join(const CommJoin::Request &request, int fd) {
        std::vector<UniqueFd> fds;
        if (fd >= 0) fds.emplace_back(::dup(fd));
        return call<CommJoin>(request, ByteView(), &fds);
    }

    uint64_t joined(uint32_t wait_ms = 5000) {
        Outcome outcome = join(join_request(wait_ms), file.get());
        EXPECT_TRUE(outcome.status.ok()) << outcome.status.message();
        return outcome.status.ok() ? outcome.reply<CommJoin::Reply>().comm : 0;
    }

    Status set_floats(uint64_t buffer, const std::vector<float> &values) {
        std::vector<uint8_t> bytes(values.size() * sizeof(float));
        std::memcpy(bytes.data(), values.data(), bytes.size());
        return set(buffer, 0, bytes);
    }

    std::vector<float> get_floats(uint64_t buffer, size_t count) {
        const std::vector<uint8_t> bytes = get(buffer, 0, count * sizeof(float));
        std::vector<float> values(count);
        std::memcpy(values.data(), bytes.data(), std::min(bytes.size(), values.size() * sizeof(float)));
        return values;
    }

    // Rank 1 in a child process, attached (its lock held) when this returns; then
    // `work` runs there, and its result is the child's exit status. -1: no child.
    pid_t start_peer(const std::function<int(PeerExchange &)> &work) {
        int attached[2];
        if (::pipe(attached) != 0) return -1;
        const pid_t child = ::fork();
        if (child == 0) {
            PeerExchange peer;
            const bool joined = PeerExchange::attach(UniqueFd(::dup(file.get())), place(1), &peer).ok();
            (void)!::write(attached[1], joined ? "1" : "0", 1);
            ::_exit(joined ? work(peer) : 1);
        }
        char byte = 0;
        const bool told = ::read(attached[0], &byte, 1) == 1;
        ::close(attached[0]);
        ::close(attached[1]);
        return told && byte == '1' ? child : -1;
    }

    UniqueFd file;
};

TEST_F(CpuSession, AGroupIsNotGrantedOffAUnixSocket) {
    Hello::Request request;
    request.capabilities = kSessionPeerExchange;
    Outcome outcome = call<Hello>(request);
    ASSERT_TRUE(outcome.status.ok()) << outcome.status.message();
    EXPECT_EQ(outcome.reply<Hello::Reply>().capabilities & kSessionPeerExchange, 0u);
    UniqueFd file;
    ASSERT_TRUE(create_shared_memory(4096, "group", &file).ok());
    std::vector<UniqueFd> fds;
    fds.push_back(std::move(file));
    EXPECT_EQ(call<CommJoin>(CommJoin::Request{0, 2, 64, 1000, {}}, ByteView(), &fds).status.code(), Code::unsupported);
}

TEST_F(CpuSessionInGroup, AJoinWithoutTheRightFileOrPlaceIsRefused) {
    EXPECT_EQ(join(join_request(), -1).status.code(), Code::bad_request) << "no file";
    UniqueFd small;
    ASSERT_TRUE(create_shared_memory(4096, "small", &small).ok());
    EXPECT_EQ(join(join_request(), small.get()).status.code(), Code::bad_request) << "shorter than the group's area";
    CommJoin::Request alone = join_request();
    alone.ranks = 1;
    EXPECT_EQ(join(alone, file.get()).status.code(), Code::bad_request);
    CommJoin::Request stranger = join_request();
    stranger.rank = 7;
    EXPECT_EQ(join(stranger, file.get()).status.code(), Code::bad_request);
    EXPECT_EQ(join(join_request(0), file.get()).status.code(), Code::bad_request) << "no wait";
    EXPECT_EQ(join(join_request(kMaxPeerWaitMs + 1), file.get()).status.code(), Code::bad_request);
}

TEST_F(CpuSessionInGroup, AnAllReduceOutsideItsBufferOrSlotIsRefused) {
    const uint64_t comm = joined();
    const uint64_t buffer = alloc(8192);
    EXPECT_EQ(call<CommAllReduce>({comm, {buffer, 8192 - 8, 16}}).status.code(), Code::bad_request)
        << "past the buffer";
    EXPECT_EQ(call<CommAllReduce>({comm, {buffer, 2, 8}}).status.code(), Code::bad_request) << "misaligned";
    EXPECT_EQ(call<CommAllReduce>({comm, {buffer, 0, 6}}).status.code(), Code::bad_request) << "not whole floats";
    EXPECT_EQ(call<CommAllReduce>({comm, {buffer, 0, 8192}}).status.code(), Code::bad_request) << "past the slot";
    EXPECT_EQ(call<CommAllReduce>({comm + 1, {buffer, 0, 16}}).status.code(), Code::not_found);
}

TEST_F(CpuSessionInGroup, AnAllReduceWhosePeerSendsNothingFailsAtItsWaitAndForGood) {
    const uint64_t comm = joined(50);
    const uint64_t buffer = alloc(64);
    ASSERT_TRUE(set_floats(buffer, {1, 2, 3, 4}).ok());
    // The peer's rank is held (its lock) by another process that sends nothing.
    const pid_t silent = start_peer([](PeerExchange &) {
        ::usleep(1000 * 1000);
        return 0;
    });
    ASSERT_GT(silent, 0);
    const auto start = std::chrono::steady_clock::now();
    const Outcome first = call<CommAllReduce>({comm, {buffer, 0, 16}});
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
    const Outcome again = call<CommAllReduce>({comm, {buffer, 0, 16}});
    ::kill(silent, SIGKILL);
    ::waitpid(silent, nullptr, 0);
    EXPECT_EQ(first.status.code(), Code::error);
    EXPECT_THAT(first.status.message(), HasSubstr("sent nothing"));
    EXPECT_EQ(again.status.message(), first.status.message()) << "the group stays failed";
    EXPECT_THAT(get_floats(buffer, 4), ElementsAre(1, 2, 3, 4)) << "nothing was added";
    EXPECT_TRUE(call<CommLeave>({comm}).status.ok());
    EXPECT_EQ(call<CommLeave>({comm}).status.code(), Code::not_found);
}

TEST_F(CpuSessionInGroup, AnAllReduceAddsThePeersValuesInPlace) {
    const uint64_t comm = joined();
    const uint64_t buffer = alloc(64);
    ASSERT_TRUE(set_floats(buffer, {1, 2, 3, 4}).ok());
    const pid_t peer = start_peer([](PeerExchange &other) {  // every rank joins before the first step
        float values[4] = {10, 20, 30, 40};
        return other.all_reduce_f32(values, 4, std::chrono::seconds(10)).ok() && values[3] == 44 ? 0 : 2;
    });
    ASSERT_GT(peer, 0);
    const Outcome outcome = call<CommAllReduce>({comm, {buffer, 0, 16}});
    int child = 0;
    ::waitpid(peer, &child, 0);
    ASSERT_TRUE(outcome.status.ok()) << outcome.status.message();
    EXPECT_THAT(get_floats(buffer, 4), ElementsAre(11, 22, 33, 44));
    EXPECT_TRUE(WIFEXITED(child) && WEXITSTATUS(child) == 0)
        << "the peer holds the same sum (exit " << WEXITSTATUS(child) << ", status " << child << ")";
}

// Tensor parallelism across machines: the session joins a group whose links the
// listener's peer broker makes, played here by a thread on the other end of the
// session's peer channel.
class CpuSessionWithLinks : public CpuSession {
  protected:
    void SetUp() override {
        CpuSession::SetUp();
        int pair[2] = {-1, -1};
        ASSERT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair), 0);
        session->use_peer_channel(UniqueFd(pair[0]));
        broker_end.reset(pair[1]);
        broker = std::thread([this] { play_broker(); });
    }

    void TearDown() override {
        session.reset();  // closes the session's end: the broker's thread ends
        if (broker.joinable()) broker.join();
    }

    // Answers every request: code 0, but `take` and `dial` as set below.
    void play_broker() {
        store_channel::NoSigpipe no_sigpipe;
        for (;;) {
            peer_channel::Request request;
            std::vector<UniqueFd> fds;
            if (!store_channel::receive_message(broker_end.get(), &request, sizeof(request), &fds, 1, -1)) return;
            peer_channel::Reply reply;
            {
                std::lock_guard<std::mutex> lock(mutex);
                requests.push_back(request);
                if (request.kind == static_cast<uint32_t>(peer_channel::Kind::take)) {
                    reply.code = static_cast<int32_t>(Code::disconnected);
                    std::snprintf(reply.message, sizeof(reply.message), "rank %u did not connect within %u ms",
                                  request.other_rank, request.timeout_ms);
                } else if (request.kind == static_cast<uint32_t>(peer_channel::Kind::dial)) {
                    reply.code = static_cast<int32_t>(Code::unsupported);
                    std::snprintf(reply.message, sizeof(reply.message), "start it with --tensor-peer");
                }
            }
            if (!store_channel::send_message(broker_end.get(), &reply, sizeof(reply), nullptr, 0)) return;
        }
    }

    // The kinds of the requests the broker got, in order.
    std::vector<uint32_t> kinds() {
        std::lock_guard<std::mutex> lock(mutex);
        std::vector<uint32_t> out;
        for (const auto &request : requests) out.push_back(request.kind);
        return out;
    }

    void hello_with_links() {
        Hello::Request request;
        request.capabilities = kSessionPeerLinks;
        Outcome outcome = call<Hello>(request);
        ASSERT_TRUE(outcome.status.ok()) << outcome.status.message();
        ASSERT_NE(outcome.reply<Hello::Reply>().capabilities & kSessionPeerLinks, 0u);
    }

    static CommJoinLinks::Request join_request(uint32_t rank, uint32_t ranks, uint32_t wait_ms = 5000) {
        CommJoinLinks::Request request{};
        request.rank = rank;
        request.ranks = ranks;
        request.slot_bytes = 4096;
        request.wait_ms = wait_ms;
        std::memset(request.token, 9, sizeof(request.token));
        return request;
    }

    Status join(const CommJoinLinks::Request &request, const std::string &tail) {
        return call<CommJoinLinks>(request, ByteView(reinterpret_cast<const uint8_t *>(tail.data()), tail.size()))
            .status;
    }

    UniqueFd broker_end;
    std::thread broker;
    std::mutex mutex;
    std::vector<peer_channel::Request> requests;
};

constexpr uint32_t kind_of(peer_channel::Kind kind) { return static_cast<uint32_t>(kind); }

TEST_F(CpuSession, LinksAreNotGrantedWithoutAPeerChannel) {
    Hello::Request request;
    request.capabilities = kSessionPeerLinks;
    Outcome outcome = call<Hello>(request);
    ASSERT_TRUE(outcome.status.ok()) << outcome.status.message();
    EXPECT_EQ(outcome.reply<Hello::Reply>().capabilities & kSessionPeerLinks, 0u);
    CommJoinLinks::Request join{};
    join.ranks = 2;
    join.slot_bytes = 64;
    join.wait_ms = 1000;
    EXPECT_EQ(call<CommJoinLinks>(join).status.code(), Code::unsupported);
}

TEST_F(CpuSessionWithLinks, LinksAreNotGrantedUnlessTheGuestAsks) {
    hello();
    EXPECT_EQ(join(join_request(0, 2), "").code(), Code::unsupported);
    EXPECT_TRUE(kinds().empty()) << "the broker heard nothing";
}

TEST_F(CpuSessionWithLinks, AJoinWithAMalformedTailIsRefusedBeforeTheBrokerHearsOfIt) {
    hello_with_links();
    const std::string a("tcp://10.0.0.1:7000\0", 20), b("tcp://10.0.0.2:7000\0", 20);
    EXPECT_EQ(join(join_request(2, 3), a).code(), Code::bad_request) << "too few endpoints";
    EXPECT_EQ(join(join_request(2, 3), "").code(), Code::bad_request) << "none";
    EXPECT_EQ(join(join_request(2, 3), "tcp://10.0.0.1:7000").code(), Code::bad_request) << "unterminated";
    EXPECT_EQ(join(join_request(2, 3), a + b + "x").code(), Code::bad_request) << "a byte after the endpoints";
    EXPECT_EQ(join(join_request(2, 3), a + b + std::string(1, '\0')).code(), Code::bad_request);
    EXPECT_EQ(join(join_request(0, 2), std::string(1, '\0')).code(), Code::bad_request) << "rank 0 dials nobody";
    EXPECT_EQ(join(join_request(1, 2), std::string("tcp://10.0.0.1 :7000\0", 21)).code(), Code::bad_request)
        << "a space";
    EXPECT_EQ(join(join_request(1, 2), std::string("tcp://10.0.0.1:70\x01\x30\0", 20)).code(), Code::bad_request)
        << "a control byte";
    EXPECT_EQ(join(join_request(1, 2), std::string("tcp://10.0.0.1:7000\x7f\0", 21)).code(), Code::bad_request)
        << "DEL";
    EXPECT_EQ(join(join_request(1, 2), std::string("tcp://10.0.0.\xc3\xa9:7000\0", 22)).code(), Code::bad_request)
        << "not ASCII";
    EXPECT_EQ(join(join_request(1, 2), std::string(1, '\0')).code(), Code::bad_request) << "an empty endpoint";
    const std::string longest = "tcp://" + std::string(kMaxPeerEndpointBytes - 11, 'h') + ":7000";
    ASSERT_EQ(longest.size(), kMaxPeerEndpointBytes);
    const Status too_long = join(join_request(1, 2), longest + "h" + std::string(1, '\0'));
    EXPECT_EQ(too_long.code(), Code::bad_request) << "256 bytes";
    EXPECT_THAT(too_long.message(), HasSubstr("1 to 255 bytes"));
    EXPECT_EQ(join(join_request(0, 2, 0), "").code(), Code::bad_request) << "no wait";
    EXPECT_EQ(join(join_request(0, 2, kMaxPeerWaitMs + 1), "").code(), Code::bad_request) << "too long a wait";
    EXPECT_EQ(join(join_request(2, 2), "").code(), Code::bad_request) << "no place in the group";
    EXPECT_TRUE(kinds().empty()) << "nothing reached the broker";

    // The longest endpoint is taken, and asked of the broker (which refuses the dial).
    const Status refused = join(join_request(1, 2), longest + std::string(1, '\0'));
    EXPECT_EQ(refused.code(), Code::unsupported) << refused.message();
    EXPECT_THAT(refused.message(), HasSubstr("--tensor-peer"));
    EXPECT_EQ(kinds(), (std::vector<uint32_t>{kind_of(peer_channel::Kind::enrol), kind_of(peer_channel::Kind::dial),
                                              kind_of(peer_channel::Kind::leave)}))
        << "a join that fails leaves the broker's group";
    std::lock_guard<std::mutex> lock(mutex);
    ASSERT_EQ(requests.size(), 3u);
    EXPECT_EQ(std::string(requests[1].endpoint), longest);
    EXPECT_EQ(requests[1].rank, 1u);
    EXPECT_EQ(requests[1].other_rank, 0u);
}

TEST_F(CpuSessionWithLinks, AnAllReduceWhoseLinksNeverCameFailsForGood) {
    hello_with_links();
    Outcome joined = call<CommJoinLinks>(join_request(0, 2, 200));
    ASSERT_TRUE(joined.status.ok()) << joined.status.message();
    const uint64_t comm = joined.reply<CommJoinLinks::Reply>().comm;
    const uint64_t buffer = alloc(64);
    std::vector<uint8_t> values(16);
    const float ones[4] = {1, 1, 1, 1};
    std::memcpy(values.data(), ones, sizeof(ones));
    ASSERT_TRUE(set(buffer, 0, values).ok());

    const Outcome first = call<CommAllReduce>({comm, {buffer, 0, 16}});
    EXPECT_EQ(first.status.code(), Code::disconnected);
    EXPECT_THAT(first.status.message(), HasSubstr("rank 1 did not connect within 200 ms"));
    const auto start = std::chrono::steady_clock::now();
    const Outcome again = call<CommAllReduce>({comm, {buffer, 0, 16}});
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(100)) << "at once";
    EXPECT_EQ(again.status.code(), first.status.code());
    EXPECT_EQ(again.status.message(), first.status.message()) << "the group stays failed";
    EXPECT_EQ(get(buffer, 0, 16), values) << "nothing was added";
    EXPECT_EQ(kinds(), (std::vector<uint32_t>{kind_of(peer_channel::Kind::enrol), kind_of(peer_channel::Kind::take)}))
        << "one take only";
    EXPECT_TRUE(call<CommLeave>({comm}).status.ok());
    EXPECT_EQ(kinds().back(), kind_of(peer_channel::Kind::leave));
}

TEST_F(CpuSession, SharedMemoryIsNotGrantedUnlessTheServerAllowsIt) {
    Hello::Request request;
    request.capabilities = kSessionSharedMemory;
    Outcome outcome = call<Hello>(request);
    ASSERT_TRUE(outcome.status.ok()) << outcome.status.message();
    EXPECT_EQ(outcome.reply<Hello::Reply>().capabilities, 0u);
    EXPECT_EQ(call<DeviceInfo>(DeviceInfo::Request{0}).reply<DeviceInfo::Reply>().shared_buffers, 0);

    Outcome buffer = call<BufferAlloc>(BufferAlloc::Request{0, 64});
    ASSERT_TRUE(buffer.status.ok()) << buffer.status.message();
    EXPECT_EQ(buffer.reply<BufferAlloc::Reply>().shared, 0);
    EXPECT_FALSE(buffer.fd.valid());

    std::vector<UniqueFd> fds;
    fds.push_back(file_holding(counting_bytes(64)));
    EXPECT_EQ(call<BufferFromFile>(BufferFromFile::Request{0, 0, 64, 64}, ByteView(), &fds).status.code(),
              Code::unsupported);
}

TEST_F(CpuSession, SharedMemoryIsNotGrantedUnlessTheGuestAsks) {
    session->allow_shared_memory();
    Outcome outcome = call<Hello>(Hello::Request{});
    ASSERT_TRUE(outcome.status.ok()) << outcome.status.message();
    EXPECT_EQ(outcome.reply<Hello::Reply>().capabilities, 0u);
    Outcome buffer = call<BufferAlloc>(BufferAlloc::Request{0, 64});
    EXPECT_EQ(buffer.reply<BufferAlloc::Reply>().shared, 0);
    EXPECT_FALSE(buffer.fd.valid());
}

TEST_F(CpuSession, SharedMemoryIsGrantedWhenAllowedAndAsked) {
    session->allow_shared_memory();
    Hello::Request request;
    request.capabilities = kSessionSharedMemory;
    Outcome outcome = call<Hello>(request);
    ASSERT_TRUE(outcome.status.ok()) << outcome.status.message();
    EXPECT_EQ(outcome.reply<Hello::Reply>().capabilities, uint64_t(kSessionSharedMemory));
    EXPECT_EQ(call<DeviceInfo>(DeviceInfo::Request{0}).reply<DeviceInfo::Reply>().shared_buffers, 1);
}

class SharedMemorySession : public CpuSession {
  protected:
    void SetUp() override {
        CpuSession::SetUp();
        if (HasFatalFailure()) return;
        restart(SessionLimits{});
    }

    void restart(const SessionLimits &limits) {
        start(limits);
        session->allow_shared_memory();
        hello(kSessionSharedMemory);
    }

    Outcome buffer_from_file(UniqueFd file, uint64_t offset, uint64_t size) {
        std::vector<UniqueFd> fds;
        fds.push_back(std::move(file));
        return call<BufferFromFile>(BufferFromFile::Request{0, offset, size, size}, ByteView(), &fds);
    }

    uint64_t file_buffer(const std::vector<uint8_t> &contents, uint64_t offset, uint64_t size) {
        Outcome outcome = buffer_from_file(file_holding(contents), offset, size);
        EXPECT_TRUE(outcome.status.ok()) << outcome.status.message();
        return outcome.status.ok() ? outcome.reply<BufferFromFile::Reply>().buffer : 0;
    }
};

TEST_F(SharedMemorySession, BufferAllocPassesAMemoryFileThatIsTheBuffer) {
    Outcome outcome = call<BufferAlloc>(BufferAlloc::Request{0, 4096});
    ASSERT_TRUE(outcome.status.ok()) << outcome.status.message();
    const BufferAlloc::Reply reply = outcome.reply<BufferAlloc::Reply>();
    EXPECT_EQ(reply.shared, 1);
    EXPECT_EQ(reply.size, 4096u);
    ASSERT_TRUE(outcome.fd.valid());

    Mapping guest_view;
    ASSERT_TRUE(Mapping::map(outcome.fd.get(), 0, 4096, true, &guest_view).ok());
    auto *guest_bytes = static_cast<uint8_t *>(guest_view.data());
    guest_bytes[100] = 0x5a;
    guest_bytes[101] = 0xa5;
    EXPECT_EQ(get(reply.buffer, 100, 2), (std::vector<uint8_t>{0x5a, 0xa5}));
    ASSERT_TRUE(set(reply.buffer, 4000, {1, 2, 3}).ok());
    EXPECT_EQ(guest_bytes[4000], 1);
    EXPECT_EQ(guest_bytes[4002], 3);
    EXPECT_EQ(session->memory_in_use(), 4096u);
}

TEST_F(SharedMemorySession, GuestCannotResizeTheMemoryFile) {
    Outcome outcome = call<BufferAlloc>(BufferAlloc::Request{0, 4096});
    ASSERT_TRUE(outcome.fd.valid());
    EXPECT_NE(::ftruncate(outcome.fd.get(), 0), 0) << "shrinking would make the host's accesses fault";
    EXPECT_NE(::ftruncate(outcome.fd.get(), 8192), 0);
}

// After a reconnection the guest hands back the memory file of an earlier
// session's shared buffer (guest/buffer_restore.cpp): its contents come with it.
TEST_F(SharedMemorySession, BufferAdoptTakesBackAMemoryFileWithItsContents) {
    Outcome first = call<BufferAlloc>(BufferAlloc::Request{0, 4096});
    ASSERT_TRUE(first.fd.valid());
    Mapping guest_view;
    ASSERT_TRUE(Mapping::map(first.fd.get(), 0, 4096, true, &guest_view).ok());
    static_cast<uint8_t *>(guest_view.data())[7] = 0x42;

    restart(SessionLimits{});  // a new worker
    std::vector<UniqueFd> fds;
    fds.push_back(std::move(first.fd));
    Outcome adopted = call<BufferAdopt>(BufferAdopt::Request{0, 4096}, ByteView(), &fds);
    ASSERT_TRUE(adopted.status.ok()) << adopted.status.message();
    const uint64_t buffer = adopted.reply<BufferAdopt::Reply>().buffer;
    EXPECT_EQ(get(buffer, 7, 1), std::vector<uint8_t>{0x42});
    ASSERT_TRUE(set(buffer, 8, {9}).ok());
    EXPECT_EQ(static_cast<uint8_t *>(guest_view.data())[8], 9) << "still shared with the guest";
    EXPECT_EQ(session->memory_in_use(), 4096u);
}

TEST_F(SharedMemorySession, BufferAdoptRefusesFilesThatCouldShrinkOrDoNotMatch) {
    auto adopt = [this](UniqueFd file, uint64_t size) {
        std::vector<UniqueFd> fds;
        fds.push_back(std::move(file));
        return call<BufferAdopt>(BufferAdopt::Request{0, size}, ByteView(), &fds).status;
    };
    Status status = adopt(file_holding(counting_bytes(4096)), 4096);  // a memory file without seals
    EXPECT_EQ(status.code(), Code::bad_request);
    EXPECT_THAT(status.message(), HasSubstr("sealed"));
    UniqueFd sealed;
    ASSERT_TRUE(create_shared_memory(4096, "test", &sealed).ok());
    EXPECT_EQ(adopt(std::move(sealed), 8192).code(), Code::bad_request) << "not the size asked for";
    EXPECT_EQ(call<BufferAdopt>(BufferAdopt::Request{0, 4096}).status.code(), Code::bad_request) << "no file";
    EXPECT_EQ(session->memory_in_use(), 0u);
}

TEST_F(SharedMemorySession, FileBufferShowsTheGuestsFileFromTheOffset) {
    const std::vector<uint8_t> contents = counting_bytes(8192);
    const uint64_t buffer = file_buffer(contents, 4096, 4096);
    ASSERT_NE(buffer, 0u);
    EXPECT_EQ(get(buffer, 0, 16), std::vector<uint8_t>(contents.begin() + 4096, contents.begin() + 4112));
    EXPECT_EQ(get(buffer, 4090, 6), std::vector<uint8_t>(contents.end() - 6, contents.end()));
    EXPECT_EQ(call<GetTensor>(GetTensor::Request{{buffer, 4090, 7}}).status.code(), Code::bad_request);
}

TEST_F(SharedMemorySession, FileBufferIsReadOnly) {
    const uint64_t buffer = file_buffer(counting_bytes(4096), 0, 4096);
    const uint64_t scratch = alloc(64);
    Status status = set(buffer, 0, {1});
    EXPECT_EQ(status.code(), Code::bad_request);
    EXPECT_THAT(status.message(), HasSubstr("read-only"));
    EXPECT_EQ(call<MemsetTensor>(MemsetTensor::Request{{buffer, 0, 4}, 0}).status.code(), Code::bad_request);
    EXPECT_EQ(call<BufferClear>(BufferClear::Request{buffer, 0}).status.code(), Code::bad_request);
    EXPECT_EQ(call<CopyTensor>(CopyTensor::Request{{scratch, 0, 8}, {buffer, 0, 8}}).status.code(), Code::bad_request);
    EXPECT_EQ(
        call<SetTensor2d>(SetTensor2d::Request{{buffer, 0, 1}, 1, 0}, ByteView(std::vector<uint8_t>{1})).status.code(),
        Code::bad_request);
    EXPECT_EQ(get(buffer, 0, 4), (std::vector<uint8_t>{0, 1, 2, 3}));

    ASSERT_TRUE(call<CopyTensor>(CopyTensor::Request{{buffer, 8, 4}, {scratch, 0, 4}}).status.ok());
    EXPECT_EQ(get(scratch, 0, 4), (std::vector<uint8_t>{8, 9, 10, 11}));
}

TEST_F(SharedMemorySession, FileBufferNeedsExactlyOneDescriptor) {
    EXPECT_EQ(call<BufferFromFile>(BufferFromFile::Request{0, 0, 64, 64}).status.code(), Code::bad_request);
    std::vector<UniqueFd> none;
    EXPECT_EQ(call<BufferFromFile>(BufferFromFile::Request{0, 0, 64, 64}, ByteView(), &none).status.code(),
              Code::bad_request);
    std::vector<UniqueFd> two;
    two.push_back(file_holding(counting_bytes(64)));
    two.push_back(file_holding(counting_bytes(64)));
    EXPECT_EQ(call<BufferFromFile>(BufferFromFile::Request{0, 0, 64, 64}, ByteView(), &two).status.code(),
              Code::bad_request);
    EXPECT_EQ(session->buffer_count(), 0u);
}

// llama.cpp puts a local CPU's Q4_0 weights in ggml-cpu's repacked layout; a guest's
// come in a mapped file, so the host repacks them: the product reads a copy in the
// CPU's extra buffer type and gives what the plain layout gives.
class RepackedWeights : public SharedMemorySession {
  protected:
    static constexpr int64_t kInputs = 256, kOutputs = 256, kTokens = 4;      // weights of 9 pages
    static constexpr uint64_t kOutputAt = kInputs * kTokens * sizeof(float);  // after x

    void SetUp() override {
        SharedMemorySession::SetUp();
        if (HasFatalFailure()) return;
        ggml_backend_reg_t reg = ggml_backend_dev_backend_reg(cpu);
        auto extra_types = reinterpret_cast<ggml_backend_dev_get_extra_bufts_t>(
            ggml_backend_reg_get_proc_address(reg, "ggml_backend_dev_get_extra_bufts"));
        if (extra_types == nullptr || extra_types(cpu) == nullptr || *extra_types(cpu) == nullptr) {
            GTEST_SKIP() << "this CPU backend has no extra buffer types";
        }
        std::vector<float> weights(kInputs * kOutputs);
        for (size_t i = 0; i < weights.size(); ++i) weights[i] = std::sin(0.37f * static_cast<float>(i));
        quantized.resize(ggml_row_size(GGML_TYPE_Q4_0, kInputs) * kOutputs);
        ggml_quantize_chunk(GGML_TYPE_Q4_0, weights.data(), quantized.data(), 0, kOutputs, kInputs, nullptr);
        for (size_t i = 0; i < activations.size(); ++i) activations[i] = std::cos(0.11f * static_cast<float>(i));
    }

    // y = W x with W in a mapped file (or in `weights`, a buffer of the session's
    // own), x and y in another.
    std::vector<float> product(uint64_t weights = 0) {
        weight_file = weights != 0 ? weights : file_buffer(quantized, 0, quantized.size());
        const uint64_t work = alloc(kOutputAt + kOutputs * kTokens * sizeof(float));
        const uint64_t compute_backend = backend();
        GgmlContext ctx = metadata_context(8, 1);
        ggml_tensor *w = ggml_new_tensor_2d(ctx.get(), GGML_TYPE_Q4_0, kInputs, kOutputs);
        ggml_tensor *x = ggml_new_tensor_2d(ctx.get(), GGML_TYPE_F32, kInputs, kTokens);
        ggml_tensor *y = ggml_mul_mat(ctx.get(), w, x);
        std::unordered_map<const ggml_tensor *, TensorLocation> places = {
            {w, {weight_file, 0}}, {x, {work, 0}}, {y, {work, kOutputAt}}};
        static uint8_t placed;  // the encoder asks where a tensor is only if it has data
        for (ggml_tensor *tensor : {w, x, y}) tensor->data = &placed;
        TensorListEncoder encoder([&places](const ggml_tensor *t, TensorLocation *location) {
            auto found = places.find(t);
            if (found == places.end()) return false;
            *location = found->second;
            return true;
        });
        // As the guest backend sends it: ggml_build_forward_expand marks y to be computed.
        ggml_build_forward_expand(ggml_new_graph(ctx.get()), y);
        encoder.add_node(y);
        EXPECT_TRUE(set(work, 0, bytes_of(activations)).ok());
        Outcome outcome = call<GraphCompute>(graph_request(compute_backend), ByteView(encoder.finish()));
        EXPECT_TRUE(outcome.status.ok()) << outcome.status.message();
        const std::vector<uint8_t> bytes = get(work, kOutputAt, kOutputs * kTokens * sizeof(float));
        std::vector<float> values(kOutputs * kTokens);
        std::memcpy(values.data(), bytes.data(), std::min(bytes.size(), values.size() * sizeof(float)));
        return values;
    }

    // A buffer of the session's own holding the weights, named as weights or not.
    uint64_t weights_buffer(bool named) {
        const uint64_t buffer = alloc(quantized.size());
        EXPECT_TRUE(set(buffer, 0, quantized).ok());
        if (named) {
            EXPECT_TRUE(
                call<BufferSetUsage>(BufferSetUsage::Request{buffer, GGML_BACKEND_BUFFER_USAGE_WEIGHTS}).status.ok());
        }
        return buffer;
    }

    // A buffer in shared memory named as weights, into which the guest wrote them
    // itself through `guest_view` (llama.cpp --no-mmap on shared memory).
    uint64_t shared_weights(Mapping *guest_view) {
        Outcome allocated = call<BufferAlloc>(BufferAlloc::Request{0, quantized.size()});
        EXPECT_TRUE(allocated.status.ok()) << allocated.status.message();
        if (!allocated.status.ok()) return 0;
        EXPECT_EQ(allocated.reply<BufferAlloc::Reply>().shared, 1u);
        const uint64_t weights = allocated.reply<BufferAlloc::Reply>().buffer;
        EXPECT_TRUE(Mapping::map(allocated.fd.get(), 0, quantized.size(), true, guest_view).ok());
        if (guest_view->data() == nullptr) return 0;
        std::memcpy(guest_view->data(), quantized.data(), quantized.size());
        EXPECT_TRUE(
            call<BufferSetUsage>(BufferSetUsage::Request{weights, GGML_BACKEND_BUFFER_USAGE_WEIGHTS}).status.ok());
        return weights;
    }

    // The weights with every sign flipped, quantized: a later write to the same place.
    std::vector<uint8_t> negated_weights() const {
        std::vector<float> values(kInputs * kOutputs);
        for (size_t i = 0; i < values.size(); ++i) values[i] = -std::sin(0.37f * static_cast<float>(i));
        std::vector<uint8_t> negated(quantized.size());
        ggml_quantize_chunk(GGML_TYPE_Q4_0, values.data(), negated.data(), 0, kOutputs, kInputs, nullptr);
        return negated;
    }

    // y = W x from the dequantized weights, in the product's layout (outputs fastest).
    std::vector<float> reference(const std::vector<uint8_t> &weights) const {
        std::vector<float> w(kInputs * kOutputs), y(kOutputs * kTokens, 0.0f);
        ggml_get_type_traits(GGML_TYPE_Q4_0)->to_float(weights.data(), w.data(), static_cast<int64_t>(w.size()));
        for (int64_t t = 0; t < kTokens; ++t) {
            for (int64_t o = 0; o < kOutputs; ++o) {
                for (int64_t k = 0; k < kInputs; ++k)
                    y[t * kOutputs + o] += w[o * kInputs + k] * activations[t * kInputs + k];
            }
        }
        return y;
    }

    // Activations go to the kernels quantized to 8 bits: a percent or so off the exact product.
    static void expect_near_reference(const std::vector<float> &a, const std::vector<float> &reference) {
        ASSERT_EQ(a.size(), reference.size());
        for (size_t i = 0; i < a.size(); ++i) {
            EXPECT_NEAR(a[i], reference[i], 0.05f * (1.0f + std::fabs(reference[i]))) << i;
        }
    }

    static void expect_close(const std::vector<float> &a, const std::vector<float> &b) {
        ASSERT_EQ(a.size(), b.size());
        for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-3f * (1.0f + std::fabs(b[i]))) << i;
    }

    std::vector<uint8_t> quantized;
    std::vector<float> activations = std::vector<float>(kInputs * kTokens);
    uint64_t weight_file = 0;
};

TEST_F(RepackedWeights, AProductOfAMappedQ4_0WeightReadsARepackedCopyAndAgreesWithThePlainLayout) {
    const std::vector<float> repacked = product();
    EXPECT_EQ(session->counters().weights_repacked, 1u);
    const uint64_t in_use_with_copy = session->memory_in_use();

    SessionLimits plain;
    plain.repack_weights = false;
    restart(plain);
    const std::vector<float> as_mapped = product();
    EXPECT_EQ(session->counters().weights_repacked, 0u);
    EXPECT_GE(in_use_with_copy, session->memory_in_use() + quantized.size()) << "the copy counts against the quota";
    expect_close(repacked, as_mapped);
    expect_near_reference(as_mapped, reference(quantized));
}

TEST_F(RepackedWeights, FreeingTheWeightsBufferFreesItsCopy) {
    (void)product();
    ASSERT_EQ(session->counters().weights_repacked, 1u);
    const uint64_t with_copy = session->memory_in_use();
    ASSERT_TRUE(call<BufferFree>(BufferFree::Request{weight_file}).status.ok());
    EXPECT_LE(session->memory_in_use(), with_copy - quantized.size());
}

// Over sockets llama.cpp's weights come by set_tensor into buffers it marks as
// weights; the guest passes the mark on, and a later write is repacked again.
class RepackedWeightsOverSockets : public RepackedWeights {
  protected:
    void SetUp() override {
        RepackedWeights::SetUp();
        if (IsSkipped() || HasFatalFailure()) return;
        start(SessionLimits{});
        hello();
    }
};

TEST_F(RepackedWeightsOverSockets, ABufferNamedAsWeightsIsRepackedAndAWriteIsRepackedAgain) {
    const uint64_t weights = weights_buffer(true);
    const std::vector<float> first = product(weights);
    EXPECT_EQ(session->counters().weights_repacked, 1u);
    expect_near_reference(first, reference(quantized));

    const std::vector<uint8_t> negated = negated_weights();
    ASSERT_TRUE(set(weights, 0, negated).ok());
    const std::vector<float> second = product(weights);
    EXPECT_EQ(session->counters().weights_repacked, 1u) << "the same copy, repacked again";
    expect_near_reference(second, reference(negated));
}

TEST_F(RepackedWeightsOverSockets, ABufferNotNamedAsWeightsIsLeftAsItIs) {
    const std::vector<float> plain = product(weights_buffer(false));
    EXPECT_EQ(session->counters().weights_repacked, 0u);
    const std::vector<float> repacked = product(weights_buffer(true));
    EXPECT_EQ(session->counters().weights_repacked, 1u);
    expect_close(repacked, plain);
    expect_near_reference(plain, reference(quantized));
}

TEST_F(RepackedWeights, CopiesBeyondTheCapAreNotMadeAndTheProductStaysRight) {
    SessionLimits limits;
    limits.max_weight_copies = 1;
    restart(limits);
    (void)product(weights_buffer(true));
    ASSERT_EQ(session->weight_copies(), 1u);
    const std::vector<float> uncopied = product(weights_buffer(true));  // another buffer: another copy
    EXPECT_EQ(session->weight_copies(), 1u);
    EXPECT_EQ(session->counters().weights_repacked, 1u);
    expect_near_reference(uncopied, reference(quantized));
}

// A guest on shared memory without a mapped model file (llama.cpp --no-mmap) writes
// its weights into the memory file itself, and reports each write once it has
// named the buffer as weights.
TEST_F(RepackedWeights, SharedWeightsAreRepackedAndAReportedWriteIsRepackedAgain) {
    Mapping guest_view;
    const uint64_t weights = shared_weights(&guest_view);
    ASSERT_NE(guest_view.data(), nullptr);
    const std::vector<float> first = product(weights);
    EXPECT_EQ(session->counters().weights_repacked, 1u);
    expect_near_reference(first, reference(quantized));

    const std::vector<uint8_t> negated = negated_weights();
    std::memcpy(guest_view.data(), negated.data(), negated.size());
    const std::vector<float> unreported = product(weights);
    expect_close(unreported, first);  // the copy, as the host last heard of it
    ASSERT_TRUE(call<BufferWritten>(BufferWritten::Request{weights, 0, negated.size()}).status.ok());
    const std::vector<float> second = product(weights);
    EXPECT_EQ(session->counters().weights_repacked, 1u) << "the same copy, repacked again";
    expect_near_reference(second, reference(negated));
}

// A write the host refuses changes no bytes, so the copies made from them stay as
// they are. The guest's unreported write into shared memory shows it: a copy marked
// out of date would be repacked from those bytes before the next compute.
TEST_F(RepackedWeights, RefusedWritesLeaveTheRepackedCopyAsItIs) {
    Mapping guest_view;
    const uint64_t weights = shared_weights(&guest_view);
    ASSERT_NE(guest_view.data(), nullptr);
    const std::vector<float> first = product(weights);
    ASSERT_EQ(session->counters().weights_repacked, 1u);
    const std::vector<uint8_t> negated = negated_weights();
    std::memcpy(guest_view.data(), negated.data(), negated.size());  // not reported

    const std::vector<uint8_t> four = {1, 2, 3, 4};
    EXPECT_EQ(call<SetTensor>(SetTensor::Request{{weights, 0, 8}}, ByteView(four)).status.code(), Code::bad_request)
        << "4 data bytes for a range of 8";
    EXPECT_EQ(call<CopyTensor>(CopyTensor::Request{{weights, 0, 8}, {weights, 4, 8}}).status.code(), Code::bad_request)
        << "overlapping ranges";
    EXPECT_EQ(
        call<SetTensor2d>(SetTensor2d::Request{{weights, 0, 2}, 2, quantized.size()}, ByteView(four)).status.code(),
        Code::bad_request)
        << "a second row past the end";
    EXPECT_EQ(std::memcmp(guest_view.data(), negated.data(), negated.size()), 0) << "no row was written";
    expect_close(product(weights), first);
}

TEST_F(CpuSession, BufferWrittenNamesARangeOfAKnownBuffer) {
    hello();
    const uint64_t buffer = alloc(64);
    EXPECT_TRUE(call<BufferWritten>(BufferWritten::Request{buffer, 0, 64}).status.ok());
    EXPECT_EQ(call<BufferWritten>(BufferWritten::Request{buffer, 32, 33}).status.code(), Code::bad_request);
    EXPECT_EQ(call<BufferWritten>(BufferWritten::Request{buffer, UINT64_MAX, 2}).status.code(), Code::bad_request);
    EXPECT_EQ(call<BufferWritten>(BufferWritten::Request{buffer + 1, 0, 1}).status.code(), Code::not_found);
}

TEST_F(CpuSession, BufferSetUsageNamesAKnownUsageOfAKnownBuffer) {
    hello();
    const uint64_t buffer = alloc(64);
    EXPECT_TRUE(call<BufferSetUsage>(BufferSetUsage::Request{buffer, GGML_BACKEND_BUFFER_USAGE_WEIGHTS}).status.ok());
    EXPECT_EQ(call<BufferSetUsage>(BufferSetUsage::Request{buffer, 7}).status.code(), Code::bad_request);
    EXPECT_EQ(call<BufferSetUsage>(BufferSetUsage::Request{buffer + 1, 1}).status.code(), Code::not_found);
}

// The weights_* figures (status, /metrics): how far the guest's upload has come.
TEST_F(CpuSession, AnUploadIsTheSizeOfTheWeightsBuffersAndTheBytesSentIntoThem) {
    hello();
    const uint64_t weights = alloc(4096), scratch = alloc(4096);
    ASSERT_TRUE(set(weights, 0, std::vector<uint8_t>(1000, 1)).ok());
    ASSERT_TRUE(call<BufferSetUsage>(BufferSetUsage::Request{weights, GGML_BACKEND_BUFFER_USAGE_WEIGHTS}).status.ok());
    ASSERT_TRUE(set(weights, 1000, std::vector<uint8_t>(500, 2)).ok());
    ASSERT_TRUE(call<SetTensor2d>(SetTensor2d::Request{{weights, 2000, 100}, 3, 200}, ByteView(counting_bytes(300)))
                    .status.ok());
    ASSERT_TRUE(call<BufferWritten>(BufferWritten::Request{weights, 3000, 96}).status.ok())
        << "a write into shared memory that the guest reports";
    ASSERT_TRUE(set(scratch, 0, std::vector<uint8_t>(64, 3)).ok());
    SessionCounters figures = session->counters();
    EXPECT_EQ(figures.weights_expected, 4096u);
    EXPECT_EQ(figures.weights_received, 1000u + 500 + 300 + 96);
    EXPECT_EQ(figures.weights_found, 0u);

    ASSERT_TRUE(call<BufferFree>(BufferFree::Request{weights}).status.ok());
    figures = session->counters();
    EXPECT_EQ(figures.weights_expected, 0u) << "a freed buffer takes its share along";
    EXPECT_EQ(figures.weights_received, 0u);
}

// `status` asks for the upload table; an older guest, which asks for none, gets
// the reply it knows.
TEST_F(CpuSession, StatusSendsTheUploadTableOnlyWhenAskedFor) {
    StatusBoard board;
    ASSERT_TRUE(StatusBoard::create(2, &board).ok());
    hello();
    const uint64_t weights = alloc(4096);
    ASSERT_TRUE(call<BufferSetUsage>(BufferSetUsage::Request{weights, GGML_BACKEND_BUFFER_USAGE_WEIGHTS}).status.ok());
    ASSERT_TRUE(set(weights, 0, std::vector<uint8_t>(1000, 1)).ok());
    board.slot(1)->live.store(1);
    session->attach_status(&board, board.slot(1), false, 2);  // publishes its figures
    const std::unique_ptr<Session> watched = std::move(session);
    start(SessionLimits{});
    hello();
    session->attach_status(&board, board.slot(0), true, 2);

    const Outcome asked = call<ServerStatus>(ServerStatus::Request{kStatusUploads});
    ASSERT_TRUE(asked.status.ok()) << asked.status.message();
    ASSERT_EQ(asked.reply<ServerStatus::Reply>().n_sessions, 1u);
    const size_t tables = sizeof(StatusDevice) + sizeof(StatusSession);
    ASSERT_EQ(asked.tail.size(), tables + sizeof(StatusUpload));
    StatusUpload upload{};
    ASSERT_TRUE(read_pod(ByteView(asked.tail), tables, &upload));
    EXPECT_EQ(upload.weights_expected, 4096u);
    EXPECT_EQ(upload.weights_received, 1000u);
    EXPECT_EQ(upload.weights_found, 0u);

    const Outcome old = call<ServerStatus>(ServerStatus::Request{0});
    ASSERT_TRUE(old.status.ok());
    EXPECT_EQ(old.tail.size(), tables);
}

// sessions_started_total counts guests' sessions: the worker marks its slot at the
// first command that is neither the handshake nor a status query.
TEST_F(CpuSession, OnlyACommandBeyondTheHandshakeAndStatusMarksAGuestSession) {
    StatusBoard board;
    ASSERT_TRUE(StatusBoard::create(1, &board).ok());
    hello();
    session->attach_status(&board, board.slot(0), true, 1);
    ASSERT_TRUE(call<ServerStatus>(ServerStatus::Request{0}).status.ok());
    EXPECT_FALSE(is_guest_session(*board.slot(0))) << "a status query";
    alloc(64);
    EXPECT_TRUE(is_guest_session(*board.slot(0)));
    clear_figures(board.slot(0));
    EXPECT_FALSE(is_guest_session(*board.slot(0))) << "the slot's next session starts unmarked";
}

TEST_F(SharedMemorySession, AMappedModelFileHasNothingToUpload) {
    const uint64_t file = file_buffer(counting_bytes(8192), 0, 8192);
    ASSERT_TRUE(call<BufferSetUsage>(BufferSetUsage::Request{file, GGML_BACKEND_BUFFER_USAGE_WEIGHTS}).status.ok());
    EXPECT_EQ(session->counters().weights_expected, 0u);
}

TEST_F(SharedMemorySession, FileRangeOutsideTheFileIsRefused) {
    EXPECT_EQ(buffer_from_file(file_holding(counting_bytes(4096)), 4096, 1).status.code(), Code::bad_request);
    EXPECT_EQ(buffer_from_file(file_holding(counting_bytes(4096)), 0, 4097).status.code(), Code::bad_request);
    EXPECT_EQ(buffer_from_file(file_holding(counting_bytes(4096)), UINT64_MAX - 10, 64).status.code(),
              Code::bad_request);
    EXPECT_EQ(buffer_from_file(file_holding(counting_bytes(4096)), 0, 0).status.code(), Code::bad_request);
    EXPECT_EQ(session->buffer_count(), 0u);
}

TEST_F(SharedMemorySession, DescriptorThatIsNotARegularFileIsRefused) {
    int fds[2] = {-1, -1};
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    UniqueFd keep(fds[1]);
    EXPECT_EQ(buffer_from_file(UniqueFd(fds[0]), 0, 64).status.code(), Code::bad_request);
}

TEST_F(SharedMemorySession, FileBuffersCountTowardsTheBufferLimit) {
    SessionLimits limits;
    limits.max_buffers = 1;
    restart(limits);
    alloc(64);
    EXPECT_EQ(buffer_from_file(file_holding(counting_bytes(64)), 0, 64).status.code(), Code::limit_exceeded);
}

TEST_F(SharedMemorySession, FreeingAFileBufferKeepsTheMemoryAccountRight) {
    SessionLimits limits;
    limits.memory_quota = 1 << 20;
    restart(limits);
    const uint64_t device_buffer = alloc(4096);
    const uint64_t buffer = file_buffer(counting_bytes(8192), 0, 8192);
    EXPECT_EQ(session->memory_in_use(), 4096u) << "a mapped file is not device memory";
    ASSERT_TRUE(call<BufferFree>(BufferFree::Request{buffer}).status.ok());
    EXPECT_EQ(session->memory_in_use(), 4096u);
    ASSERT_TRUE(call<BufferFree>(BufferFree::Request{device_buffer}).status.ok());
    EXPECT_EQ(session->memory_in_use(), 0u);
    EXPECT_TRUE(call<BufferAlloc>(BufferAlloc::Request{0, 4096}).status.ok());
}

TEST_F(SharedMemorySession, FileBuffersBeyondTheMappedFileQuotaAreRefused) {
    SessionLimits limits;
    limits.mapped_file_quota = 12288;
    restart(limits);
    const uint64_t first = file_buffer(counting_bytes(8192), 0, 8192);
    ASSERT_NE(first, 0u);
    Outcome over = buffer_from_file(file_holding(counting_bytes(8192)), 0, 8192);
    EXPECT_EQ(over.status.code(), Code::limit_exceeded);
    EXPECT_THAT(over.status.message(), HasSubstr("--mapped-file-quota"));
    EXPECT_NE(file_buffer(counting_bytes(4096), 0, 4096), 0u) << "what is left of the quota can be used";
    EXPECT_EQ(session->mapped_file_bytes(), 12288u);
    ASSERT_TRUE(call<BufferFree>(BufferFree::Request{first}).status.ok());
    EXPECT_EQ(session->mapped_file_bytes(), 4096u);
    EXPECT_NE(file_buffer(counting_bytes(8192), 0, 8192), 0u) << "freeing gives the bytes back";
}

TEST_F(SharedMemorySession, SparseMemoryFileLargerThanTheHostsMemoryIsRefusedUnmapped) {
    // A "model" that is all holes: each page the host read would be fresh shared memory.
    const uint64_t physical = uint64_t(::sysconf(_SC_PHYS_PAGES)) * uint64_t(::sysconf(_SC_PAGESIZE));
    EXPECT_EQ(session->limits().mapped_file_quota, physical) << "the default quota";
    UniqueFd sparse(::memfd_create("sparse.gguf", MFD_CLOEXEC));
    ASSERT_EQ(::ftruncate(sparse.get(), static_cast<off_t>(physical + (1u << 20))), 0);
    Outcome outcome = buffer_from_file(std::move(sparse), 0, physical + 4096);
    EXPECT_EQ(outcome.status.code(), Code::limit_exceeded);
    EXPECT_EQ(session->buffer_count(), 0u);
}

TEST_F(SharedMemorySession, UnalignedFileOffsetIsRefusedOrServed) {
    // A guest chooses file_offset; whatever it is, the host answers instead of aborting.
    const std::vector<uint8_t> contents = counting_bytes(8192);
    Outcome outcome = buffer_from_file(file_holding(contents), 4097, 64);
    if (outcome.status.ok()) {
        const uint64_t buffer = outcome.reply<BufferFromFile::Reply>().buffer;
        EXPECT_EQ(get(buffer, 0, 4), std::vector<uint8_t>(contents.begin() + 4097, contents.begin() + 4101));
    } else {
        EXPECT_EQ(outcome.status.code(), Code::bad_request);
    }
}

// Where each tensor of a graph lives: (buffer handle, offset) chosen by the test.
class Placements {
  public:
    void place(ggml_tensor *tensor, uint64_t buffer, uint64_t offset) {
        tensor->data = &anchor_;  // any non-null pointer: the locator below is what counts
        locations_[tensor] = TensorLocation{buffer, offset};
    }
    TensorListEncoder::Locator locator() const {
        return [this](const ggml_tensor *tensor, TensorLocation *location) {
            auto found = locations_.find(tensor);
            if (found == locations_.end()) return false;
            *location = found->second;
            return true;
        };
    }

  private:
    uint8_t anchor_ = 0;
    std::unordered_map<const ggml_tensor *, TensorLocation> locations_;
};

TEST_F(SharedMemorySession, GraphReadsWeightsFromAFileBufferButCannotWriteThere) {
    const std::vector<float> weights = {1, 2, 3, 4, 5, 6, 7, 8};
    const uint64_t file = file_buffer(bytes_of(weights), 0, 32);
    const uint64_t scratch = alloc(64);
    const uint64_t compute_backend = backend();
    ASSERT_TRUE(set(scratch, 0, bytes_of({10, 20, 30, 40, 50, 60, 70, 80})).ok());

    GgmlContext ctx = metadata_context(256, 4);
    ggml_tensor *w = ggml_new_tensor_1d(ctx.get(), GGML_TYPE_F32, 8);
    ggml_tensor *x = ggml_new_tensor_1d(ctx.get(), GGML_TYPE_F32, 8);
    ggml_tensor *sum = ggml_add(ctx.get(), w, x);
    ggml_set_name(sum, "sum");
    Placements placements;
    placements.place(w, file, 0);
    placements.place(x, scratch, 0);
    placements.place(sum, scratch, 32);
    auto encode = [&] {
        ggml_cgraph *graph = ggml_new_graph(ctx.get());
        ggml_build_forward_expand(graph, sum);
        TensorListEncoder encoder(placements.locator());
        for (int i = 0; i < ggml_graph_n_nodes(graph); ++i) encoder.add_node(ggml_graph_node(graph, i));
        return encoder.finish();
    };

    const std::vector<uint8_t> reading = encode();
    Outcome outcome = call<GraphCompute>(graph_request(compute_backend), ByteView(reading));
    ASSERT_TRUE(outcome.status.ok()) << outcome.status.message();
    EXPECT_THAT(floats_of(get(scratch, 32, 32)), ElementsAre(11, 22, 33, 44, 55, 66, 77, 88));

    placements.place(sum, file, 0);  // the result would overwrite the weights
    const std::vector<uint8_t> writing = encode();
    outcome = call<GraphCompute>(graph_request(compute_backend), ByteView(writing));
    EXPECT_EQ(outcome.status.code(), Code::bad_request);
    EXPECT_THAT(outcome.status.message(), HasSubstr("read-only"));
    EXPECT_THAT(floats_of(get(file, 0, 32)), ElementsAre(1, 2, 3, 4, 5, 6, 7, 8));
}

// serve(): the same session behind a socket, with one-way commands.
class ServedSession : public CpuSession {
  protected:
    void SetUp() override {
        CpuSession::SetUp();
        if (HasFatalFailure()) return;
        int fds[2] = {-1, -1};
        ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
        guest = FramedStream(UniqueFd(fds[0]), "host");
        host = FramedStream(UniqueFd(fds[1]), "guest");
        server = std::thread([this] { served = session->serve(host); });
    }

    void TearDown() override {
        guest.close();
        if (server.joinable()) server.join();
    }

    template <class Cmd>
    void send(const typename Cmd::Request &request, ByteView tail = ByteView()) {
        FrameHeader header;
        header.command = static_cast<uint16_t>(Cmd::id);
        ASSERT_TRUE(guest.send(header, {ByteView(&request, sizeof(request)), tail}).ok());
    }

    // Reads one reply: its header and payload (the Reply and tail, or the error message).
    std::pair<FrameHeader, std::string> receive_reply() {
        FrameHeader header;
        Status status = guest.receive_header(&header, 1 << 20);
        EXPECT_TRUE(status.ok()) << status.message();
        if (!status) return {header, ""};
        std::string payload(header.payload_size, '\0');
        EXPECT_TRUE(guest.receive(payload.data(), payload.size()).ok());
        return {header, payload};
    }

    FramedStream guest, host;
    std::thread server;
    Status served = error(Code::error, "serve() did not return");
};

TEST_F(ServedSession, RepliesToHelloAndEndsCleanlyWhenTheGuestHangsUp) {
    send<Hello>(Hello::Request{});
    auto [header, payload] = receive_reply();
    EXPECT_EQ(header.command, static_cast<uint16_t>(CommandId::hello));
    EXPECT_EQ(header.flags, kFrameReply);
    EXPECT_EQ(header.status, static_cast<int32_t>(Code::ok));
    EXPECT_EQ(payload.size(), sizeof(Hello::Reply));
    guest.close();
    server.join();
    EXPECT_TRUE(served.ok()) << served.message();
}

TEST_F(ServedSession, FailedOneWayCommandIsReportedWithTheNextReply) {
    send<Hello>(Hello::Request{});
    (void)receive_reply();
    const std::vector<uint8_t> data = {1, 2, 3};
    send<SetTensor>(SetTensor::Request{{42, 0, 3}}, ByteView(data));  // one-way: no reply of its own
    send<DeviceMemory>(DeviceMemory::Request{0});
    auto [header, message] = receive_reply();
    EXPECT_EQ(header.command, static_cast<uint16_t>(CommandId::device_memory));
    EXPECT_EQ(header.status, static_cast<int32_t>(Code::not_found));
    EXPECT_THAT(message, StartsWith("set_tensor: "));
    EXPECT_THAT(message, HasSubstr("buffer handle 42"));

    send<DeviceMemory>(DeviceMemory::Request{0});
    auto [next_header, next_payload] = receive_reply();
    EXPECT_EQ(next_header.status, static_cast<int32_t>(Code::ok)) << "the error is reported once";
    EXPECT_EQ(next_payload.size(), sizeof(DeviceMemory::Reply));
}

TEST_F(ServedSession, GuestThatSkipsTheHandshakeIsToldWhyAndDisconnected) {
    send<DeviceInfo>(DeviceInfo::Request{0});
    auto [header, message] = receive_reply();
    EXPECT_EQ(header.status, static_cast<int32_t>(Code::bad_request));
    EXPECT_THAT(message, HasSubstr("handshake"));
    server.join();
    EXPECT_EQ(served.code(), Code::bad_request);
}

TEST_F(ServedSession, OversizedMessageIsRefusedAndEndsTheSession) {
    SessionLimits limits;
    limits.max_message_size = 64;
    guest.close();
    server.join();
    start(limits);
    int fds[2] = {-1, -1};
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    guest = FramedStream(UniqueFd(fds[0]), "host");
    host = FramedStream(UniqueFd(fds[1]), "guest");
    server = std::thread([this] { served = session->serve(host); });

    send<Hello>(Hello::Request{});
    (void)receive_reply();
    const std::vector<uint8_t> big(100, 0);
    send<SetTensor>(SetTensor::Request{{1, 0, 100}}, ByteView(big));
    auto [header, message] = receive_reply();
    EXPECT_EQ(header.status, static_cast<int32_t>(Code::limit_exceeded));
    EXPECT_THAT(message, HasSubstr("exceeds the limit of 64"));
    server.join();
    EXPECT_EQ(served.code(), Code::limit_exceeded);
}

// A guest that hangs up during a long compute: the compute is abandoned, not run
// to its end with the guest's memory held.
TEST_F(ServedSession, ComputeOfAGuestThatHangsUpIsAbandoned) {
    constexpr int64_t kSide = 1024;
    constexpr int kProducts = 96;  // about 200 GFLOP: seconds on a few cores
    constexpr uint64_t kMatrix = kSide * kSide * sizeof(float);
    send<Hello>(Hello::Request{});
    (void)receive_reply();
    send<BufferAlloc>(BufferAlloc::Request{0, 4 * kMatrix});
    auto [alloc_header, alloc_reply] = receive_reply();
    ASSERT_EQ(alloc_header.status, static_cast<int32_t>(Code::ok)) << alloc_reply;
    BufferAlloc::Reply buffer{};
    std::memcpy(&buffer, alloc_reply.data(), sizeof(buffer));
    send<BackendInit>(BackendInit::Request{0});
    auto [init_header, init_reply] = receive_reply();
    ASSERT_EQ(init_header.status, static_cast<int32_t>(Code::ok)) << init_reply;
    BackendInit::Reply backend{};
    std::memcpy(&backend, init_reply.data(), sizeof(backend));

    // A chain of products, each result in the slot its source does not use.
    GgmlContext ctx = metadata_context(kProducts + 8);
    Placements placements;
    ggml_tensor *a = ggml_new_tensor_2d(ctx.get(), GGML_TYPE_F32, kSide, kSide);
    ggml_tensor *product = ggml_new_tensor_2d(ctx.get(), GGML_TYPE_F32, kSide, kSide);
    placements.place(a, buffer.buffer, 0);
    placements.place(product, buffer.buffer, kMatrix);
    ggml_cgraph *graph = ggml_new_graph(ctx.get());
    for (int i = 0; i < kProducts; ++i) {
        product = ggml_mul_mat(ctx.get(), a, product);
        placements.place(product, buffer.buffer, (2 + i % 2) * kMatrix);
        ggml_build_forward_expand(graph, product);
    }
    TensorListEncoder encoder(placements.locator());
    for (int i = 0; i < ggml_graph_n_nodes(graph); ++i) encoder.add_node(ggml_graph_node(graph, i));
    ASSERT_FALSE(encoder.failed()) << encoder.error();
    const std::vector<uint8_t> list = encoder.finish();

    send<GraphCompute>(graph_request(backend.backend), ByteView(list));
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the compute is under way
    const auto hung_up = std::chrono::steady_clock::now();
    guest.close();
    server.join();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - hung_up).count();
    EXPECT_TRUE(served.ok()) << served.message();
    EXPECT_LT(seconds, 1.0) << "the session ended " << seconds << " s after its guest hung up";
}

// The weight store (host/weight_store.h, host/store_fill.h) through sessions.

// The file (device and inode) mapped at `address` in this process; empty for memory of no file.
std::string file_mapped_at(const void *address) {
    FILE *maps = std::fopen("/proc/self/maps", "r");
    if (maps == nullptr) return "";
    char line[4096];
    std::string found;
    const auto at = reinterpret_cast<uintptr_t>(address);
    while (std::fgets(line, sizeof(line), maps) != nullptr) {
        uintptr_t start = 0, end = 0;
        char device[32] = {};
        unsigned long long inode = 0;
        if (std::sscanf(line, "%lx-%lx %*s %*s %31s %llu", &start, &end, device, &inode) == 4 && start <= at &&
            at < end) {
            if (inode != 0) found = std::string(device) + ":" + std::to_string(inode);
            break;
        }
    }
    std::fclose(maps);
    return found;
}

class CpuSessionWithStore : public CpuSession {
  protected:
    static constexpr uint64_t kBufferSize = 4u << 20;
    static constexpr uint64_t kOffset = 4096 + 64;  // within a page: the ends are copied, the rest mapped
    void SetUp() override {
        CpuSession::SetUp();
        char name[] = "/tmp/ggml-remote-store-session.XXXXXX";
        ASSERT_NE(::mkdtemp(name), nullptr);
        store.directory = name;
        weights = test_support::pattern_bytes(3u << 20, 1);
        session.reset();  // each test opens the sessions it needs
    }
    void TearDown() override {
        session.reset();
        kept.clear();
        owner.reset();
        (void)!std::system(("rm -rf '" + store.directory + "'").c_str());
    }
    // The session's channel to the store's owner (started on first use), for `tenant`.
    void use_store(const std::string &tenant) {
        if (!owner) {
            owner = std::make_unique<StoreOwner>();
            ASSERT_TRUE(owner->open(store).ok());
        }
        UniqueFd channel;
        ASSERT_TRUE(owner->connect(tenant, &channel).ok());
        ASSERT_TRUE(session->use_weight_store(std::move(channel)).ok());
    }
    // A new session of `tenant` (the previous one stays alive in `kept`).
    void open_session(const std::string &tenant) {
        if (session) kept.push_back(std::move(session));
        start(SessionLimits{});
        use_store(tenant);
        Outcome outcome = call<Hello>(Hello::Request{kHelloMagic, kProtocolVersion, kSessionWeightStore});
        ASSERT_TRUE(outcome.status.ok());
        ASSERT_TRUE(outcome.reply<Hello::Reply>().capabilities & kSessionWeightStore);
    }
    // A new session of `tenant` that is offered the owner's model library.
    void open_library_session(const std::string &tenant) {
        if (session) kept.push_back(std::move(session));
        start(SessionLimits{});
        use_store(tenant);
        session->offer_model_library();
        Outcome outcome =
            call<Hello>(Hello::Request{kHelloMagic, kProtocolVersion, kSessionWeightStore | kSessionModelLibrary});
        ASSERT_TRUE(outcome.status.ok());
        EXPECT_TRUE(outcome.reply<Hello::Reply>().capabilities & kSessionModelLibrary);
    }
    Outcome lookup(uint64_t buffer, const std::vector<uint8_t> &bytes, uint64_t offset = kOffset,
                   Session *on = nullptr) {
        WeightLookup::Request request{};
        request.range = {buffer, offset, bytes.size()};
        const ContentDigest digest = content_digest(bytes.data(), bytes.size());
        std::memcpy(request.digest, digest.bytes, sizeof(request.digest));
        return call<WeightLookup>(request, ByteView(), nullptr, on);
    }
    bool found(const Outcome &outcome) {
        EXPECT_TRUE(outcome.status.ok()) << outcome.status.message();
        return outcome.status.ok() && outcome.reply<WeightLookup::Reply>().found != 0;
    }
    // What a guest with the weights does: look up, send them on a miss, go on.
    uint64_t load(const std::vector<uint8_t> &bytes, const std::vector<uint8_t> *named = nullptr) {
        const uint64_t buffer = alloc(kBufferSize);
        if (!found(lookup(buffer, named != nullptr ? *named : bytes))) {
            EXPECT_TRUE(set(buffer, kOffset, bytes).ok());
        }
        (void)get(buffer, 0, 1);  // the next command: the new entry is complete
        session->wait_for_store_for_testing();
        return buffer;
    }
    // Where the session keeps a buffer's byte (a get's reply is a view of it).
    const void *address_of(uint64_t buffer, uint64_t offset) {
        std::vector<uint8_t> payload;
        append_pod(payload, GetTensor::Request{{buffer, offset, 1}});
        ReplyFrame reply;
        EXPECT_TRUE(session->handle(static_cast<uint16_t>(CommandId::get_tensor), ByteView(payload), &reply).ok());
        return reply.tail.bytes().data;
    }

    WeightStoreOptions store;
    std::unique_ptr<StoreOwner> owner;
    std::vector<uint8_t> weights;
    std::vector<std::unique_ptr<Session>> kept;
};

TEST_F(CpuSessionWithStore, ASecondSessionFindsTheWeightsAndSharesTheirPages) {
    open_session("uid 1000");
    const uint64_t first = load(weights);
    EXPECT_EQ(session->store_counters().misses, 1u);
    EXPECT_EQ(get(first, kOffset, weights.size()), weights);
    const std::string first_file = file_mapped_at(address_of(first, 1u << 20));
    EXPECT_NE(first_file, "") << "the guest's bytes landed in the store's entry";
    Session *first_session = session.get();

    open_session("uid 1000");
    const uint64_t second = alloc(kBufferSize);
    EXPECT_TRUE(found(lookup(second, weights)));
    EXPECT_EQ(get(second, kOffset, weights.size()), weights);
    EXPECT_EQ(get(second, 0, kOffset), std::vector<uint8_t>(kOffset, 0)) << "bytes before the range are untouched";
    EXPECT_EQ(file_mapped_at(address_of(second, 1u << 20)), first_file) << "both sessions map one copy";
    EXPECT_EQ(session->store_counters().bytes_saved, weights.size());
    EXPECT_EQ(first_session->store_counters().hits, 0u);
}

TEST_F(CpuSessionWithStore, WeightsTheStoreFilledAreFoundNotReceived) {
    open_session("uid 1000");
    (void)load(weights);
    open_session("uid 1000");
    const uint64_t second = alloc(kBufferSize);
    ASSERT_TRUE(call<BufferSetUsage>(BufferSetUsage::Request{second, GGML_BACKEND_BUFFER_USAGE_WEIGHTS}).status.ok());
    ASSERT_TRUE(found(lookup(second, weights)));
    const SessionCounters figures = session->counters();
    EXPECT_EQ(figures.weights_expected, kBufferSize);
    EXPECT_EQ(figures.weights_found, weights.size());
    EXPECT_EQ(figures.weights_found, figures.store_bytes_saved);
    EXPECT_EQ(figures.weights_received, 0u);
}

TEST_F(CpuSessionWithStore, WritesAfterAFillStayTheSessionsOwn) {
    open_session("uid 1000");
    const uint64_t first = load(weights);
    open_session("uid 1000");
    const uint64_t second = alloc(kBufferSize);
    ASSERT_TRUE(found(lookup(second, weights)));
    ASSERT_TRUE(set(second, kOffset + (1u << 20), std::vector<uint8_t>(8192, 0xAB)).ok());
    open_session("uid 1000");
    const uint64_t third = alloc(kBufferSize);
    EXPECT_TRUE(found(lookup(third, weights)));
    EXPECT_EQ(get(third, kOffset, weights.size()), weights);
    std::swap(session, kept[0]);
    EXPECT_EQ(get(first, kOffset, weights.size()), weights);
}

TEST_F(CpuSessionWithStore, OfferedBytesAreKeptAndSharedOnceTheyAreCopied) {
    open_session("uid 1000");
    const uint64_t first = alloc(kBufferSize);
    WeightOffer::Request offer{};
    offer.range = {first, kOffset, weights.size()};
    const ContentDigest digest = content_digest(weights.data(), weights.size());
    std::memcpy(offer.digest, digest.bytes, sizeof(offer.digest));
    ASSERT_TRUE(call<WeightOffer>(offer).status.ok());
    ASSERT_TRUE(set(first, kOffset, weights).ok());
    EXPECT_EQ(get(first, kOffset, weights.size()), weights);  // ends the entry: the store copies it
    session->wait_for_store_for_testing();
    EXPECT_EQ(get(first, kOffset, weights.size()), weights);  // its pages are now the entry's
    const std::string entry_file = file_mapped_at(address_of(first, 1u << 20));
    EXPECT_NE(entry_file, "");
    open_session("uid 1000");
    const uint64_t second = alloc(kBufferSize);
    EXPECT_TRUE(found(lookup(second, weights)));
    EXPECT_EQ(file_mapped_at(address_of(second, 1u << 20)), entry_file);
}

TEST_F(CpuSessionWithStore, BytesWrittenWhileTheStoreCopiesThemStayTheSessionsOwn) {
    open_session("uid 1000");
    const uint64_t buffer = alloc(kBufferSize);
    ASSERT_FALSE(found(lookup(buffer, weights)));
    ASSERT_TRUE(set(buffer, kOffset, weights).ok());
    (void)get(buffer, 0, 1);  // the entry is complete; the store copies it later
    const std::vector<uint8_t> changed(4096, 0x5A);
    ASSERT_TRUE(set(buffer, kOffset + (1u << 20), changed).ok());
    session->wait_for_store_for_testing();
    EXPECT_EQ(get(buffer, kOffset + (1u << 20), changed.size()), changed) << "the entry was not swapped in";
    EXPECT_EQ(file_mapped_at(address_of(buffer, 1u << 20)), "");
}

TEST_F(CpuSessionWithStore, AnotherTenantDoesNotFindThem) {
    open_session("uid 1000");
    load(weights);
    open_session("uid 1001");
    EXPECT_FALSE(found(lookup(alloc(kBufferSize), weights)));
}

// Two guests load the same weights at once: the second's lookup waits while the
// first sends them, and both sessions map the one entry.
TEST_F(CpuSessionWithStore, ConcurrentFirstLoadsShareOneEntry) {
    open_session("uid 1000");
    Session *first_session = session.get();
    const uint64_t first = alloc(kBufferSize);
    ASSERT_FALSE(found(lookup(first, weights)));  // it claims the entry
    open_session("uid 1000");
    const uint64_t second = alloc(kBufferSize);
    Session *second_session = session.get();
    std::swap(session, kept.back());  // the first guest goes on while the second looks up
    ASSERT_EQ(session.get(), first_session);
    bool second_found = false;
    std::thread second_guest([&] { second_found = found(lookup(second, weights, kOffset, second_session)); });
    ASSERT_TRUE(set(first, kOffset, weights).ok());
    (void)get(first, 0, 1);
    session->wait_for_store_for_testing();
    second_guest.join();
    EXPECT_TRUE(second_found) << "the second lookup waited for the first guest's entry";
    const std::string entry_file = file_mapped_at(address_of(first, 1u << 20));
    EXPECT_NE(entry_file, "");
    std::swap(session, kept.back());
    EXPECT_EQ(get(second, kOffset, weights.size()), weights);
    EXPECT_EQ(file_mapped_at(address_of(second, 1u << 20)), entry_file);
}

// Repacked images in the store: sessions of one tenant that compute with the same
// weights map one image (the later ones repack nothing); another tenant's sessions
// make their own, even in a shared store.
class RepackedWeightsWithStore : public RepackedWeights {
  protected:
    void SetUp() override {
        RepackedWeights::SetUp();
        if (IsSkipped() || HasFatalFailure()) return;
        session.reset();  // each test opens the sessions it needs
        char name[] = "/tmp/ggml-remote-store-repack.XXXXXX";
        ASSERT_NE(::mkdtemp(name), nullptr);
        store.directory = name;
        store.shared_across_tenants = true;
        owner = std::make_unique<StoreOwner>();
        ASSERT_TRUE(owner->open(store).ok());
    }
    void TearDown() override {
        session.reset();
        kept.clear();
        owner.reset();
        if (!store.directory.empty()) (void)!std::system(("rm -rf '" + store.directory + "'").c_str());
    }
    // A new session of `tenant` with the store (the previous one stays alive in `kept`).
    void open_session(const std::string &tenant) {
        if (session) kept.push_back(std::move(session));
        restart(SessionLimits{});
        UniqueFd channel;
        ASSERT_TRUE(owner->connect(tenant, &channel).ok());
        ASSERT_TRUE(session->use_weight_store(std::move(channel)).ok());
    }
    // y = W x, then once more when the image the first made is in the store: its
    // pages are swapped for the store's before the second.
    std::vector<float> product_twice() {
        const std::vector<float> first = product();
        session->wait_for_store_for_testing();
        expect_close(product(weight_file), first);
        return first;
    }
    // The store's repacked images this process maps: "device:inode" of each mapping.
    std::vector<std::string> mapped_images() const {
        std::vector<std::string> images;
        FILE *maps = std::fopen("/proc/self/maps", "r");
        if (maps == nullptr) return images;
        char line[4096];
        while (std::fgets(line, sizeof(line), maps) != nullptr) {
            char device[32] = {}, path[2048] = {};
            unsigned long long inode = 0;
            if (std::sscanf(line, "%*s %*s %*s %31s %llu %2047s", device, &inode, path) != 3) continue;
            const std::string file(path);
            if (file.rfind(store.directory + "/", 0) == 0 && file.find("/r-") != std::string::npos) {
                images.push_back(std::string(device) + ":" + std::to_string(inode));
            }
        }
        std::fclose(maps);
        return images;
    }

    WeightStoreOptions store;
    std::unique_ptr<StoreOwner> owner;
    std::vector<std::unique_ptr<Session>> kept;
};

TEST_F(RepackedWeightsWithStore, TwoSessionsOfATenantMapOneRepackedImage) {
    open_session("uid 1000");
    const std::vector<float> first = product_twice();
    ASSERT_EQ(session->counters().weights_repacked, 1u);
    ASSERT_EQ(mapped_images().size(), 1u) << "the first session's copy is now the store's image";
    open_session("uid 1000");
    const std::vector<float> second = product();
    EXPECT_EQ(session->counters().weights_repacked, 1u);
    const std::vector<std::string> images = mapped_images();
    ASSERT_EQ(images.size(), 2u);
    EXPECT_EQ(images[0], images[1]) << "both sessions map one image";
    expect_close(second, first);
    expect_near_reference(second, reference(quantized));
}

TEST_F(RepackedWeightsWithStore, AnotherTenantMakesItsOwnImage) {
    open_session("uid 1000");
    const std::vector<float> first = product_twice();
    open_session("uid 1001");
    expect_close(product_twice(), first);
    const std::vector<std::string> images = mapped_images();
    ASSERT_EQ(images.size(), 2u);
    EXPECT_NE(images[0], images[1]);
}

// An image the store holds is used only for the weights it was made from.
TEST_F(RepackedWeightsWithStore, OtherWeightsOfTheSameShapeGetTheirOwnImage) {
    open_session("uid 1000");
    (void)product_twice();
    open_session("uid 1000");
    quantized = negated_weights();
    expect_near_reference(product(), reference(quantized));
}

TEST_F(CpuSessionWithStore, AGuestThatNamesOtherBytesKeepsItsOwnAndTheStoreNone) {
    open_session("uid 1000");
    const std::vector<uint8_t> sent = test_support::pattern_bytes(weights.size(), 2);
    const uint64_t buffer = load(sent, &weights);  // names `weights`, sends `sent`
    EXPECT_EQ(get(buffer, kOffset, sent.size()), sent);
    open_session("uid 1000");
    EXPECT_FALSE(found(lookup(alloc(kBufferSize), weights)));
    EXPECT_FALSE(found(lookup(alloc(kBufferSize), sent)));
}

TEST_F(CpuSessionWithStore, AnEvictedEntryMeansTheBytesAreSentAgain) {
    open_session("uid 1000");
    load(weights);
    ASSERT_EQ(std::system(("rm -f '" + store.directory + "'/*/[0-9a-f]*").c_str()), 0);
    open_session("uid 1000");
    const uint64_t buffer = load(weights);
    EXPECT_EQ(session->store_counters().misses, 1u);
    EXPECT_EQ(get(buffer, kOffset, weights.size()), weights);
}

// A store whose owner serves the GGUF files of `directory` as a model library (--models).
void open_library(const std::string &directory, std::unique_ptr<StoreOwner> *owner) {
    auto library = std::make_unique<ModelLibrary>();
    ASSERT_TRUE(library->open(directory).ok());
    library->index_now();
    *owner = std::make_unique<StoreOwner>();
    (*owner)->use_library(std::move(library));
}

// --models alone: a published model's weights fill a lookup of every tenant, and
// the guest is told to ask even for weights of files it never loaded.
TEST_F(CpuSessionWithStore, ALibrarysWeightsFillALookupOfEveryTenant) {
    ASSERT_TRUE(test_support::write_gguf(store.directory + "/model.gguf", {weights}));
    open_library(store.directory, &owner);
    for (const char *tenant : {"uid 1000", "address 10.0.0.7"}) {
        open_library_session(tenant);
        const uint64_t buffer = alloc(kBufferSize);
        EXPECT_TRUE(found(lookup(buffer, weights))) << tenant;
        EXPECT_EQ(get(buffer, kOffset, weights.size()), weights) << tenant;
        EXPECT_EQ(session->store_counters().bytes_saved, weights.size());
    }
    // A server without a library does not say it has one.
    start(SessionLimits{});
    use_store("uid 1000");
    Outcome outcome =
        call<Hello>(Hello::Request{kHelloMagic, kProtocolVersion, kSessionWeightStore | kSessionModelLibrary});
    ASSERT_TRUE(outcome.status.ok());
    EXPECT_FALSE(outcome.reply<Hello::Reply>().capabilities & kSessionModelLibrary);
}

// GGUF aligns tensors to 32 bytes, not to pages, and a guest's buffer holds them
// as the file does: its first lookup moves the fresh buffer in its page so that
// the file's pages map in place for every tensor (not only for those that happen
// to share a page's phase), and none of the model is read into the worker.
TEST_F(CpuSessionWithStore, EveryTensorOfALibraryModelMapsFromItsFile) {
    const std::vector<uint8_t> second = test_support::pattern_bytes((2u << 20) + 100, 2);
    const std::string path = store.directory + "/model.gguf";
    ASSERT_TRUE(test_support::write_gguf(path, {weights, second}));
    const std::vector<uint64_t> in_file = test_support::gguf_tensor_offsets(path);
    ASSERT_EQ(in_file.size(), 2u);
    ASSERT_NE(in_file[0] % 4096, 0u) << "the test needs a model whose data does not start at a page";
    open_library(store.directory, &owner);
    open_library_session("uid 1000");
    const uint64_t buffer = alloc(8u << 20), apart = in_file[1] - in_file[0];
    ASSERT_TRUE(found(lookup(buffer, weights, 0)));
    ASSERT_TRUE(found(lookup(buffer, second, apart)));
    EXPECT_EQ(get(buffer, 0, weights.size()), weights);
    EXPECT_EQ(get(buffer, apart, second.size()), second);
    const std::string file = file_mapped_at(address_of(buffer, 1u << 20));
    EXPECT_NE(file, "") << "the first tensor's pages are the file's";
    EXPECT_EQ(file_mapped_at(address_of(buffer, apart + (1u << 20))), file) << "and so are the second's";
}

// The guest's small tensors come first, sent as bytes: they move with the buffer.
TEST_F(CpuSessionWithStore, BytesWrittenBeforeTheFirstLookupMoveWithTheBuffer) {
    const std::string path = store.directory + "/model.gguf";
    ASSERT_TRUE(test_support::write_gguf(path, {weights}));
    ASSERT_NE(test_support::gguf_tensor_offsets(path).at(0) % 4096, 0u);
    open_library(store.directory, &owner);
    open_library_session("uid 1000");
    const uint64_t buffer = alloc(8u << 20);
    const std::vector<uint8_t> norm = test_support::pattern_bytes(4096, 3), other = test_support::pattern_bytes(100, 4);
    ASSERT_TRUE(set(buffer, 0, norm).ok());
    ASSERT_TRUE(set(buffer, 7u << 20, other).ok());
    ASSERT_TRUE(found(lookup(buffer, weights, 4096)));
    EXPECT_NE(file_mapped_at(address_of(buffer, 4096 + (1u << 20))), "") << "the buffer moved";
    EXPECT_EQ(get(buffer, 0, norm.size()), norm);
    EXPECT_EQ(get(buffer, 7u << 20, other.size()), other);
    EXPECT_EQ(get(buffer, 4096, weights.size()), weights);
}

// Once the guest read it (or computed with it), a buffer stays where it is.
TEST_F(CpuSessionWithStore, ABufferReadBeforeItsFirstLookupStaysWhereItIs) {
    ASSERT_TRUE(test_support::write_gguf(store.directory + "/model.gguf", {weights}));
    open_library(store.directory, &owner);
    open_library_session("uid 1000");
    const uint64_t buffer = alloc(8u << 20);
    const std::vector<uint8_t> own = test_support::pattern_bytes(100, 3);
    ASSERT_TRUE(set(buffer, 6u << 20, own).ok());
    const void *before = address_of(buffer, 0);
    ASSERT_TRUE(found(lookup(buffer, weights, 0)));
    EXPECT_EQ(address_of(buffer, 0), before);
    EXPECT_EQ(get(buffer, 6u << 20, own.size()), own);
    EXPECT_EQ(get(buffer, 0, weights.size()), weights);
}

// The named entries in the store's directory (of every tenant).
size_t store_entries(const std::string &directory) {
    size_t count = 0;
    if (DIR *root = ::opendir(directory.c_str())) {
        while (const dirent *tenant = ::readdir(root)) {
            if (tenant->d_name[0] == '.') continue;
            DIR *part = ::opendir((directory + "/" + tenant->d_name).c_str());
            if (part == nullptr) continue;
            while (const dirent *entry = ::readdir(part)) count += entry->d_name[0] != '.';
            ::closedir(part);
        }
        ::closedir(root);
    }
    return count;
}

// Issue 25, class 2: offers of overlapping ranges whose bytes never come make the
// store copy and hash nothing (on main, each made the worker copy and hash its
// whole range, here named rightly since the buffer holds the zeros they name):
// the store's work for a guest is bounded by the bytes it sent.
TEST_F(CpuSessionWithStore, OffersWithoutTheirBytesCostTheStoreNothing) {
    open_session("uid 1000");
    const uint64_t buffer = alloc(kBufferSize);
    for (uint64_t i = 0; i < 16; ++i) {
        const uint64_t size = (2u << 20) - i * 4096;  // another tensor each time, of zeros
        const std::vector<uint8_t> zeros(size, 0);
        const ContentDigest digest = content_digest(zeros.data(), zeros.size());
        WeightOffer::Request offer{};
        offer.range = {buffer, i * 4096, size};  // overlapping
        std::memcpy(offer.digest, digest.bytes, sizeof(offer.digest));
        ASSERT_TRUE(call<WeightOffer>(offer).status.ok());
        ASSERT_TRUE(set(buffer, kBufferSize - 4096, std::vector<uint8_t>(4096, 7)).ok());  // bytes elsewhere
        (void)get(buffer, 0, 1);                                                           // ends the offer
    }
    session->wait_for_store_for_testing();
    EXPECT_EQ(store_entries(store.directory), 0u) << "the store kept bytes the guest never sent";
    // An offer followed by its bytes is kept.
    const uint64_t other = alloc(kBufferSize);
    WeightOffer::Request offer{};
    offer.range = {other, kOffset, weights.size()};
    const ContentDigest digest = content_digest(weights.data(), weights.size());
    std::memcpy(offer.digest, digest.bytes, sizeof(offer.digest));
    ASSERT_TRUE(call<WeightOffer>(offer).status.ok());
    ASSERT_TRUE(set(other, kOffset, weights).ok());
    (void)get(other, 0, 1);
    session->wait_for_store_for_testing();
    EXPECT_EQ(store_entries(store.directory), 1u);
}

TEST_F(CpuSessionWithStore, LookupsOutsideTheRulesAreRefused) {
    open_session("uid 1000");
    const uint64_t buffer = alloc(kBufferSize);
    EXPECT_EQ(lookup(buffer, std::vector<uint8_t>(kMinWeightLookupBytes - 1)).status.code(), Code::bad_request);
    EXPECT_EQ(lookup(buffer, weights, kBufferSize - weights.size() + 1).status.code(), Code::bad_request);
    EXPECT_EQ(lookup(buffer + 100, weights).status.code(), Code::not_found);
    // A session whose guest did not ask for the store.
    start(SessionLimits{});
    use_store("uid 1000");
    hello();
    EXPECT_EQ(lookup(alloc(kBufferSize), weights).status.code(), Code::unsupported);
    // Shared memory is the guest's to write.
    start(SessionLimits{});
    session->allow_shared_memory();
    use_store("uid 1000");
    hello(kSessionSharedMemory | kSessionWeightStore);
    EXPECT_EQ(lookup(alloc(kBufferSize), weights).status.code(), Code::bad_request);
}

// GPU failures: a session on ggml's Vulkan device (lavapipe here) meets the
// device's limits and refusals as errors, and lives on.

// Vulkan0, loaded as the server loads it with GGML_VK_VISIBLE_DEVICES=0 (ggml hides
// CPU-type Vulkan devices such as lavapipe without it); null without a Vulkan device.
ggml_backend_dev_t host_vulkan_device() {
    setenv("GGML_VK_VISIBLE_DEVICES", "0", 0);  // before the first load: it is read once
    host_cpu_device();
    return ggml_backend_dev_by_name("Vulkan0");
}

class VulkanSessionGraph : public CpuSessionGraph {
  protected:
    void SetUp() override {
        vulkan = host_vulkan_device();
        if (vulkan == nullptr) GTEST_SKIP() << "no Vulkan0 device (libggml0-backend-vulkan and a Vulkan driver)";
        CpuSessionGraph::SetUp();
        session->log_compute_failures([this](const std::string &line) { logged.push_back(line); });
    }

    std::vector<ggml_backend_dev_t> served_devices() const override { return {vulkan}; }

    // A node Vulkan0 has no kernel for, which ggml's constructor and the op rules accept.
    ggml_tensor *unsupported_node() {
        ggml_tensor *half = ggml_new_tensor_1d(ctx.get(), GGML_TYPE_F16, kLength);
        ggml_tensor *scaled = ggml_scale(ctx.get(), half, 2.0f);
        ggml_set_name(scaled, "scaled");
        arena->place(half, 0);
        arena->place(scaled, 64);
        return scaled;
    }

    ggml_backend_dev_t vulkan = nullptr;
    std::vector<std::string> logged;
};

TEST_F(VulkanSessionGraph, AnAllocationBeyondTheDevicesMemoryFailsAndTheSessionLivesOn) {
    size_t free_memory = 0, total_memory = 0;
    ggml_backend_dev_memory(vulkan, &free_memory, &total_memory);
    ASSERT_GT(total_memory, 0u);

    Outcome outcome = call<BufferAlloc>(BufferAlloc::Request{0, uint64_t{total_memory} + 1});
    EXPECT_EQ(outcome.status.code(), Code::out_of_memory);
    EXPECT_THAT(outcome.status.message(), HasSubstr("bytes of memory"));
    EXPECT_EQ(session->buffer_count(), 1u) << "only the fixture's buffer";

    const uint64_t after = alloc(1 << 20);
    ASSERT_NE(after, 0u);
    ASSERT_TRUE(set(after, 4096, bytes_of(a_values)).ok());
    EXPECT_THAT(floats_of(get(after, 4096, 32)), ElementsAre(1, 2, 3, 4, 5, 6, 7, 8));
}

TEST_F(VulkanSessionGraph, AnAllocationBeyondTheLargestBufferFailsAndTheSessionLivesOn) {
    const size_t largest = ggml_backend_buft_get_max_size(ggml_backend_dev_buffer_type(vulkan));
    Outcome outcome = call<BufferAlloc>(BufferAlloc::Request{0, uint64_t{largest} + 1});
    EXPECT_FALSE(outcome.status.ok());
    EXPECT_THAT(outcome.status.message(), HasSubstr("larger than"));
    EXPECT_EQ(session->memory_in_use(), kBufferSize) << "nothing charged for the refused buffer";

    ASSERT_NE(alloc(1 << 20), 0u);
    ASSERT_TRUE(compute_list(sum_graph()).status.ok());
    EXPECT_THAT(floats_of(get(buffer, 64, 32)), ElementsAre(11, 22, 33, 44, 55, 66, 77, 88));
}

// ggml-vulkan has no kernel for an f16 SCALE and says so in supports_op; computing
// one anyway aborts the process ("Missing op"). A guest may send it all the same.
TEST_F(VulkanSessionGraph, AnOpTheDeviceCannotComputeFailsTheComputeWithALogLine) {
    ggml_tensor *scaled = unsupported_node();
    ASSERT_FALSE(ggml_backend_dev_supports_op(vulkan, scaled)) << "pick another op: Vulkan0 computes this one";

    Outcome outcome = compute({scaled});
    EXPECT_EQ(outcome.status.code(), Code::unsupported);
    EXPECT_THAT(outcome.status.message(), HasSubstr("cannot compute node 'scaled' (SCALE of f16)"));
    ASSERT_EQ(logged.size(), 1u);
    EXPECT_THAT(logged[0], StartsWith("failed graph compute: host device Vulkan0 cannot compute"));

    // The session and its backend compute the next graph.
    ASSERT_TRUE(compute_list(sum_graph()).status.ok());
    EXPECT_THAT(floats_of(get(buffer, 64, 32)), ElementsAre(11, 22, 33, 44, 55, 66, 77, 88));
    EXPECT_EQ(logged.size(), 1u);
}

TEST_F(VulkanSessionGraph, ASessionThatKeepsFailingIsLoggedAFewTimesOnly) {
    ggml_cgraph *graph = ggml_new_graph(ctx.get());
    ggml_build_forward_expand(graph, unsupported_node());
    const std::vector<uint8_t> list = encode_nodes(graph);
    for (int i = 0; i < 50; ++i) EXPECT_FALSE(compute_list(list).status.ok());
    ASSERT_EQ(logged.size(), 9u);
    EXPECT_THAT(logged.back(), HasSubstr("not logged"));
}

// ggml-vulkan's graph_optimize pulls an independent node forward, next to the one
// before it; the host says so as the nodes' new places.
TEST_F(VulkanSessionGraph, GraphOptimizeAnswersTheVulkanBackendsOrder) {
    Outcome outcome = call<GraphOptimize>(GraphOptimize::Request{compute_backend}, ByteView(optimize_list(ctx.get())));
    ASSERT_TRUE(outcome.status.ok()) << outcome.status.message();
    const auto reply = outcome.reply<GraphOptimize::Reply>();
    EXPECT_EQ(uint32_t{reply.has_optimizer}, 1u);  // packed fields: copies, not references
    ASSERT_EQ(uint32_t{reply.n_nodes}, 3u);
    std::vector<int32_t> order(reply.n_nodes + 2 * reply.n_alloc_deps);
    ASSERT_EQ(outcome.tail.size(), order.size() * sizeof(int32_t));
    std::memcpy(order.data(), outcome.tail.data(), outcome.tail.size());
    order.resize(reply.n_nodes);
    EXPECT_THAT(order, ElementsAre(0, 2, 1)) << "sum, product, then twice (which waits for sum)";
}

// The question is about shapes: a tensor with data (a buffer handle) is refused,
// as in supports_op, before the backend sees anything.
TEST_F(VulkanSessionGraph, GraphOptimizeOfAGraphWithDataIsRefused) {
    Outcome outcome =
        call<GraphOptimize>(GraphOptimize::Request{compute_backend}, ByteView(optimize_list(ctx.get(), arena.get())));
    EXPECT_EQ(outcome.status.code(), Code::bad_request);
    EXPECT_EQ(call<GraphOptimize>(GraphOptimize::Request{compute_backend}).status.code(), Code::bad_request)
        << "no graph";
}

}  // namespace
}  // namespace ggml_remote::host
