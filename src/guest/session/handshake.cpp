#include "guest/session/handshake.h"

#include <memory>
#include <vector>

#include "guest/log.h"
#include "protocol/commands.h"
#include "protocol/printable.h"
#include "protocol/reply_rules.h"

namespace ggml_remote::guest {

using namespace protocol;

namespace {

Hello::Request hello_for(const HandshakeAsk &ask, const GuestOptions &options) {
    Hello::Request hello;
    hello.capabilities |= kSessionKeepAlive;
    if (options.store_min_bytes != 0) hello.capabilities |= kSessionWeightStore | kSessionModelLibrary;
    if (ask.shared_memory) {
        hello.capabilities |= kSessionSharedMemory;
        if (options.shared_ring) hello.capabilities |= kSessionSharedRing;
    }
    if (ask.region_heap) hello.capabilities |= kSessionRegionHeap;
    if (ask.peer_exchange) hello.capabilities |= kSessionPeerExchange;
    if (ask.peer_links) hello.capabilities |= kSessionPeerLinks;
    return hello;
}

// The reply header's wait failed: a silent peer is told apart from a broken one.
Status no_hello_reply(const Status &status, const std::string &name, const GuestOptions &options) {
    if (status.message().find("temporarily unavailable") != std::string::npos ||
        status.message().find("was silent for") != std::string::npos) {
        return error(Code::disconnected, "handshake with " + name + ": no reply within " +
                                             std::to_string(options.connect_timeout_ms) +
                                             " ms (is the server stopped or overloaded?)");
    }
    return error(status.code(),
                 "handshake with " + name + " failed: " + status.message() + " (is it a ggml-remote-server?)");
}

Status exchange_hello(FramedStream &stream, const std::string &name, const GuestOptions &options,
                      const Hello::Request &hello, Hello::Reply *reply) {
    FrameHeader header;
    header.command = static_cast<uint16_t>(CommandId::hello);
    // A server that turns us away writes its reason and closes, so our send may
    // fail while the reason is still there to read.
    (void)stream.send(header, {ByteView(&hello, sizeof(hello))});
    FrameHeader reply_header;
    Status status = stream.receive_header(&reply_header, 65536);
    if (!status) return no_hello_reply(status, name, options);
    if (!(reply_header.flags & kFrameReply) || reply_header.command != static_cast<uint16_t>(CommandId::hello)) {
        return error(Code::error, "handshake with " + name +
                                      " failed: the peer does not speak the ggml-remote "
                                      "protocol (is it a ggml-remote-server?)");
    }
    std::vector<uint8_t> payload(reply_header.payload_size);
    status = stream.receive(payload.data(), payload.size());
    if (!status) return error(status.code(), "handshake with " + name + " failed: " + status.message());
    if (reply_header.status != static_cast<int32_t>(Code::ok)) {
        return error(static_cast<Code>(reply_header.status),
                     name + " refused the session: " + one_line(std::string(payload.begin(), payload.end())));
    }
    if (!read_pod(ByteView(payload), 0, reply)) {
        return error(Code::error, "handshake with " + name + " failed: short reply");
    }
    status = ReplyRule<Hello>::check(hello, *reply, payload.size() - sizeof(*reply));
    if (!status) return error(Code::error, "handshake with " + name + " failed: " + status.message());
    return Status::success();
}

// A granted shared ring comes as the memory file that rode on the hello's reply.
Status attach_granted_ring(FramedStream &stream, const std::string &name) {
    std::unique_ptr<RingChannel> ring;
    Status status = stream.received_fds().empty()
                        ? error(Code::error, "the server granted a shared ring but sent no memory file")
                        : RingChannel::attach(stream.received_fds().front().get(), &ring);
    if (!status) return error(status.code(), "handshake with " + name + " failed: " + status.message());
    stream.attach_ring(std::move(ring));
    return Status::success();
}

}  // namespace

Status handshake(FramedStream &stream, const std::string &name, const GuestOptions &options, const HandshakeAsk &ask,
                 SessionTerms *terms) {
    // The handshake is done by hand, with a time limit: a peer that accepts and
    // never answers must not hang the application at start-up.
    stream.set_silence_limit_ms(options.connect_timeout_ms);  // the socket's, or an ivshmem region's ring
    const Hello::Request hello = hello_for(ask, options);
    Hello::Reply reply{};
    Status status = exchange_hello(stream, name, options, hello, &reply);
    if (!status) return status;
    // From now on a reply may take as long as a compute. A server that keeps the
    // session alive may be silent for seconds (its keep-alives end each silence,
    // the reply timeout bounds the whole wait); one that does not sends nothing
    // while it computes, so the reply timeout bounds its silence. A dead server
    // is noticed sooner by the socket.
    const bool keeps_alive = (reply.capabilities & kSessionKeepAlive) != 0;
    if (keeps_alive) stream.heed_keepalives(options.reply_timeout_ms);
    stream.set_silence_limit_ms(options.silence_limit_ms(keeps_alive));
    stream.set_wait_options(options.waiting);
    if (reply.capabilities & kSessionSharedRing) {
        if (status = attach_granted_ring(stream, name); !status) return status;
    }
    stream.received_fds().clear();
    terms->device_count = reply.device_count;
    terms->keeps_alive = keeps_alive;
    terms->shared_memory = (reply.capabilities & kSessionSharedMemory) != 0;
    terms->weight_store = (hello.capabilities & reply.capabilities & kSessionWeightStore) != 0;
    terms->model_library = terms->weight_store && (hello.capabilities & reply.capabilities & kSessionModelLibrary) != 0;
    terms->region_heap = (hello.capabilities & reply.capabilities & kSessionRegionHeap) != 0;
    terms->peer_exchange = (hello.capabilities & reply.capabilities & kSessionPeerExchange) != 0;
    terms->peer_links = (hello.capabilities & reply.capabilities & kSessionPeerLinks) != 0;
    if (ask.shared_memory && !terms->shared_memory) {
        log(GGML_LOG_LEVEL_WARN, "%s did not grant shared memory; tensor data goes over the socket", name.c_str());
    }
    return Status::success();
}

}  // namespace ggml_remote::guest
