// Session: serve(), the frames of one guest's connection: reading them under the
// watchdog, handing them to their handlers, and the replies.
#include <chrono>
#include <exception>
#include <optional>
#include <string>
#include <utility>

#include "host/worker/session/session.h"
#include "host/worker/session/watchdog.h"
#include "protocol/foreign_peers.h"

namespace ggml_remote::host {

using namespace protocol;

namespace {

// The time a frame (or a reply) of `bytes` may take on top of --frame-timeout:
// a second per MiB, so that a slow link still carries the largest message.
double transfer_seconds(int timeout_s, uint64_t bytes) { return timeout_s + static_cast<double>(bytes) / (1 << 20); }

Watchdog::Clock::time_point after(double seconds) {
    return Watchdog::Clock::now() +
           std::chrono::duration_cast<Watchdog::Clock::duration>(std::chrono::duration<double>(seconds));
}

// Tensor data is handed to ggml in pieces of at least this much (fewer at the
// ring's end): each ggml_backend_tensor_set/get on a GPU costs a submission.
constexpr size_t kMinRingPiece = 256 * 1024;

// A frame's tail (SetTensor's data) that its handler reads as it comes: where it
// lies in the shared ring, or from the socket a bounded piece at a time
// (FramedStream::receive_in_place), so that a frame of --max-message-size is never
// held whole outside the session's --memory-quota. The ring's counts stay the
// host's own; the guest can change the bytes while ggml copies them, which changes
// only its own tensor's data.
class StreamedTail final : public TailStream {
  public:
    StreamedTail(FramedStream &stream, uint64_t size) : stream_(stream), size_(size) {}
    uint64_t size() const override { return size_; }
    Status read(const Take &take) override {
        if (read_) return error(Code::error, "the tail was read already");
        read_ = true;
        uint64_t at = 0;
        // Stays so if ggml throws mid-tail: the frames are then out of step.
        transport_ = error(Code::error, "reading tensor data from the guest was interrupted");
        transport_ = stream_.receive_in_place(size_, kMinRingPiece, [&](const uint8_t *piece, size_t size) {
            take(at, piece, size);
            at += size;
        });
        return transport_;
    }
    // After the handler: what it did not read is dropped, keeping the frames in
    // step. A failure here is the connection's: the session ends.
    Status finish() {
        if (!read_) {
            read_ = true;
            transport_ = stream_.discard(size_);
        }
        return transport_;
    }

  private:
    FramedStream &stream_;
    const uint64_t size_;
    bool read_ = false;
    Status transport_;
};

// A reply whose tail is read from a buffer as it is sent (ReplyTail::fill): over
// shm straight into the ring, over a socket a bounded piece at a time. A guest
// chooses a reply's size (GetTensor2d's rows may repeat one small range up to
// --max-message-size), so the reply must never be held whole: that memory would
// lie outside the session's --memory-quota (docs/SECURITY.md, "Reply memory").
Status send_filled(FramedStream &stream, const FrameHeader &header, const ReplyFrame &reply) {
    uint64_t at = 0;
    try {
        return stream.send_in_place(header, {ByteView(reply.fixed)}, reply.tail.fill_size, kMinRingPiece,
                                    [&](uint8_t *piece, size_t size) {
                                        reply.tail.fill(at, piece, size);
                                        at += size;
                                    });
    } catch (const std::exception &e) {
        // Half a reply is out: the session cannot go on.
        return error(Code::error, std::string("reading a device buffer into the reply: ") + e.what());
    }
}

}  // namespace

uint16_t Session::reply_flags() {
    // Only a guest on this machine spins on the host's cores.
    const bool contended = shared_memory_allowed_ && cores_.contended();
    return static_cast<uint16_t>(kFrameReply | (contended ? kFrameCoresContended : 0));
}

Status Session::serve(FramedStream &stream) {
    const Status outcome = serve_frames(stream);
    publish_status();  // with the last reply's bytes: the listener keeps the totals of ended sessions
    return outcome;
}

// What serve() keeps between frames.
struct Session::ServeLoop {
    ServeLoop(FramedStream &stream, std::atomic<bool> *guest_gone, Watchdog::Clock::time_point handshake_deadline)
        : stream(stream), watchdog(stream.fd(), guest_gone), handshake_deadline(handshake_deadline) {}

    FramedStream &stream;
    // A guest must not hold its worker by sending nothing or half a frame; the
    // clock never runs while the session computes.
    Watchdog watchdog;
    const Watchdog::Clock::time_point handshake_deadline;
    FrameBuffer payload;
    uint64_t streamed_tail = 0;  // bytes of this frame's payload left in the stream (tail_left_in_ring)
    Status lost;                 // the connection failed while a handler read the stream: the session ends
    Status deferred;             // the first failure of a one-way command, told with the next reply
    // Whether the last reply answered a guest that waited on a compute: it now
    // works on its own until its next graph (see SpinPolicy).
    bool guest_busy = false;
    uint64_t computes_answered = 0;
    // When the compute the guest waits on arrived: its round trip ends with the next reply.
    std::optional<std::chrono::steady_clock::time_point> compute_arrived;
};

Status Session::serve_frames(FramedStream &stream) {
    const auto handshake_deadline = connected_at_ ? *connected_at_ + std::chrono::seconds(limits_.handshake_timeout_s)
                                                  : after(limits_.handshake_timeout_s);
    ServeLoop loop(stream, &guest_gone_, handshake_deadline);
    // The compute handler reaches the watchdog through watchdog_ while serve() runs, never after.
    watchdog_ = &loop.watchdog;
    struct ForgetWatchdogOnReturn {
        Watchdog *&pointer;
        ~ForgetWatchdogOnReturn() { pointer = nullptr; }
    } forget_watchdog{watchdog_};
    // While the session computes, its thread does not touch the stream, and the
    // watchdog's thread, awake then anyway to watch for a hang-up, sends the
    // keep-alives: ggml's abort callback would reach only the CPU backend between
    // nodes, and a GPU's graph runs as one call. Watchdog::send_keepalives says
    // why the two threads never use the stream at once.
    loop.watchdog.send_keepalives([this, &stream] {
        if (keepalive_granted_) (void)stream.send_keepalive();  // a guest that is gone is the hang-up watch's
    });
    for (;;) {
        FrameHeader header;
        bool ended = false;
        const Status received = receive_frame(loop, &header, &ended);
        if (!received || ended) return received;
        if (header.command == static_cast<uint16_t>(CommandId::graph_compute) && !loop.compute_arrived) {
            loop.compute_arrived = std::chrono::steady_clock::now();
        }
        const bool known = dispatcher_.find(header.command) != nullptr;
        const bool one_way = known && dispatcher_.one_way(header.command);
        ReplyFrame reply;
        const Status status = carry_out(loop, header, one_way, &reply);
        publish_status();
        if (!loop.lost.ok()) return loop.lost.code() == Code::disconnected ? Status::success() : loop.lost;
        // The guest hung up during a compute: nothing it sent after that needs serving.
        if (guest_gone_.load(std::memory_order_relaxed)) return Status::success();
        if (one_way) {
            if (!status && loop.deferred.ok()) {
                loop.deferred = error(status.code(), std::string(command_name(static_cast<CommandId>(header.command))) +
                                                         ": " + status.message());
            }
            continue;
        }
        const Status sent = answer(loop, header, status, reply, &ended);
        if (!sent || ended) return sent;
        // A guest that cannot get the handshake or the command set right is not
        // given a second chance.
        if (!status.ok() && (!handshaken_ || !known)) return status;
    }
}

void Session::arm_wait_for_frame(ServeLoop &loop) {
    if (!handshaken_ && limits_.handshake_timeout_s > 0) {
        loop.watchdog.arm(loop.handshake_deadline, Watchdog::Wait::handshake, limits_.handshake_timeout_s);
    } else if (handshaken_ && limits_.idle_timeout_s > 0) {
        loop.watchdog.arm(after(limits_.idle_timeout_s), Watchdog::Wait::idle, limits_.idle_timeout_s);
    }
}

Status Session::receive_frame(ServeLoop &loop, FrameHeader *header, bool *ended) {
    FramedStream &stream = loop.stream;
    Watchdog &watchdog = loop.watchdog;
    // The last frame is handled and answered (a reply may point into it until
    // sent): a large frame's memory is not kept while the guest idles. A guest
    // whose next frame comes within a few milliseconds (a model's weights, one
    // write after another) keeps it, so that each large frame does not fault in
    // fresh pages again: that halved 16 MiB writes over sockets.
    constexpr int kPauseMs = 5;
    if (loop.payload.capacity() > FrameBuffer::kKeptBytes && !stream.input_waiting(kPauseMs)) {
        loop.payload.release_excess();
    }
    arm_wait_for_frame(loop);
    stream.set_compute_threads(compute_threads_);
    stream.set_cores_contended(cores_.contended());
    stream.set_peer_busy(loop.guest_busy);
    Status status = stream.receive_header(header, limits_.max_message_size);
    stream.set_peer_busy(false);
    // Another protocol's client says so in its first bytes: refused in words, before
    // its "payload" is waited for. Our refusal frame is no TLS record either, which
    // is how a tls:// guest knows that it reached a plain endpoint.
    if (!handshaken_ && (status.ok() || status.code() == Code::limit_exceeded)) {
        const protocol::ForeignPeer peer = protocol::recognise_foreign_peer(*header);
        if (peer != protocol::ForeignPeer::none)
            status = error(Code::bad_request, protocol::describe_foreign_peer(peer));
    }
    if (!status) {
        if (watchdog.expired()) return watchdog.failure();
        *ended = status.code() == Code::disconnected;
        if (*ended) return Status::success();
        FrameHeader reply{header->command, kFrameReply, static_cast<int32_t>(status.code()), 0};
        const std::string &message = status.message();
        (void)stream.send(reply, {ByteView(message.data(), message.size())});
        return status;
    }
    if (handshaken_) {
        if (limits_.frame_timeout_s > 0 && header->payload_size > 0) {
            const double seconds = transfer_seconds(limits_.frame_timeout_s, header->payload_size);
            watchdog.arm(after(seconds), Watchdog::Wait::frame, seconds, header->payload_size);
        } else {
            watchdog.disarm();
        }
    }
    loop.streamed_tail = tail_left_in_ring(loop, *header);
    status = stream.receive_payload(&loop.payload, header->payload_size - loop.streamed_tail);
    // The watchdog keeps watching a tail left in the stream until it is read.
    if (loop.streamed_tail == 0 && !watchdog.disarm()) return watchdog.failure();
    if (!status) {
        *ended = status.code() == Code::disconnected;  // gone mid-message
        return *ended ? Status::success() : status;
    }
    counters_.bytes_received += sizeof(*header) + header->payload_size;
    if (recorder_ != nullptr) recorder_->record(*header, ByteView(loop.payload.data(), loop.payload.size()));
    return Status::success();
}

uint64_t Session::tail_left_in_ring(const ServeLoop &, const FrameHeader &header) const {
    // Only tensor data, only after the handshake, and not while frames are recorded whole.
    if (!handshaken_ || recorder_ != nullptr) return 0;
    if (!protocol::command_has(header.command, protocol::kTailInRing)) return 0;
    const size_t fixed = protocol::request_size(static_cast<CommandId>(header.command));
    // A payload too short for its request is refused by the dispatcher, as ever.
    return fixed > 0 && header.payload_size > fixed ? header.payload_size - fixed : 0;
}

Status Session::carry_out(ServeLoop &loop, const FrameHeader &header, bool one_way, ReplyFrame *reply) {
    // Whatever a handler does not take is closed on return.
    std::vector<UniqueFd> fds = std::move(loop.stream.received_fds());
    loop.stream.received_fds().clear();
    const ByteView payload(loop.payload.data(), loop.payload.size());
    StreamedTail tail(loop.stream, loop.streamed_tail);
    TailStream *streamed = loop.streamed_tail > 0 ? &tail : nullptr;
    Status status;
    if (!one_way && !loop.deferred.ok()) {
        // An earlier one-way command failed: this call is answered with that
        // failure and not carried out, so nothing it would create is lost.
        status = std::exchange(loop.deferred, Status::success());
    } else {
        status = handle_frame(header.command, payload, streamed, fds, reply);
    }
    if (streamed != nullptr) {
        loop.lost = tail.finish();
        if (!loop.watchdog.disarm()) loop.lost = loop.watchdog.failure();
    }
    return status;
}

Status Session::answer(ServeLoop &loop, const FrameHeader &header, const Status &status, const ReplyFrame &reply,
                       bool *ended) {
    FrameHeader out{header.command, reply_flags(), static_cast<int32_t>(status.code()), 0};
    const uint64_t reply_size = status.ok() ? reply.fixed.size() + reply.tail.size() : status.message().size();
    if (limits_.frame_timeout_s > 0) {
        const double seconds = transfer_seconds(limits_.frame_timeout_s, reply_size);
        loop.watchdog.arm(after(seconds), Watchdog::Wait::reply, seconds, reply_size);
    }
    Status sent;
    if (status.ok() && reply.tail.fill) {
        sent = send_filled(loop.stream, out, reply);
        counters_.bytes_sent += sizeof(out) + reply.fixed.size() + reply.tail.fill_size;
    } else if (status.ok()) {
        const ByteView tail = reply.tail.bytes();
        const int fd = reply.tail.fd.get();
        sent = loop.stream.send(out, {ByteView(reply.fixed), tail}, &fd, reply.tail.fd.valid() ? 1 : 0);
        counters_.bytes_sent += sizeof(out) + reply.fixed.size() + tail.size;
    } else {
        sent = loop.stream.send(out, {ByteView(status.message().data(), status.message().size())});
    }
    if (!loop.watchdog.disarm()) return loop.watchdog.failure();
    *ended = !sent.ok();
    if (*ended) return Status::success();
    if (loop.compute_arrived) {
        observe(SessionHistogram::compute_round_trip, nanoseconds_since(*loop.compute_arrived));
        loop.compute_arrived.reset();
    }
    loop.guest_busy = counters_.graph_computes != loop.computes_answered;
    loop.computes_answered = counters_.graph_computes;
    if (pending_ring_ != nullptr) loop.stream.attach_ring(std::move(pending_ring_));
    return Status::success();
}

}  // namespace ggml_remote::host
