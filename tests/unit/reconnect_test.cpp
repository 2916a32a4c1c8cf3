// The guest's reconnection (guest/session/remote_session.h, guest/buffer_restore.cpp):
// a RemoteSession whose host Sessions run on threads, one per connection, so a
// test can end a connection as a dying worker would and see what comes back.
#include <fcntl.h>
#include <ggml-backend.h>
#include <ggml.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "ggml_test_support.h"
#include "guest/backend.h"
#include "guest/buffer.h"
#include "guest/session/remote_session.h"
#include "host/worker/session/session.h"
#include "protocol/commands.h"

namespace ggml_remote::guest {
namespace {

using namespace protocol;
using test_support::GgmlContext;
using test_support::host_cpu_device;
using test_support::metadata_context;
using ::testing::HasSubstr;

// One host Session per connection, each served on its own thread.
class HostPerConnection {
  public:
    ~HostPerConnection() {
        for (auto &served : hosts_) served->stream.close();
        for (auto &served : hosts_) served->thread.join();
    }
    // A new connection to a new host session: `guest` is the guest's end.
    Status connect(FramedStream *guest) {
        int fds[2] = {-1, -1};
        if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) return error(Code::error, "socketpair");
        auto served = std::make_unique<Served>();
        served->session = std::make_unique<host::Session>(std::vector{host_cpu_device()}, host::SessionLimits{});
        served->stream = FramedStream(UniqueFd(fds[1]), "guest");
        Served *raw = served.get();
        served->thread = std::thread([raw] { (void)raw->session->serve(raw->stream); });
        hosts_.push_back(std::move(served));
        *guest = FramedStream(UniqueFd(fds[0]), "host");
        return Status::success();
    }
    // Ends the newest connection from the host's side, as a killed worker's does.
    void kill_newest() { ::shutdown(hosts_.back()->stream.fd(), SHUT_RDWR); }
    size_t connections() const { return hosts_.size(); }

  private:
    struct Served {
        std::unique_ptr<host::Session> session;
        FramedStream stream;
        std::thread thread;
    };
    std::vector<std::unique_ptr<Served>> hosts_;
};

class Reconnect : public ::testing::Test {
  protected:
    void SetUp() override {
        ASSERT_NE(host_cpu_device(), nullptr) << "ggml has no CPU device";
        options.connect_timeout_ms = 600;
        options.reconnect_max_delay_ms = 200;
        FramedStream first;
        ASSERT_TRUE(hosts.connect(&first).ok());
        std::unique_ptr<RemoteSession> opened;
        Status status = RemoteSession::start(std::move(first), "test host", options, &opened);
        ASSERT_TRUE(status.ok()) << status.message();
        session = std::move(opened);
        session->set_connector([this](FramedStream *stream, int) {
            if (server_gone) return error(Code::disconnected, "connect: Connection refused");
            return hosts.connect(stream);
        });
    }
    void TearDown() override {
        device.reset();
        session.reset();
    }

    void make_device() {
        Status status = RemoteDevice::create(session, 0, "REMOTE0", nullptr, &device);
        ASSERT_TRUE(status.ok()) << status.message();
    }
    // Kills the connection and makes the next call notice (it fails: it may name old handles).
    void lose_connection() {
        hosts.kill_newest();
        EXPECT_EQ(session->call<DeviceMemory>({0}).run().code(), Code::disconnected);
    }

    GuestOptions options;
    HostPerConnection hosts;
    bool server_gone = false;
    std::shared_ptr<RemoteSession> session;
    std::unique_ptr<RemoteDevice> device;
};

// Counts its restores, and makes a call of its own while restoring.
struct CountingRestorable : Restorable {
    int restores = 0;
    Status call_status = error(Code::error, "not restored");
    void restore(SessionCalls &calls, RestoreReport *report) override {
        ++restores;
        call_status = calls.call<DeviceMemory>({0}).run();
        ++report->restored;
    }
};

TEST_F(Reconnect, LostConnectionIsMadeAgainAndItsObjectsRestoredWithCallsOfTheirOwn) {
    CountingRestorable object;
    session->add_restorable(&object);
    lose_connection();
    EXPECT_EQ(hosts.connections(), 2u);
    EXPECT_EQ(session->reconnections(), 1u);
    EXPECT_TRUE(session->last_restore_intact());
    EXPECT_EQ(object.restores, 1);
    EXPECT_TRUE(object.call_status.ok()) << object.call_status.message();
    EXPECT_TRUE(session->call<DeviceMemory>({0}).run().ok()) << "later calls go to the new connection";
    session->remove_restorable(&object);
}

// Restores slowly, with a call of its own, and says when it starts and ends.
struct SlowRestorable : Restorable {
    std::promise<void> started;
    std::atomic<bool> done{false};
    void restore(SessionCalls &calls, RestoreReport *report) override {
        started.set_value();
        (void)calls.call<DeviceMemory>({0}).run();
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        done = true;
        ++report->restored;
    }
};

TEST_F(Reconnect, AnotherThreadsCallWaitsUntilTheRestoreIsDone) {
    SlowRestorable object;
    session->add_restorable(&object);
    std::future<void> started = object.started.get_future();
    std::thread losing([this] { lose_connection(); });
    started.wait();
    const Status status = session->call<DeviceMemory>({0}).run();
    EXPECT_TRUE(object.done) << "a call came in mid-restore";
    EXPECT_TRUE(status.ok()) << status.message();
    losing.join();
    session->remove_restorable(&object);
}

TEST_F(Reconnect, ServerThatNeverComesBackFailsCallsWithinTheConnectTimeout) {
    server_gone = true;
    const auto start = std::chrono::steady_clock::now();
    lose_connection();
    const auto first = std::chrono::steady_clock::now() - start;
    EXPECT_LT(first, std::chrono::milliseconds(options.connect_timeout_ms + 500)) << "the series is bounded";
    EXPECT_GT(first, std::chrono::milliseconds(options.connect_timeout_ms / 2)) << "it kept trying with back-off";
    const auto again = std::chrono::steady_clock::now();
    EXPECT_EQ(session->call<DeviceMemory>({0}).run().code(), Code::disconnected);
    EXPECT_LT(std::chrono::steady_clock::now() - again, std::chrono::milliseconds(100))
        << "right after a failed series, calls fail at once";
    EXPECT_EQ(session->reconnections(), 0u);

    server_gone = false;  // it comes back: a later series finds it
    std::this_thread::sleep_for(std::chrono::milliseconds(options.reconnect_max_delay_ms + 50));
    EXPECT_EQ(session->call<DeviceMemory>({0}).run().code(), Code::disconnected);
    EXPECT_EQ(session->reconnections(), 1u);
    EXPECT_TRUE(session->call<DeviceMemory>({0}).run().ok());
}

// A buffer in a metadata context, one F32 tensor of `count` values at its base.
ggml_tensor *tensor_at_base(ggml_context *ctx, ggml_backend_buffer_t buffer, int count) {
    ggml_tensor *t = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, count);
    ggml_set_name(t, "kv_like");
    EXPECT_EQ(ggml_backend_tensor_alloc(buffer, t, ggml_backend_buffer_get_base(buffer)), GGML_STATUS_SUCCESS);
    return t;
}

// A graph of one node reading a 16-float tensor at the base of `buffer`.
struct GraphReading {
    GraphReading(ggml_context *ctx, ggml_backend_buffer_t buffer) {
        tensor = tensor_at_base(ctx, buffer, 16);
        graph = ggml_new_graph(ctx);
        ggml_build_forward_expand(graph, ggml_add(ctx, tensor, tensor));
    }
    ggml_tensor *tensor;
    ggml_cgraph *graph;
};

TEST_F(Reconnect, BufferOnlyTheHostHeldIsLostAndTheNextComputeReadingItFailsNamingIt) {
    make_device();
    ggml_backend_buffer_t buffer = ggml_backend_buft_alloc_buffer(device->buffer_type(), 4096);
    ASSERT_NE(buffer, nullptr);
    GgmlContext ctx = metadata_context(8, 1);
    GraphReading kv(ctx.get(), buffer);
    const std::vector<float> values(16, 3.0f);
    ggml_backend_tensor_set(kv.tensor, values.data(), 0, sizeof(float) * values.size());

    lose_connection();
    EXPECT_TRUE(remote_buffer_of(buffer)->lost);
    EXPECT_FALSE(session->last_restore_intact());
    EXPECT_EQ(lost_buffer_count(), 1u);
    ggml_backend_tensor_set(kv.tensor, values.data(), 0, sizeof(float) * 4);  // a part: still lost
    Status status = report_lost_buffers_read(kv.graph);
    EXPECT_FALSE(status.ok());
    EXPECT_THAT(status.message(), HasSubstr("'kv_like'"));
    EXPECT_THAT(status.message(), HasSubstr("bytes (data)"));
    EXPECT_THAT(status.message(), HasSubstr("lost with the connection to test host"));
    EXPECT_TRUE(report_lost_buffers_read(kv.graph).ok()) << "told once, by the compute that failed";
    EXPECT_EQ(lost_buffer_count(), 0u);
    std::vector<float> back(16, -1.0f);
    ggml_backend_tensor_get(kv.tensor, back.data(), 0, sizeof(float) * back.size());
    EXPECT_EQ(std::vector<float>(back.begin() + 4, back.end()), std::vector<float>(12, 0.0f)) << "zeros, not garbage";
    ggml_backend_buffer_free(buffer);
}

TEST_F(Reconnect, LostBufferWrittenWhollyBeforeAnyComputeIsGoodAgain) {
    make_device();
    ggml_backend_buffer_t buffer = ggml_backend_buft_alloc_buffer(device->buffer_type(), 4096);
    ASSERT_NE(buffer, nullptr);
    GgmlContext ctx = metadata_context(8, 1);
    GraphReading kv(ctx.get(), buffer);
    ggml_backend_buffer_clear(buffer, 1);
    ggml_backend_tensor_set(kv.tensor, std::vector<float>(16, 3.0f).data(), 0, 16 * sizeof(float));
    lose_connection();
    ASSERT_TRUE(remote_buffer_of(buffer)->lost);
    ggml_backend_buffer_clear(buffer, 0);
    EXPECT_TRUE(report_lost_buffers_read(kv.graph).ok());
    EXPECT_EQ(lost_buffer_count(), 0u);
    ggml_backend_buffer_free(buffer);
}

TEST_F(Reconnect, ClearedBufferIsClearedAgainAndNothingIsLost) {
    make_device();
    ggml_backend_buffer_t buffer = ggml_backend_buft_alloc_buffer(device->buffer_type(), 4096);
    ASSERT_NE(buffer, nullptr);
    GgmlContext ctx = metadata_context(8, 0);
    ggml_tensor *t = tensor_at_base(ctx.get(), buffer, 4);
    ggml_backend_buffer_clear(buffer, 0);
    lose_connection();
    EXPECT_FALSE(remote_buffer_of(buffer)->lost);
    std::vector<float> back(4, -1.0f);
    ggml_backend_tensor_get(t, back.data(), 0, sizeof(float) * back.size());
    EXPECT_EQ(back, std::vector<float>(4, 0.0f));
    ggml_backend_buffer_free(buffer);
}

// A model file's bytes, mapped read-only as llama.cpp maps one.
struct MappedModelFile {
    explicit MappedModelFile(const std::vector<float> &values) {
        char name[] = "/tmp/reconnect-weights-XXXXXX";
        const int fd = ::mkstemp(name);
        path = name;
        size = values.size() * sizeof(float);
        EXPECT_EQ(::write(fd, values.data(), size), static_cast<ssize_t>(size));
        data = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
        ::close(fd);
    }
    ~MappedModelFile() {
        ::munmap(data, size);
        ::unlink(path.c_str());
    }
    std::string path;
    size_t size = 0;
    void *data = nullptr;
};

TEST_F(Reconnect, WeightsWrittenFromAMappedFileAreReadFromItAgain) {
    make_device();
    ggml_backend_buffer_t buffer = ggml_backend_buft_alloc_buffer(device->buffer_type(), 4096);
    ASSERT_NE(buffer, nullptr);
    ggml_backend_buffer_set_usage(buffer, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
    GgmlContext ctx = metadata_context(8, 0);
    ggml_tensor *weight = tensor_at_base(ctx.get(), buffer, 16);
    std::vector<float> values(16);
    for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) + 0.5f;
    MappedModelFile model(values);
    ASSERT_NE(model.data, MAP_FAILED);
    ggml_backend_tensor_set(weight, model.data, 0, model.size);

    lose_connection();
    EXPECT_FALSE(remote_buffer_of(buffer)->lost);
    EXPECT_TRUE(session->last_restore_intact());
    std::vector<float> back(values.size(), -1.0f);
    ggml_backend_tensor_get(weight, back.data(), 0, sizeof(float) * back.size());
    EXPECT_EQ(back, values) << "read from the model file again";
    ggml_backend_buffer_free(buffer);
}

TEST_F(Reconnect, WeightsWrittenFromPlainMemoryAreLost) {
    make_device();
    ggml_backend_buffer_t buffer = ggml_backend_buft_alloc_buffer(device->buffer_type(), 4096);
    ASSERT_NE(buffer, nullptr);
    ggml_backend_buffer_set_usage(buffer, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
    GgmlContext ctx = metadata_context(8, 0);
    ggml_tensor *weight = tensor_at_base(ctx.get(), buffer, 16);
    const std::vector<float> values(16, 1.0f);
    ggml_backend_tensor_set(weight, values.data(), 0, sizeof(float) * values.size());
    lose_connection();
    EXPECT_TRUE(remote_buffer_of(buffer)->lost) << "no source to read them from";
    ggml_backend_buffer_free(buffer);
    EXPECT_EQ(lost_buffer_count(), 0u) << "a freed buffer is no longer counted";
}

}  // namespace
}  // namespace ggml_remote::guest
