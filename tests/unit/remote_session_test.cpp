// RemoteSession, the guest's side of a connection (guest/session/remote_session.h):
// against an in-process host Session on the CPU device over a socketpair, and
// against a scripted peer where the test needs to see the bytes or cut the line.
#include "guest/session/remote_session.h"

#include <ggml-backend.h>
#include <ggml.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "ggml_test_support.h"
#include "guest/device.h"
#include "host/worker/session/session.h"
#include "protocol/commands.h"
#include "protocol/tensor_codec.h"

namespace ggml_remote::guest {
namespace {

using namespace protocol;
using test_support::bytes_of;
using test_support::floats_of;
using test_support::GgmlContext;
using test_support::host_cpu_device;
using test_support::metadata_context;
using test_support::PlacementArena;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Runs `work` on a thread of its own and gives its status, or a timeout error
// when it has not returned within `seconds` (the thread is then left behind).
Status within(double seconds, std::function<Status()> work) {
    auto promise = std::make_shared<std::promise<Status>>();
    std::future<Status> result = promise->get_future();
    std::thread([promise, work] { promise->set_value(work()); }).detach();
    if (result.wait_for(std::chrono::duration<double>(seconds)) != std::future_status::ready) {
        return error(Code::error, "still waiting after " + std::to_string(seconds) + " s");
    }
    return result.get();
}

// A RemoteSession served by a host Session on a thread, as a worker serves one.
class ServedRemoteSession : public ::testing::Test {
  protected:
    void SetUp() override {
        ggml_backend_dev_t cpu = host_cpu_device();
        ASSERT_NE(cpu, nullptr) << "ggml has no CPU device";
        host_session = std::make_unique<host::Session>(std::vector{cpu}, host::SessionLimits{});
        int fds[2] = {-1, -1};
        ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
        host_stream = FramedStream(UniqueFd(fds[1]), "guest");
        server = std::thread([this] { served = host_session->serve(host_stream); });
        Status status = RemoteSession::start(FramedStream(UniqueFd(fds[0]), "host"), "test host", options(), &session);
        ASSERT_TRUE(status.ok()) << status.message();
        ASSERT_EQ(session->device_count(), 1u);
    }
    virtual GuestOptions options() { return GuestOptions{}; }

    void TearDown() override {
        session.reset();  // hangs up: serve() returns
        if (server.joinable()) server.join();
    }

    uint64_t alloc(uint64_t size) {
        BufferAlloc::Reply reply{};
        Status status = session->call<BufferAlloc>({0, size}).reply(&reply).run();
        EXPECT_TRUE(status.ok()) << status.message();
        return reply.buffer;
    }

    uint64_t backend() {
        BackendInit::Reply reply{};
        Status status = session->call<BackendInit>({0}).reply(&reply).run();
        EXPECT_TRUE(status.ok()) << status.message();
        return reply.backend;
    }

    void set(uint64_t buffer, uint64_t offset, const std::vector<uint8_t> &bytes) {
        ASSERT_TRUE(session->post<SetTensor>({{buffer, offset, bytes.size()}}, ByteView(bytes)).ok());
    }

    std::vector<uint8_t> get(uint64_t buffer, uint64_t offset, size_t size) {
        std::vector<uint8_t> bytes(size);
        Status status = session->call<GetTensor>({{buffer, offset, size}}).reply_tail_into(bytes.data(), size).run();
        EXPECT_TRUE(status.ok()) << status.message();
        return bytes;
    }

    std::unique_ptr<host::Session> host_session;
    FramedStream host_stream;
    std::thread server;
    Status served = error(Code::error, "serve() did not return");
    std::unique_ptr<RemoteSession> session;
};

TEST(RemoteDeviceName, FollowsTheServersPositionInTheList) {
    EXPECT_EQ(remote_device_name(0, 0), "REMOTE0");
    EXPECT_EQ(remote_device_name(1, 0), "REMOTE1");
    EXPECT_EQ(remote_device_name(1, 1), "REMOTE1.1");
    EXPECT_EQ(remote_device_name(11, 0), "REMOTE11");
    EXPECT_EQ(remote_device_name(1, 12), "REMOTE1.12");
}

TEST_F(ServedRemoteSession, HostErrorOfAOneWayCommandComesWithTheNextReply) {
    const std::vector<uint8_t> data = {1, 2, 3};
    EXPECT_TRUE(session->post<SetTensor>({{42, 0, 3}}, ByteView(data)).ok()) << "queued: nothing to report yet";
    DeviceMemory::Reply memory{};
    Status status = session->call<DeviceMemory>({0}).reply(&memory).run();
    EXPECT_EQ(status.code(), Code::not_found);
    EXPECT_THAT(status.message(), HasSubstr("set_tensor"));
    EXPECT_THAT(status.message(), HasSubstr("buffer handle 42"));
    status = session->call<DeviceMemory>({0}).reply(&memory).run();
    EXPECT_TRUE(status.ok()) << "reported once: " << status.message();
    EXPECT_GT(memory.memory_total, 0u);
}

TEST_F(ServedRemoteSession, DeferredReplyIsReadAtSynchronize) {
    const uint64_t buffer = alloc(64);
    const uint64_t compute = backend();
    const std::vector<uint8_t> data = {1, 2, 3, 4, 5, 6, 7, 8};
    set(buffer, 8, data);
    std::vector<uint8_t> read_back(8, 0);
    ASSERT_TRUE(session->call<GetTensor>({{buffer, 8, 8}}).reply_tail_into(read_back.data(), 8).run_later("read").ok());
    const RemoteSession::Counters before = session->counters();
    EXPECT_THAT(read_back, ElementsAre(0, 0, 0, 0, 0, 0, 0, 0)) << "the reply waits until it is asked for";

    ASSERT_TRUE(session->synchronize(compute).ok());
    EXPECT_EQ(read_back, data);
    const RemoteSession::Counters after = session->counters();
    EXPECT_EQ(after.round_trips, before.round_trips + 1) << "one wait, for the deferred reply";
    EXPECT_EQ(after.commands, before.commands) << "no compute outstanding: no synchronize command";

    ASSERT_TRUE(session->synchronize(compute).ok());
    EXPECT_EQ(session->counters().round_trips, after.round_trips) << "nothing outstanding: no trip at all";
}

TEST_F(ServedRemoteSession, MarkIsReachedBySynchronizingOnlyWhenNoLaterReplyCame) {
    const uint64_t buffer = alloc(64);
    const uint64_t compute = backend();
    set(buffer, 0, {9, 9, 9, 9});
    const uint64_t after_write = session->mark();
    const uint64_t trips = session->counters().round_trips;
    ASSERT_TRUE(session->wait_for_mark(after_write, compute).ok());
    EXPECT_EQ(session->counters().round_trips, trips + 1) << "the write had no reply: one synchronize";
    EXPECT_THAT(get(buffer, 0, 4), ElementsAre(9, 9, 9, 9));

    const uint64_t before_read = session->mark();
    const uint64_t trips_after_read = session->counters().round_trips;
    ASSERT_TRUE(session->wait_for_mark(before_read, compute).ok());
    ASSERT_TRUE(session->wait_for_mark(after_write, compute).ok());
    EXPECT_EQ(session->counters().round_trips, trips_after_read) << "the read's reply already passed both marks";
}

// c = a + b in one buffer: a at 0, b at 32, c at 64 (8 floats each).
class ServedRemoteGraph : public ServedRemoteSession {
  protected:
    void SetUp() override {
        ServedRemoteSession::SetUp();
        if (HasFatalFailure()) return;
        buffer = alloc(128);
        compute = backend();
        arena = std::make_unique<PlacementArena>(buffer, 128);
        ggml_tensor *a = ggml_new_tensor_1d(ctx.get(), GGML_TYPE_F32, 8);
        ggml_tensor *b = ggml_new_tensor_1d(ctx.get(), GGML_TYPE_F32, 8);
        ggml_tensor *c = ggml_add(ctx.get(), a, b);
        arena->place(a, 0);
        arena->place(b, 32);
        arena->place(c, 64);
        ggml_cgraph *graph = ggml_new_graph(ctx.get());
        ggml_build_forward_expand(graph, c);
        TensorListEncoder encoder(arena->locator());
        for (int i = 0; i < ggml_graph_n_nodes(graph); ++i) encoder.add_node(ggml_graph_node(graph, i));
        ASSERT_FALSE(encoder.failed()) << encoder.error();
        encoded = encoder.finish();
        set(buffer, 0, bytes_of({1, 2, 3, 4, 5, 6, 7, 8}));
        set(buffer, 32, bytes_of({10, 20, 30, 40, 50, 60, 70, 80}));
    }

    std::vector<float> sum() { return floats_of(get(buffer, 64, 32)); }

    GgmlContext ctx = metadata_context(16, 1);
    std::unique_ptr<PlacementArena> arena;
    uint64_t buffer = 0, compute = 0;
    std::vector<uint8_t> encoded;
};

TEST_F(ServedRemoteGraph, GraphIsSentOnceThenReplayedByItsSlot) {
    RemoteSession::GraphTicket ticket;
    ASSERT_TRUE(session->compute_graph(compute, encoded, RemoteSession::Completion::waits, &ticket).ok());
    EXPECT_THAT(sum(), ElementsAre(11, 22, 33, 44, 55, 66, 77, 88));

    set(buffer, 0, bytes_of({2, 2, 2, 2, 2, 2, 2, 2}));
    bool replayed = false;
    ASSERT_TRUE(session->compute_graph_again(compute, ticket, RemoteSession::Completion::waits, &replayed).ok());
    EXPECT_TRUE(replayed);
    EXPECT_THAT(sum(), ElementsAre(12, 22, 32, 42, 52, 62, 72, 82)) << "the replay computed with the new inputs";
    const RemoteSession::Counters counters = session->counters();
    EXPECT_EQ(counters.graphs_sent, 1u);
    EXPECT_EQ(counters.graphs_replayed, 1u);
}

TEST_F(ServedRemoteGraph, GraphTheHostForgotIsNotReplayedButSentAgain) {
    RemoteSession::GraphTicket ticket;
    ASSERT_TRUE(session->compute_graph(compute, encoded, RemoteSession::Completion::returns_at_once, &ticket).ok());
    const uint64_t other = alloc(64);
    ASSERT_TRUE(session->free_buffer(other).ok());  // the host forgets its kept graphs
    const RemoteSession::Counters before = session->counters();

    bool replayed = true;
    ASSERT_TRUE(session->compute_graph_again(compute, ticket, RemoteSession::Completion::waits, &replayed).ok());
    EXPECT_FALSE(replayed);
    EXPECT_EQ(session->counters().commands, before.commands) << "nothing was sent";

    ASSERT_TRUE(session->compute_graph(compute, encoded, RemoteSession::Completion::waits, &ticket).ok());
    EXPECT_EQ(session->counters().graphs_sent, 2u);
    EXPECT_EQ(session->counters().graphs_replayed, 0u);
    EXPECT_THAT(sum(), ElementsAre(11, 22, 33, 44, 55, 66, 77, 88));
}

TEST_F(ServedRemoteGraph, OnlyANewGraphWaitsForTheHost) {
    RemoteSession::GraphTicket ticket;
    const uint64_t trips_before = session->counters().round_trips;
    ASSERT_TRUE(session->compute_graph(compute, encoded, RemoteSession::Completion::returns_at_once, &ticket).ok());
    EXPECT_EQ(session->counters().round_trips, trips_before + 1) << "the new graph waited for its verdict";

    bool replayed = false;
    const auto at_once = RemoteSession::Completion::returns_at_once;
    ASSERT_TRUE(session->compute_graph_again(compute, ticket, at_once, &replayed).ok());
    ASSERT_TRUE(replayed);
    ASSERT_TRUE(session->compute_graph(compute, encoded, at_once).ok());
    EXPECT_EQ(session->counters().round_trips, trips_before + 1) << "replays returned at once";
    EXPECT_THAT(sum(), ElementsAre(11, 22, 33, 44, 55, 66, 77, 88));
}

// A graph new to the host waits for its verdict even when asked to return at once:
// ggml_backend_graph_compute then fails for the graph that failed, not a later read.
TEST_F(ServedRemoteGraph, ANewGraphThatFailsOnTheHostFailsItsOwnCompute) {
    PlacementArena elsewhere(buffer + 100, 128);  // a buffer the host never gave out
    ggml_tensor *x = ggml_new_tensor_1d(ctx.get(), GGML_TYPE_F32, 8);
    elsewhere.place(x, 0);
    ggml_tensor *doubled = ggml_add(ctx.get(), x, x);
    elsewhere.place(doubled, 32);
    TensorListEncoder encoder(elsewhere.locator());
    encoder.add_node(doubled);
    Status status = session->compute_graph(compute, encoder.finish(), RemoteSession::Completion::returns_at_once);
    EXPECT_FALSE(status.ok());
    EXPECT_THAT(status.message(), HasSubstr("graph_compute"));
    EXPECT_TRUE(session->synchronize(compute).ok()) << "reported once";
}

// A peer played by the test: it sees every byte the guest sends, and answers
// what the test writes for it.
class ScriptedPeer : public ::testing::Test {
  protected:
    void SetUp() override {
        int fds[2] = {-1, -1};
        ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
        peer = FramedStream(UniqueFd(fds[1]), "guest");
        Hello::Reply hello{kProtocolVersion, 1, granted()};
        answer(CommandId::hello, ByteView(&hello, sizeof(hello)));  // waits in the socket for the handshake
        Status status =
            RemoteSession::start(FramedStream(UniqueFd(fds[0]), "host"), "scripted host", options(), &session);
        ASSERT_TRUE(status.ok()) << status.message();
        EXPECT_EQ(next_command(), CommandId::hello);
    }
    virtual GuestOptions options() { return GuestOptions{}; }
    // The capabilities the scripted server grants (an older server: none).
    virtual uint64_t granted() { return 0; }

    void keep_alive() {
        FrameHeader header;
        header.flags = kFrameKeepAlive;
        ASSERT_TRUE(peer.send(header, {}).ok());
    }

    // A reply whose header announces `payload_size` bytes, followed by `payload`.
    void answer_claiming(CommandId command, uint64_t payload_size, ByteView payload, int32_t status = 0) {
        FrameHeader header;
        header.command = static_cast<uint16_t>(command);
        header.flags = kFrameReply;
        header.status = status;
        header.payload_size = payload_size;
        std::vector<uint8_t> bytes(reinterpret_cast<uint8_t *>(&header), reinterpret_cast<uint8_t *>(&header + 1));
        bytes.insert(bytes.end(), payload.data, payload.data + payload.size);
        ASSERT_TRUE(peer.send_frames(ByteView(bytes)).ok());
    }

    void answer(CommandId command, ByteView payload) {
        FrameHeader header;
        header.command = static_cast<uint16_t>(command);
        header.flags = kFrameReply;
        ASSERT_TRUE(peer.send(header, {payload}).ok());
    }

    // The command of the next frame the guest sent (its payload is skipped), or
    // CommandId::hello (a failure) when none comes within a few seconds.
    CommandId next_command() {
        pollfd watch{peer.fd(), POLLIN, 0};
        if (::poll(&watch, 1, 5000) != 1) {
            ADD_FAILURE() << "the guest sent nothing";
            return CommandId::hello;
        }
        FrameHeader header;
        Status status = peer.receive_header(&header, 1 << 20);
        EXPECT_TRUE(status.ok()) << status.message();
        EXPECT_TRUE(peer.discard(header.payload_size).ok());
        return static_cast<CommandId>(header.command);
    }

    bool guest_bytes_waiting() {
        pollfd watch{peer.fd(), POLLIN, 0};
        return ::poll(&watch, 1, 0) > 0;
    }

    FramedStream peer;
    std::unique_ptr<RemoteSession> session;
};

TEST_F(ScriptedPeer, OneWayCommandsWaitAndLeaveWithTheNextCall) {
    const RemoteSession::Counters before = session->counters();
    ASSERT_TRUE(session->post<BufferClear>({7, 0}).ok());
    ASSERT_TRUE(session->post<BufferReset>({7}).ok());
    EXPECT_FALSE(guest_bytes_waiting()) << "one-way commands wait for a call";

    DeviceMemory::Reply memory{1, 2};
    answer(CommandId::device_memory, ByteView(&memory, sizeof(memory)));
    DeviceMemory::Reply reply{};
    ASSERT_TRUE(session->call<DeviceMemory>({0}).reply(&reply).run().ok());
    EXPECT_EQ(reply.memory_free, 1u);
    EXPECT_EQ(reply.memory_total, 2u);
    EXPECT_EQ(next_command(), CommandId::buffer_clear);
    EXPECT_EQ(next_command(), CommandId::buffer_reset);
    EXPECT_EQ(next_command(), CommandId::device_memory);
    const RemoteSession::Counters after = session->counters();
    EXPECT_EQ(after.commands, before.commands + 3);
    EXPECT_EQ(after.round_trips, before.round_trips + 1);
}

TEST_F(ScriptedPeer, PeerThatHangsUpMidCallFailsItAndEveryLaterCallAtOnce) {
    std::thread hang_up([this] {
        (void)next_command();  // the call arrived; no reply comes
        peer.close();
    });
    Status status = within(10, [this] { return session->call<DeviceMemory>({0}).run(); });
    hang_up.join();
    EXPECT_FALSE(status.ok());
    EXPECT_THAT(status.message(), ::testing::Not(HasSubstr("still waiting"))) << "the call hung";

    status = within(2, [this] { return session->call<DeviceMemory>({0}).run(); });
    EXPECT_EQ(status.code(), Code::disconnected) << status.message();
    EXPECT_THAT(status.message(), HasSubstr("no connection to scripted host"));
    EXPECT_EQ(session->post<BufferReset>({7}).code(), Code::disconnected);
    EXPECT_EQ(session->synchronize(1).code(), Code::disconnected);
}

TEST_F(ScriptedPeer, AReplyLongerThanItsRequestCanProduceLosesTheSessionUnread) {
    answer_claiming(CommandId::device_info, uint64_t(1) << 62, {});
    DeviceInfo::Reply info{};
    std::vector<uint8_t> strings;
    Status status = within(10, [&] { return session->call<DeviceInfo>({0}).reply(&info).reply_tail(&strings).run(); });
    EXPECT_EQ(status.code(), Code::limit_exceeded) << status.message();
    EXPECT_THAT(status.message(), HasSubstr("reply to device_info: message of 4611686018427387904 bytes"));
    EXPECT_TRUE(strings.empty()) << "nothing was allocated for it";
    EXPECT_EQ(session->call<DeviceMemory>({0}).run().code(), Code::disconnected) << "the session is lost";
}

TEST_F(ScriptedPeer, ABufferSmallerThanAskedIsAProtocolErrorAndNothingOfItReachesTheCaller) {
    BufferAlloc::Reply lie{7, 2048, 0};
    answer(CommandId::buffer_alloc, ByteView(&lie, sizeof(lie)));
    BufferAlloc::Reply reply{};
    Status status = session->call<BufferAlloc>({0, 4096}).reply(&reply).run();
    EXPECT_FALSE(status.ok());
    EXPECT_THAT(status.message(), HasSubstr("buffer_alloc gives a buffer of 2048 bytes for 4096 asked"));
    EXPECT_EQ(reply.buffer, 0u);
    EXPECT_EQ(reply.size, 0u);
}

TEST_F(ScriptedPeer, ARefusalIsReadAsOneLineWithACodeWeKnow) {
    const char reason[] = "no\nsuch \x1b[2Jdevice";
    answer_claiming(CommandId::device_memory, sizeof(reason) - 1, ByteView(reason, sizeof(reason) - 1), 99);
    Status status = session->call<DeviceMemory>({0}).run();
    EXPECT_EQ(status.code(), Code::error);
    EXPECT_EQ(status.message().find('\n'), std::string::npos) << status.message();
    EXPECT_EQ(status.message().find('\x1b'), std::string::npos) << status.message();
    answer_claiming(CommandId::device_memory, uint64_t(1) << 40, ByteView(reason, 2), 3);
    status = within(10, [&] { return session->call<DeviceMemory>({0}).run(); });
    EXPECT_THAT(status.message(), HasSubstr("message of 1099511627776 bytes exceeds the limit of 65536"));
    EXPECT_EQ(session->call<DeviceMemory>({0}).run().code(), Code::disconnected) << "the session is lost";
}

// A peer that may stay silent for only a moment.
class ImpatientScriptedPeer : public ScriptedPeer {
  protected:
    GuestOptions options() override {
        GuestOptions impatient;
        impatient.reply_timeout_ms = 300;
        return impatient;
    }
};

TEST_F(ImpatientScriptedPeer, AServerSilentPastTheReplyTimeoutLosesTheSession) {
    const auto started = std::chrono::steady_clock::now();
    Status status = within(10, [this] { return session->call<DeviceMemory>({0}).run(); });
    const auto waited = std::chrono::steady_clock::now() - started;
    EXPECT_EQ(status.code(), Code::disconnected) << status.message();
    EXPECT_THAT(status.message(), HasSubstr("the peer was silent for 300 ms"));
    EXPECT_GE(waited, std::chrono::milliseconds(250));
    EXPECT_LT(waited, std::chrono::seconds(5));
    EXPECT_EQ(session->call<DeviceMemory>({0}).run().code(), Code::disconnected);
}

// Issue 40, class 6: a server that keeps its sessions alive may stay silent for
// seconds, not minutes.
class ScriptedPeerThatKeepsAlive : public ScriptedPeer {
  protected:
    GuestOptions options() override {
        GuestOptions options;  // the reply timeout stays 10 minutes
        options.silence_timeout_ms = 300;
        return options;
    }
    uint64_t granted() override { return kSessionKeepAlive; }
};

TEST_F(ScriptedPeerThatKeepsAlive, AServerSilentPastTheSilenceLimitLosesTheSessionLongBeforeTheReplyTimeout) {
    const auto started = std::chrono::steady_clock::now();
    Status status = within(10, [this] { return session->call<DeviceMemory>({0}).run(); });
    const auto waited = std::chrono::steady_clock::now() - started;
    EXPECT_EQ(status.code(), Code::disconnected) << status.message();
    EXPECT_THAT(status.message(), HasSubstr("the peer was silent for 300 ms"));
    EXPECT_GE(waited, std::chrono::milliseconds(250));
    EXPECT_LT(waited, std::chrono::seconds(5));
}

TEST_F(ScriptedPeerThatKeepsAlive, KeepAlivesAreNeitherRepliesNorTraffic) {
    const RemoteSession::Counters before = session->counters();
    for (int i = 0; i < 3; ++i) keep_alive();
    DeviceMemory::Reply memory{5, 6};
    answer(CommandId::device_memory, ByteView(&memory, sizeof(memory)));
    DeviceMemory::Reply reply{};
    Status status = session->call<DeviceMemory>({0}).reply(&reply).run();
    ASSERT_TRUE(status.ok()) << status.message();
    EXPECT_EQ(reply.memory_free, 5u);
    EXPECT_EQ(reply.memory_total, 6u);
    const RemoteSession::Counters after = session->counters();
    EXPECT_EQ(after.round_trips, before.round_trips + 1);
    EXPECT_EQ(after.bytes_received, before.bytes_received + sizeof(FrameHeader) + sizeof(memory));
}

// An older server grants no keep-alives: its silence may last the reply timeout,
// and a keep-alive from it is a protocol error.
class ScriptedPeerThatDoesNotKeepAlive : public ScriptedPeerThatKeepsAlive {
  protected:
    uint64_t granted() override { return 0; }
};

TEST_F(ScriptedPeerThatDoesNotKeepAlive, KeepsTheReplyTimeoutAsItsSilenceLimit) {
    ASSERT_FALSE(session->keeps_alive());
    std::thread answer_late([this] {
        (void)next_command();
        std::this_thread::sleep_for(std::chrono::milliseconds(1000));  // past the 300 ms silence limit
        DeviceMemory::Reply memory{1, 2};
        answer(CommandId::device_memory, ByteView(&memory, sizeof(memory)));
    });
    Status status = within(30, [this] { return session->call<DeviceMemory>({0}).run(); });
    answer_late.join();
    EXPECT_TRUE(status.ok()) << status.message();
}

TEST_F(ScriptedPeerThatDoesNotKeepAlive, AKeepAliveItWasNotGrantedIsAProtocolError) {
    keep_alive();
    Status status = within(10, [this] { return session->call<DeviceMemory>({0}).run(); });
    EXPECT_FALSE(status.ok());
    EXPECT_THAT(status.message(), HasSubstr("expected the reply to device_memory"));
}

// The in-process host keeps the session alive through a compute three times as
// long as the guest's silence limit.
class KeptAliveRemoteGraph : public ServedRemoteGraph {
  protected:
    static constexpr int kSilenceMs = 2 * kKeepAliveIntervalMs + 500;
    GuestOptions options() override {
        GuestOptions options;
        options.silence_timeout_ms = kSilenceMs;
        return options;
    }
};

TEST_F(KeptAliveRemoteGraph, AComputeLongerThanTheSilenceLimitSucceeds) {
    ASSERT_TRUE(session->keeps_alive()) << "the host granted keep-alives: the silence limit holds";
    host_session->set_compute_check_for_testing(
        [](const ggml_cgraph *) { std::this_thread::sleep_for(std::chrono::milliseconds(3 * kSilenceMs)); });
    const auto started = std::chrono::steady_clock::now();
    Status status = session->compute_graph(compute, encoded, RemoteSession::Completion::waits);
    ASSERT_TRUE(status.ok()) << status.message();
    EXPECT_GE(std::chrono::steady_clock::now() - started, std::chrono::milliseconds(3 * kSilenceMs));
    host_session->set_compute_check_for_testing(nullptr);
    EXPECT_THAT(sum(), ElementsAre(11, 22, 33, 44, 55, 66, 77, 88));
}

TEST_F(ServedRemoteSession, DeviceAsksTheHostOncePerOpSignature) {
    std::shared_ptr<RemoteSession> shared = std::move(session);
    std::unique_ptr<RemoteDevice> device;
    Status status = RemoteDevice::create(shared, 0, "REMOTE0", nullptr, &device);
    ASSERT_TRUE(status.ok()) << status.message();
    GgmlContext ctx = metadata_context(8, 0);
    ggml_tensor *a = ggml_new_tensor_1d(ctx.get(), GGML_TYPE_F32, 16);
    ggml_tensor *sum = ggml_add(ctx.get(), a, a);

    const uint64_t before = shared->counters().round_trips;
    EXPECT_TRUE(device->supports_op(sum));
    EXPECT_TRUE(device->supports_op(sum));
    EXPECT_EQ(device->alloc_size(sum), ggml_nbytes(sum));
    EXPECT_EQ(device->alloc_size(sum), ggml_nbytes(sum));
    EXPECT_EQ(shared->counters().round_trips, before + 2) << "one ask each, then the cached answers";
}

TEST_F(ServedRemoteSession, TensorInARemoteBufferReadsBackAsWritten) {
    std::shared_ptr<RemoteSession> shared = std::move(session);
    std::unique_ptr<RemoteDevice> device;
    Status status = RemoteDevice::create(shared, 0, "REMOTE0", nullptr, &device);
    ASSERT_TRUE(status.ok()) << status.message();
    ASSERT_FALSE(device->shares_memory()) << "a socketpair session: data moves in messages";
    ggml_backend_buffer_t buffer = ggml_backend_buft_alloc_buffer(device->buffer_type(), 4096);
    ASSERT_NE(buffer, nullptr);
    GgmlContext ctx = metadata_context(8, 0);
    ggml_tensor *t = ggml_new_tensor_1d(ctx.get(), GGML_TYPE_F32, 4);
    auto *base = static_cast<uint8_t *>(ggml_backend_buffer_get_base(buffer));
    ASSERT_EQ(ggml_backend_tensor_alloc(buffer, t, base + 64), GGML_STATUS_SUCCESS);

    const std::vector<float> values = {1, 2, 3, 4};
    ggml_backend_tensor_set(t, values.data(), 0, sizeof(float) * values.size());
    std::vector<float> back(values.size(), -1.0f);
    ggml_backend_tensor_get(t, back.data(), 0, sizeof(float) * back.size());
    EXPECT_EQ(back, values);
    ggml_backend_buffer_free(buffer);
}

}  // namespace
}  // namespace ggml_remote::guest
