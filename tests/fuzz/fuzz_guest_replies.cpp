// Fuzz target: the guest's reading of a server's replies. The input is every byte
// a server sends a guest on one connection, its handshake reply first: frames
// (FrameHeader + payload) back to back. The guest (RemoteSession over a real
// socket, RemoteDevice, the buffer type) runs one fixed script of calls, each
// command with a reply at least once, and reads whatever comes through the
// commands' ReplyRules (protocol/reply_rules.h) and the decoders behind them:
// DeviceInfo's strings, an AllocSize against its tensor, a BufferAlloc,
// a node order, deferred replies. A lying server must cost the guest an error,
// never a crash, an exception, an allocation it did not ask for, or a hang.
#include <ggml-backend.h>
#include <ggml.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "guest/device.h"
#include "guest/node_order.h"
#include "guest/session/remote_session.h"
#include "protocol/commands.h"
#include "transport/connection.h"

namespace ggml_remote::fuzz {
namespace {

using namespace protocol;
using guest::RemoteDevice;
using guest::RemoteSession;

// GGML_REMOTE_FUZZ_VERBOSE=1: each call's outcome on stderr (to see what an input reaches).
void note(const char *what, const Status &status) {
    static const bool verbose = std::getenv("GGML_REMOTE_FUZZ_VERBOSE") != nullptr;
    if (verbose) std::fprintf(stderr, "  %s: %s\n", what, status.ok() ? "ok" : status.message().c_str());
}

// Writes the input as the server, then ends its side; reads and drops what the guest sends.
struct FakeServer {
    std::thread writer, reader;

    FakeServer(int fd, const uint8_t *data, size_t size) {
        writer = std::thread([fd, data, size] {
            for (size_t done = 0; done < size;) {
                const ssize_t sent = ::send(fd, data + done, size - done, MSG_NOSIGNAL);
                if (sent <= 0) break;
                done += static_cast<size_t>(sent);
            }
            ::shutdown(fd, SHUT_WR);
        });
        reader = std::thread([fd] {
            uint8_t scratch[64 * 1024];
            while (::recv(fd, scratch, sizeof(scratch), 0) > 0) {
            }
        });
    }
    void join() {
        writer.join();
        reader.join();
    }
};

// The calls of the guest's device: DeviceInfo, AllocSize, BufferAlloc (ggml's buffer type).
void device_calls(const std::shared_ptr<RemoteSession> &session) {
    static ggml_backend_reg reg{};
    std::unique_ptr<RemoteDevice> device;
    Status status = RemoteDevice::create(session, 0, "REMOTE0", &reg, &device);
    note("device_info", status);
    if (!status) return;
    ggml_init_params params{4 * ggml_tensor_overhead(), nullptr, true};
    ggml_context *context = ggml_init(params);
    ggml_tensor *tensor = ggml_new_tensor_1d(context, GGML_TYPE_F32, 64);
    (void)device->alloc_size(tensor);
    (void)device->supports_op(tensor);
    ggml_backend_buffer_t buffer = ggml_backend_buft_alloc_buffer(device->buffer_type(), 4096);
    note("buffer_alloc", buffer != nullptr ? Status::success() : error(Code::error, "no buffer"));
    if (buffer != nullptr) ggml_backend_buffer_free(buffer);
    ggml_free(context);
}

// Every other command with a reply, through the generic call.
void session_calls(RemoteSession &session) {
    note("DeviceMemory", session.call<DeviceMemory>({0}).run());
    note("BufferFromFile", session.call<BufferFromFile>({0, 0, 4096, 4096}).run());
    note("BufferAdopt", session.call<BufferAdopt>({0, 4096}).run());
    std::vector<uint8_t> bytes(64);
    note("GetTensor", session.call<GetTensor>({{1, 0, 64}}).reply_tail_into(bytes.data(), bytes.size()).run());
    note("GetTensor2d", session.call<GetTensor2d>({{1, 0, 16}, 3, 32}).reply_tail_into(bytes.data(), 48).run());
    CopyTensor::Reply copied{};
    note("CopyTensor", session.call<CopyTensor>({{1, 0, 16}, {1, 16, 16}}).reply(&copied).run());
    // Deferred replies, read by the next synchronize.
    note("CopyTensor", session.call<CopyTensor>({{1, 0, 16}, {1, 16, 16}}).run_later("copy"));
    note("GetTensor", session.call<GetTensor>({{1, 0, 32}}).reply_tail_into(bytes.data(), 32).run_later("read"));
    note("synchronize", session.synchronize(1));
    BackendInit::Reply backend{};
    note("BackendInit", session.call<BackendInit>({0}).reply(&backend).run());
    const uint8_t graph[40] = {};
    GraphOptimize::Reply order{};
    std::vector<uint8_t> tail;
    Status status =
        session.call<GraphOptimize>({1}).tail(ByteView(graph, sizeof(graph))).reply(&order).reply_tail(&tail).run();
    if (status) {
        guest::NodeOrder parsed;
        status = guest::parse_node_order(order, ByteView(tail), 3, 5, &parsed);
    }
    note("GraphOptimize", status);
    note("Synchronize", session.call<Synchronize>({1}).run());
    note("post", session.post<BufferClear>({1, 0}));
    ServerStatus::Reply server{};
    note("ServerStatus", session.call<ServerStatus>({0}).reply(&server).reply_tail(&tail).run());
    WeightLookup::Request lookup{};
    note("WeightLookup", session.call<WeightLookup>(lookup).run());
}

}  // namespace
}  // namespace ggml_remote::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    using namespace ggml_remote;
    static std::once_flag quiet;
    std::call_once(quiet, [] { ggml_log_set([](ggml_log_level, const char *, void *) {}, nullptr); });
    int fds[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) return 0;
    fuzz::FakeServer server(fds[1], data, size);
    {
        guest::GuestOptions options;
        options.reply_timeout_ms = 5000;  // the server's side ends with the input: never reached
        options.store_min_bytes = 0;
        std::unique_ptr<guest::RemoteSession> opened;
        if (guest::RemoteSession::start(FramedStream(UniqueFd(fds[0]), "fuzz"), "fuzz server", options, &opened).ok()) {
            std::shared_ptr<guest::RemoteSession> session(std::move(opened));
            fuzz::device_calls(session);
            fuzz::session_calls(*session);
        }
    }  // the guest's socket closes here: the reader ends
    server.join();
    ::close(fds[1]);
    return 0;
}
