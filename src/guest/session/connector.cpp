#include "guest/session/connector.h"

#include <sys/socket.h>
#include <sys/time.h>

#include <algorithm>
#include <cstring>

#include "guest/tls_credentials.h"
#include "protocol/commands.h"
#include "transport/socket.h"

namespace ggml_remote::guest {

using namespace protocol;

namespace {

void set_io_timeout(int fd, int timeout_ms) {
    timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

// A server's answer in the plain protocol to our TLS hello: the reason of its reply
// frame (`received` is what came so far; the rest is read here). Empty if the bytes
// are not such a frame.
std::string plain_reply_reason(int fd, std::string received, bool *refused_hello) {
    constexpr size_t kMaxReason = 4096;
    auto read_up_to = [&](size_t size) {
        char chunk[512];
        while (received.size() < size) {
            const ssize_t got = ::recv(fd, chunk, std::min(sizeof(chunk), size - received.size()), 0);
            if (got <= 0) break;
            received.append(chunk, static_cast<size_t>(got));
        }
    };
    read_up_to(sizeof(FrameHeader));
    if (received.size() < sizeof(FrameHeader)) return "";
    FrameHeader header;
    std::memcpy(&header, received.data(), sizeof(header));
    // A TLS record's third byte is the minor version (3 and up): never flags == 1.
    if (header.flags != kFrameReply || header.status <= 0 || header.status > static_cast<int32_t>(Code::disconnected) ||
        header.payload_size == 0 || header.payload_size > kMaxReason) {
        return "";
    }
    read_up_to(sizeof(header) + header.payload_size);
    if (received.size() < sizeof(header) + header.payload_size) return "";
    *refused_hello = header.command == static_cast<uint16_t>(CommandId::hello);
    return received.substr(sizeof(header), header.payload_size);
}

// Puts TLS under `stream`, just connected to a tls:// endpoint; the error says
// whether the key was wrong, the server refused, or it does not speak TLS.
Status start_tls(const Endpoint &endpoint, int timeout_ms, const PreSharedKey &key, FramedStream *stream) {
    const std::string name = endpoint.to_string();
    std::unique_ptr<TlsSession> tls;
    std::string first_bytes;
    Status status = TlsSession::connect(stream->fd(), key, timeout_ms, &tls, &first_bytes);
    if (status) {
        stream->start_tls(std::move(tls));
        return Status::success();
    }
    // A server without --tls-psk answers our hello in the plain protocol, and so did
    // a full server's listener before TLS guests were admitted after their handshake.
    bool refused_hello = false;
    const std::string reason = first_bytes.empty() ? "" : plain_reply_reason(stream->fd(), first_bytes, &refused_hello);
    if (refused_hello) return error(Code::disconnected, name + " refused the session: " + reason);
    constexpr unsigned char kFirstTlsRecordType = 20, kLastTlsRecordType = 23;
    const unsigned char first = first_bytes.empty() ? 0 : static_cast<unsigned char>(first_bytes[0]);
    if (!reason.empty() || (!first_bytes.empty() && (first < kFirstTlsRecordType || first > kLastTlsRecordType))) {
        return error(Code::disconnected, name +
                                             ": TLS handshake failed: the server answered without TLS (is it "
                                             "started with --tls-psk?)");
    }
    return error(status.code(), name + ": TLS handshake failed: " + status.message());
}

// Writes of at most 16 KiB on vsock: a Linux guest (7.x) sends a larger write as
// packets whose payload spans several descriptors, and vhost-device-vsock 0.3
// (Debian's) stops forwarding at the first such packet; 16 KiB packets stay in
// one piece, and cost a system call each (measured in the test VM, under TCG:
// 4 MiB each way in 0.25 s with 16 KiB writes; 64 KiB writes stall at 0 bytes).
constexpr size_t kVsockWriteBytes = 16 * 1024;

}  // namespace

Status connect_stream(const Endpoint &endpoint, const GuestOptions &options, int timeout_ms, FramedStream *out) {
    const std::string name = endpoint.to_string();
    PreSharedKey key;
    if (endpoint.uses_tls()) {
        Status status = tls_key_for(endpoint, options, &key);
        if (!status) return error(status.code(), name + ": " + status.message());
    }
    UniqueFd fd;
    Status status = connect_endpoint(endpoint, timeout_ms, &fd);
    if (!status) return status;
    FramedStream stream(std::move(fd), name);
    set_io_timeout(stream.fd(), timeout_ms);
    if (endpoint.is_vsock()) stream.cap_writes(kVsockWriteBytes);
    if (endpoint.uses_tls()) {
        // The key wipes itself on every return (tls_key.h).
        status = start_tls(endpoint, timeout_ms, key, &stream);
        if (!status) return status;
    }
    *out = std::move(stream);
    return Status::success();
}

Connector connector_for(const Endpoint &endpoint, const GuestOptions &options) {
    return [endpoint, options](FramedStream *stream, int timeout_ms) {
        return connect_stream(endpoint, options, timeout_ms, stream);
    };
}

Status open_region(const Endpoint &endpoint, const GuestOptions &options, FramedStream *stream,
                   std::shared_ptr<GuestRegion> *region) {
    Status status = GuestRegion::open(endpoint, options.connect_timeout_ms, region);
    if (!status) return status;
    *stream = FramedStream((*region)->duplicate_fd(), endpoint.to_string());
    stream->attach_ring(GuestRegion::rings(*region));
    return Status::success();
}

}  // namespace ggml_remote::guest
