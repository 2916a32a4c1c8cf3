// handshake_client: opens one connection to a ggml-remote-server and sends a
// handshake that is wrong on purpose (a protocol version the server does not
// speak, a foreign magic, a command before the handshake, or bytes that are not
// a frame at all), then prints what the server answered and whether it closed
// the connection. The integration tests assert on that output.
//
// usage: ggml-remote-handshake-client ENDPOINT [--protocol-version N|next] [--magic N]
//                                     [--command ID] [--raw TEXT] [--hold SECONDS]
//                                     [--then idle|half-frame] [--reply-timeout SECONDS]
//                                     [--from ADDRESS]
//                                     [--psk FILE]
// prints:
//   sent: ...
//   reply: code=NAME status=N            (or "reply: none (...)")
//   message: TEXT                        (when the reply is an error)
//   accepted: protocol_version=N device_count=N   (when it is not)
//   connection: closed|open              (after an error reply: within 5 s)
// --hold keeps an accepted session open that long (to fill a server's session slots).
// --then, after an accepted handshake, sends nothing more (idle) or the header and
// the first bytes of a frame (half-frame), and waits up to 30 s for the server to
// hang up; prints "then: closed by the server after N ms" or "then: still open".
// --reply-timeout: how long to wait for the server's reply (default 10 s).
// --from connects to a tcp:// endpoint from this local IPv4 address, so that one
// machine can play several peers (127.0.0.2 is another address of loopback).
// --psk: TLS with the first key of FILE on a tcp:// ENDPOINT before the handshake
// (prints "tls: ..." or "reply: none (TLS ...)").
// exits 0 when the server replied, 1 when it did not, 2 on a usage error.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "protocol/commands.h"
#include "transport/connection.h"
#include "transport/endpoint.h"
#include "transport/socket.h"
#include "transport/tls_key.h"
#include "transport/tls_session.h"

using namespace ggml_remote;
using namespace ggml_remote::protocol;

namespace {

const char *code_name(int32_t code) {
    switch (static_cast<Code>(code)) {
        case Code::ok:
            return "ok";
        case Code::error:
            return "error";
        case Code::version_mismatch:
            return "version_mismatch";
        case Code::bad_request:
            return "bad_request";
        case Code::not_found:
            return "not_found";
        case Code::out_of_memory:
            return "out_of_memory";
        case Code::unsupported:
            return "unsupported";
        case Code::limit_exceeded:
            return "limit_exceeded";
        case Code::disconnected:
            return "disconnected";
    }
    return "unknown";
}

[[noreturn]] void usage(const std::string &why) {
    std::fprintf(stderr,
                 "handshake_client: %s\n"
                 "usage: handshake_client ENDPOINT [--protocol-version N|next] [--magic N] [--command ID] "
                 "[--raw TEXT] [--hold SECONDS] [--then idle|half-frame] [--reply-timeout SECONDS] "
                 "[--from ADDRESS] [--psk FILE]\n",
                 why.c_str());
    std::exit(2);
}

uint32_t parse_number(const std::string &flag, const std::string &text) {
    char *end = nullptr;
    const unsigned long value = std::strtoul(text.c_str(), &end, 0);
    if (text.empty() || *end != '\0' || value > 0xffffffffu) usage(flag + ": not a number: " + text);
    return static_cast<uint32_t>(value);
}

// --from: a TCP connection to `endpoint` from the local IPv4 address `source`.
Status connect_from(const std::string &source, const Endpoint &endpoint, UniqueFd *fd) {
    sockaddr_in local{}, remote{};
    local.sin_family = remote.sin_family = AF_INET;
    remote.sin_port = htons(static_cast<uint16_t>(endpoint.port));
    if (endpoint.kind != Endpoint::Kind::tcp || ::inet_pton(AF_INET, source.c_str(), &local.sin_addr) != 1 ||
        ::inet_pton(AF_INET, endpoint.host.c_str(), &remote.sin_addr) != 1) {
        return error(Code::error, "--from needs a tcp:// endpoint and IPv4 addresses");
    }
    UniqueFd connected(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!connected.valid() || ::bind(connected.get(), reinterpret_cast<sockaddr *>(&local), sizeof(local)) != 0 ||
        ::connect(connected.get(), reinterpret_cast<sockaddr *>(&remote), sizeof(remote)) != 0) {
        return error(Code::error, "connect from " + source + ": " + std::strerror(errno));
    }
    *fd = std::move(connected);
    return Status::success();
}

// Whether the server hung up within a few seconds of its reply (it should,
// after a refused handshake).
const char *connection_state(int fd) {
    timeval timeout{5, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    char byte;
    for (;;) {
        const ssize_t got = ::recv(fd, &byte, 1, 0);
        if (got == 0) return "closed";
        if (got < 0 && errno == EINTR) continue;
        if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return "open";
        if (got < 0) return "closed";  // reset by peer
        return "open (and sent more bytes)";
    }
}

// --then: stalls the session, and reports when (if) the server hangs up.
int wait_for_hang_up(FramedStream &stream, bool half_frame) {
    if (half_frame) {
        FrameHeader header;
        header.command = static_cast<uint16_t>(CommandId::hello);
        header.payload_size = 4096;
        const char start[100] = {};
        if (::send(stream.fd(), &header, sizeof(header), MSG_NOSIGNAL) != sizeof(header) ||
            ::send(stream.fd(), start, sizeof(start), MSG_NOSIGNAL) != sizeof(start)) {
            std::printf("then: send: %s\n", std::strerror(errno));
            return 1;
        }
        std::printf("then: sent a frame header for 4096 bytes and 100 of them\n");
    }
    std::fflush(stdout);
    timeval timeout{30, 0};
    ::setsockopt(stream.fd(), SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    const auto started = std::chrono::steady_clock::now();
    char byte;
    ssize_t got;
    do {
        got = ::recv(stream.fd(), &byte, 1, 0);
    } while (got < 0 && errno == EINTR);
    const long long waited =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started).count();
    if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        std::printf("then: still open after %lld ms\n", waited);
    } else if (got > 0) {
        std::printf("then: the server sent a byte after %lld ms\n", waited);
    } else {
        std::printf("then: closed by the server after %lld ms\n", waited);
    }
    return 0;
}

}  // namespace

int main(int argc, char **argv) {
    if (argc < 2) usage("missing ENDPOINT");
    Hello::Request hello{};
    uint16_t command = static_cast<uint16_t>(CommandId::hello);
    std::string raw;
    bool send_raw = false;
    uint32_t hold_seconds = 0;
    std::string then;
    uint32_t reply_timeout_s = 10;
    std::string from;
    std::string psk_file;
    for (int i = 2; i < argc; ++i) {
        const std::string arg = argv[i];
        if (i + 1 >= argc) usage(arg + " needs a value");
        const std::string value = argv[++i];
        if (arg == "--protocol-version") {
            hello.protocol_version = value == "next" ? kProtocolVersion + 1 : parse_number(arg, value);
        } else if (arg == "--magic") {
            hello.magic = parse_number(arg, value);
        } else if (arg == "--command") {
            command = static_cast<uint16_t>(parse_number(arg, value));
        } else if (arg == "--hold") {
            hold_seconds = parse_number(arg, value);
        } else if (arg == "--reply-timeout") {
            reply_timeout_s = parse_number(arg, value);
        } else if (arg == "--then") {
            if (value != "idle" && value != "half-frame") usage("--then: idle or half-frame, not " + value);
            then = value;
        } else if (arg == "--from") {
            from = value;
        } else if (arg == "--psk") {
            psk_file = value;
        } else if (arg == "--raw") {
            raw = value;
            send_raw = true;
        } else {
            usage("unknown argument: " + arg);
        }
    }

    Endpoint endpoint;
    Status status = parse_endpoint(argv[1], &endpoint);
    if (!status) usage(status.message());
    UniqueFd fd;
    status = from.empty() ? connect_endpoint(endpoint, 5000, &fd) : connect_from(from, endpoint, &fd);
    if (!status) {
        std::printf("reply: none (%s)\n", status.message().c_str());
        return 1;
    }
    // A server that never answers must not hang the test.
    timeval timeout{static_cast<time_t>(reply_timeout_s), 0};
    ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    FramedStream stream(std::move(fd), endpoint.to_string());
    if (!psk_file.empty()) {
        std::vector<PreSharedKey> keys;
        status = read_psk_file(psk_file, &keys);
        if (!status) usage(status.message());
        std::unique_ptr<TlsSession> tls;
        status = TlsSession::connect(stream.fd(), keys.front(), 5000, &tls);
        if (!status) {
            std::printf("reply: none (TLS: %s)\n", status.message().c_str());
            return 1;
        }
        std::printf("tls: %s\n", tls->description().c_str());
        stream.start_tls(std::move(tls));
    }

    // A server that turns a guest away answers before it reads anything and hangs
    // up, so a hello sent after that fails (EPIPE on a unix socket) while the answer
    // waits to be read: as the plugin does, read it anyway.
    Status sent;
    if (send_raw) {
        std::printf("sent: %zu raw bytes (not a frame)\n", raw.size());
        if (::send(stream.fd(), raw.data(), raw.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(raw.size())) {
            std::printf("reply: none (send: %s)\n", std::strerror(errno));
            return 1;
        }
    } else {
        std::printf("sent: command=%u magic=0x%08x protocol_version=%u (this build speaks %u)\n", command, hello.magic,
                    hello.protocol_version, kProtocolVersion);
        FrameHeader header;
        header.command = command;
        sent = stream.send(header, {ByteView(&hello, sizeof(hello))});
    }

    FrameHeader reply;
    status = stream.receive_header(&reply, 1 << 20);
    if (!status) {
        std::printf("reply: none (%s)\n", (sent.ok() ? status : sent).message().c_str());
        return 1;
    }
    std::printf("reply: code=%s status=%d command=%u flags=%u\n", code_name(reply.status), reply.status, reply.command,
                reply.flags);
    if (reply.status != static_cast<int32_t>(Code::ok)) {
        std::string message(reply.payload_size, '\0');
        status = stream.receive(message.data(), message.size());
        if (!status) {
            std::printf("message: none (%s)\n", status.message().c_str());
            return 1;
        }
        std::printf("message: %s\n", message.c_str());
    } else {
        Hello::Reply accepted{};
        if (reply.payload_size < sizeof(accepted) || !stream.receive(&accepted, sizeof(accepted)).ok()) {
            std::printf("accepted: short reply of %llu bytes\n", static_cast<unsigned long long>(reply.payload_size));
            return 1;
        }
        if (reply.payload_size > sizeof(accepted)) (void)stream.discard(reply.payload_size - sizeof(accepted));
        std::printf("accepted: protocol_version=%u device_count=%u\n", accepted.protocol_version,
                    accepted.device_count);
        std::fflush(stdout);
        if (hold_seconds > 0) ::sleep(hold_seconds);
        if (!then.empty()) return wait_for_hang_up(stream, then == "half-frame");
        return 0;  // an accepted session stays open: nothing to wait for
    }
    std::printf("connection: %s\n", connection_state(stream.fd()));
    return 0;
}
