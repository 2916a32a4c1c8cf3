// memory_client: a hostile guest that tries to make a worker hold memory outside
// its limits. It handshakes, prints "handshaken", waits for a line on stdin (so the
// test can measure the worker first), runs one attack, prints what the server
// answered, and then keeps the session open until stdin closes (so the test can
// measure the worker again, or read `status`).
//
// usage: ggml-remote-memory-client ENDPOINT ATTACK
//   huge-frame SIZE     a frame header announcing SIZE payload bytes, and 100 of them
//   backends N          up to N BackendInit; prints how many were created and the refusal
//   sparse-file SIZE    (unix socket) a memory file of SIZE bytes, all holes, passed as
//                       a model (BufferFromFile of the whole file)
//   reply-2d SIZE       a buffer of 4 KiB, then a GetTensor2d whose reply is SIZE
//                       bytes: that buffer's bytes again and again (stride 0); the
//                       reply is never read, so the worker waits with it
//   set-tensor SIZE     a buffer of 4 KiB, then a SetTensor frame of SIZE bytes (its
//                       data for that buffer), all but the last byte sent: the
//                       worker waits for it
// prints: "handshaken", then "sent: ..." and "result: ..." lines.
// exits 0 when the attack ran (whatever the server answered), 1 when the session
// failed before it, 2 on a usage error.
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "protocol/commands.h"
#include "transport/connection.h"
#include "transport/endpoint.h"
#include "transport/socket.h"

using namespace ggml_remote;
using namespace ggml_remote::protocol;

namespace {

[[noreturn]] void usage(const std::string &why) {
    std::fprintf(stderr,
                 "memory_client: %s\n"
                 "usage: memory_client ENDPOINT huge-frame SIZE | backends N | sparse-file SIZE | reply-2d SIZE\n"
                 "       | set-tensor SIZE\n",
                 why.c_str());
    std::exit(2);
}

uint64_t parse_count(const std::string &text) {
    char *end = nullptr;
    const unsigned long long value = std::strtoull(text.c_str(), &end, 0);
    if (text.empty() || *end != '\0') usage("not a number: " + text);
    return value;
}

// One reply: its status code and payload (the reply struct, or the reason).
struct Reply {
    int32_t code = -1;
    std::vector<uint8_t> payload;
    std::string reason() const { return std::string(payload.begin(), payload.end()); }
};

class Guest {
  public:
    explicit Guest(FramedStream stream) : stream_(std::move(stream)) {}

    template <class Cmd>
    Status call(const typename Cmd::Request &request, Reply *reply, const int *fds = nullptr, size_t fd_count = 0) {
        FrameHeader header;
        header.command = static_cast<uint16_t>(Cmd::id);
        Status status = stream_.send(header, {ByteView(&request, sizeof(request))}, fds, fd_count);
        if (!status) return status;
        status = stream_.receive_header(&header, 1 << 20);
        if (!status) return status;
        reply->code = header.status;
        reply->payload.resize(header.payload_size);
        return stream_.receive(reply->payload.data(), reply->payload.size());
    }

    FramedStream &stream() { return stream_; }

  private:
    FramedStream stream_;
};

std::string describe(const Reply &reply) {
    if (reply.code == 0) return "ok";
    const char *name = reply.code == static_cast<int32_t>(Code::limit_exceeded) ? "limit_exceeded" : "other";
    return "code=" + std::string(name) + " (" + std::to_string(reply.code) + ") message=" + reply.reason();
}

int huge_frame(Guest &guest, uint64_t size) {
    FrameHeader header;
    header.command = static_cast<uint16_t>(CommandId::set_tensor);
    header.payload_size = size;
    const char start[100] = {};
    if (::send(guest.stream().fd(), &header, sizeof(header), MSG_NOSIGNAL) != sizeof(header) ||
        ::send(guest.stream().fd(), start, sizeof(start), MSG_NOSIGNAL) != sizeof(start)) {
        std::printf("result: send: %s\n", std::strerror(errno));
        return 1;
    }
    std::printf("sent: a frame header for %llu bytes and 100 of them\n", static_cast<unsigned long long>(size));
    return 0;
}

int backends(Guest &guest, uint64_t wanted) {
    uint64_t created = 0;
    Reply reply;
    for (; created < wanted; ++created) {
        Status status = guest.call<BackendInit>(BackendInit::Request{0}, &reply);
        if (!status) {
            std::printf("result: %llu backends created, then %s\n", static_cast<unsigned long long>(created),
                        status.message().c_str());
            return 1;
        }
        if (reply.code != 0) break;
    }
    std::printf("sent: %llu BackendInit\n", static_cast<unsigned long long>(created + (created < wanted ? 1 : 0)));
    std::printf("result: %llu backends created%s%s\n", static_cast<unsigned long long>(created),
                created < wanted ? ", then " : "", created < wanted ? describe(reply).c_str() : "");
    return 0;
}

int sparse_file(Guest &guest, uint64_t size) {
    const int file = ::memfd_create("sparse-model.gguf", MFD_CLOEXEC);
    if (file < 0 || ::ftruncate(file, static_cast<off_t>(size)) != 0) {
        std::printf("result: memfd: %s\n", std::strerror(errno));
        return 1;
    }
    BufferFromFile::Request request{};
    request.device = 0;
    request.file_offset = 0;
    request.size = size;
    request.max_tensor_size = size;
    Reply reply;
    Status status = guest.call<BufferFromFile>(request, &reply, &file, 1);
    ::close(file);
    std::printf("sent: a memory file of %llu bytes, all holes, as a model\n", static_cast<unsigned long long>(size));
    if (!status) {
        std::printf("result: %s\n", status.message().c_str());
        return 1;
    }
    std::printf("result: %s\n", describe(reply).c_str());
    return 0;
}

// A buffer of `size` bytes on device 0; false (and a result line) when refused.
bool small_buffer(Guest &guest, uint64_t size, uint64_t *handle) {
    Reply reply;
    Status status = guest.call<BufferAlloc>(BufferAlloc::Request{0, size}, &reply);
    BufferAlloc::Reply buffer{};
    if (!status || reply.code != 0 || !read_pod(ByteView(reply.payload), 0, &buffer)) {
        std::printf("result: BufferAlloc: %s\n", status ? describe(reply).c_str() : status.message().c_str());
        return false;
    }
    *handle = buffer.buffer;
    return true;
}

int reply_2d(Guest &guest, uint64_t size) {
    constexpr uint64_t kRow = 4096;
    uint64_t buffer = 0;
    if (!small_buffer(guest, kRow, &buffer)) return 1;
    GetTensor2d::Request request{};
    request.range = {buffer, 0, kRow};
    request.n_copies = size / kRow;
    request.stride = 0;
    FrameHeader header;
    header.command = static_cast<uint16_t>(GetTensor2d::id);
    const Status status = guest.stream().send(header, {ByteView(&request, sizeof(request))});
    if (!status) {
        std::printf("result: send: %s\n", status.message().c_str());
        return 1;
    }
    std::printf("sent: a GetTensor2d of %llu copies of one 4 KiB row, reply left unread\n",
                static_cast<unsigned long long>(request.n_copies));
    return 0;
}

int set_tensor(Guest &guest, uint64_t size) {
    uint64_t buffer = 0;
    if (!small_buffer(guest, 4096, &buffer)) return 1;
    SetTensor::Request request{};
    request.range = {buffer, 0, 4096};
    FrameHeader header;
    header.command = static_cast<uint16_t>(SetTensor::id);
    header.payload_size = size;  // (at most --max-message-size)
    const uint64_t data = size - sizeof(request);
    const int fd = guest.stream().fd();
    const std::vector<uint8_t> zeros(1 << 20);
    bool sent = ::send(fd, &header, sizeof(header), MSG_NOSIGNAL) == sizeof(header) &&
                ::send(fd, &request, sizeof(request), MSG_NOSIGNAL) == sizeof(request);
    for (uint64_t left = data - 1; sent && left > 0;) {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(left, zeros.size()));
        const ssize_t done = ::send(fd, zeros.data(), n, MSG_NOSIGNAL);
        sent = done > 0;
        if (sent) left -= static_cast<uint64_t>(done);
    }
    if (!sent) {
        std::printf("result: send: %s\n", std::strerror(errno));
        return 1;
    }
    std::printf("sent: a SetTensor frame of %llu bytes for a 4 KiB buffer, all but its last byte\n",
                static_cast<unsigned long long>(size));
    return 0;
}

}  // namespace

int main(int argc, char **argv) {
    if (argc != 4) usage("expected ENDPOINT ATTACK VALUE");
    const std::string attack = argv[2];
    const uint64_t value = parse_count(argv[3]);
    if (attack != "huge-frame" && attack != "backends" && attack != "sparse-file" && attack != "reply-2d" &&
        attack != "set-tensor") {
        usage("unknown attack " + attack);
    }

    Endpoint endpoint;
    Status status = parse_endpoint(argv[1], &endpoint);
    if (!status) usage(status.message());
    UniqueFd fd;
    status = connect_endpoint(endpoint, 5000, &fd);
    if (!status) {
        std::printf("result: connect: %s\n", status.message().c_str());
        return 1;
    }
    Guest guest(FramedStream(std::move(fd), endpoint.to_string()));
    Hello::Request hello{};
    hello.capabilities = attack == "sparse-file" ? uint64_t(kSessionSharedMemory) : 0;
    Reply reply;
    status = guest.call<Hello>(hello, &reply);
    if (!status || reply.code != 0) {
        std::printf("result: handshake: %s\n", status ? describe(reply).c_str() : status.message().c_str());
        return 1;
    }
    std::printf("handshaken\n");
    std::fflush(stdout);
    std::string line;
    std::getline(std::cin, line);

    int rc = 0;
    if (attack == "huge-frame") rc = huge_frame(guest, value);
    if (attack == "backends") rc = backends(guest, value);
    if (attack == "sparse-file") rc = sparse_file(guest, value);
    if (attack == "reply-2d") rc = reply_2d(guest, value);
    if (attack == "set-tensor") rc = set_tensor(guest, value);
    std::fflush(stdout);
    while (std::getline(std::cin, line)) {
    }
    return rc;
}
