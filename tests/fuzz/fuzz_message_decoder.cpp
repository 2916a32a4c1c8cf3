// Fuzz target: the message decoder. The input is what a guest writes on its
// socket: frames (FrameHeader + payload) back to back. They are read as the
// server's session reads them (FramedStream over a real socket, with its message
// size limit), then each request is decoded as the dispatcher decodes it: the
// command's fixed Request struct, and the tensor list of the commands that carry one.
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <thread>
#include <tuple>
#include <vector>

#include "fuzz_support.h"
#include "protocol/commands.h"
#include "protocol/tensor_codec.h"
#include "transport/connection.h"

namespace ggml_remote::fuzz {
namespace {

using namespace protocol;

// Large enough for the recorded graphs, small enough to keep every input fast.
constexpr uint64_t kMaxPayload = 1 << 20;

// Whether the command's tail is a tensor list (graph_compute: unless replayed).
template <class Cmd>
bool tail_is_tensor_list(const typename Cmd::Request &) {
    return Cmd::id == CommandId::supports_op || Cmd::id == CommandId::alloc_size || Cmd::id == CommandId::init_tensor;
}
template <>
bool tail_is_tensor_list<GraphCompute>(const GraphCompute::Request &request) {
    return request.mode != kGraphReplay;
}

template <class Cmd>
void decode_as(uint16_t command, ByteView payload) {
    if (command != static_cast<uint16_t>(Cmd::id)) return;
    typename Cmd::Request request;
    if (!read_pod(payload, 0, &request)) return;
    if (!takes_tail(Cmd::id) && payload.size != sizeof(request)) return;
    const ByteView tail = payload.subview(sizeof(request));
    if (tail_is_tensor_list<Cmd>(request)) {
        TensorList list;
        if (decode_tensor_list(tail, TensorListLimits{}, &list).ok()) {
            uint64_t span = 0;
            for (const WireTensor &tensor : list.tensors) (void)tensor_byte_span(tensor, &span);
        }
    }
}

template <class... Cmd>
void decode_request(uint16_t command, ByteView payload, std::tuple<Cmd...> *) {
    (decode_as<Cmd>(command, payload), ...);
    (void)command_name(static_cast<CommandId>(command));
}

}  // namespace
}  // namespace ggml_remote::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    using namespace ggml_remote;
    using namespace ggml_remote::protocol;
    if (size > 2 * fuzz::kMaxPayload) return 0;
    int fds[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) return 0;
    UniqueFd guest(fds[0]);
    FramedStream stream(UniqueFd(fds[1]), "fuzz");
    // The guest's side writes everything and hangs up; the server's side reads
    // until the stream ends or breaks, as Session::serve does.
    std::thread writer([&guest, data, size] {
        size_t done = 0;
        while (done < size) {
            const ssize_t n = ::send(guest.get(), data + done, size - done, MSG_NOSIGNAL);
            if (n <= 0) break;
            done += static_cast<size_t>(n);
        }
        ::shutdown(guest.get(), SHUT_WR);
    });
    std::vector<uint8_t> payload;
    for (;;) {
        FrameHeader header;
        if (!stream.receive_header(&header, fuzz::kMaxPayload).ok()) break;
        payload.resize(header.payload_size);
        if (!stream.receive(payload.data(), payload.size()).ok()) break;
        fuzz::decode_request(header.command, ByteView(payload), static_cast<AllCommands *>(nullptr));
    }
    stream.close();  // a writer still blocked on a full socket gets EPIPE
    writer.join();
    return 0;
}
