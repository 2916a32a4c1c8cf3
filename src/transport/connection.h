// FramedStream: frames (header + payload) over a connected stream socket, or over
// a TLS session on one (tls:// endpoints).
#pragma once

#include <sys/socket.h>
#include <sys/uio.h>

#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "protocol/status.h"
#include "protocol/wire.h"
#include "transport/frame_buffer.h"
#include "transport/shared_ring.h"
#include "transport/spin_policy.h"
#include "transport/tls_session.h"
#include "transport/unique_fd.h"

namespace ggml_remote {

// At most this many descriptors travel with one frame.
constexpr size_t kMaxFdsPerFrame = 4;

// The most memory send_in_place and receive_in_place hold for a frame's tail over
// a socket (the piece filled to be sent, or taken): a frame as large as
// --max-message-size costs its worker this much, not its size.
constexpr size_t kFilledPieceBytes = 1 << 20;

class FramedStream {
  public:
    FramedStream() = default;
    FramedStream(UniqueFd fd, std::string peer) : fd_(std::move(fd)), peer_(std::move(peer)) {}

    // From now on frames travel through `tls`, a session on this stream's socket.
    void start_tls(std::unique_ptr<TlsSession> tls) { tls_ = std::move(tls); }
    const TlsSession *tls() const { return tls_.get(); }

    // Sends one frame whose payload is the concatenation of `parts`; the header's
    // payload_size is filled in. Never raises SIGPIPE.
    Status send(protocol::FrameHeader header, std::initializer_list<protocol::ByteView> parts);
    // The same, passing file descriptors along (unix sockets only; SCM_RIGHTS; not over TLS).
    Status send(protocol::FrameHeader header, std::initializer_list<protocol::ByteView> parts, const int *fds,
                size_t fd_count);

    // Sends frames that were already laid out (header + payload, back to back).
    Status send_frames(protocol::ByteView frames);

    // Reads a frame header; a payload larger than max_payload is refused unread.
    // Descriptors that came with the frame wait in received_fds() until taken.
    Status receive_header(protocol::FrameHeader *header, uint64_t max_payload);
    // Reads exactly `size` payload bytes.
    Status receive(void *data, size_t size);
    // Reads a payload of `size` bytes into `buffer`, which grows as the bytes
    // arrive (FrameBuffer::next_step): a header alone commits no memory.
    Status receive_payload(FrameBuffer *buffer, uint64_t size);
    // Reads and throws away `size` bytes (the payload of a refused frame).
    Status discard(uint64_t size);

    // Hands the next `size` bytes to `take` piece by piece: over a shared ring where
    // they lie (RingChannel::read_in_place, pieces of at least `min_piece` where the
    // ring allows), elsewhere through a buffer of at most kFilledPieceBytes.
    Status receive_in_place(uint64_t size, size_t min_piece, const RingChannel::PieceReader &take);
    // Sends one frame whose payload is `parts`, then `tail_size` bytes that `fill`
    // writes as they are sent: over a shared ring in place (RingChannel::write_in_place,
    // pieces of at least `min_piece` where the ring allows), elsewhere through a buffer
    // of at most kFilledPieceBytes, sent piece by piece. Either way the frame never
    // lies whole in this process's memory, however large `tail_size` is.
    Status send_in_place(protocol::FrameHeader header, std::initializer_list<protocol::ByteView> parts,
                         uint64_t tail_size, size_t min_piece, const RingChannel::PieceWriter &fill);

    // Descriptors that arrived with the last frame header; the caller takes them.
    std::vector<UniqueFd> &received_fds() { return received_fds_; }

    // From now on frames travel through shared memory; the socket carries only
    // descriptors (announced by kFrameCarriesFds) and tells when the peer is gone.
    void attach_ring(std::unique_ptr<RingChannel> ring) {
        ring_ = std::move(ring);
        if (ring_ != nullptr) {
            ring_->set_options(wait_options_);
            ring_->set_silence_limit_ms(silence_limit_ms_);
            if (heeds_keepalives_) ring_->heed_heartbeat(wait_cap_ms_);
        }
    }
    // The longest the peer may stay silent while this side waits to receive, or
    // to send (0: no limit): then the read or write fails, saying so. On the
    // socket (SO_RCVTIMEO, SO_SNDTIMEO: each call that makes no progress) and on
    // a ring.
    void set_silence_limit_ms(int ms);
    // Guest, where the server keeps the session alive (kSessionKeepAlive):
    // receive_header() consumes its keep-alive frames (and a ring heeds its
    // heartbeat), each of which ends a silence; a header that has not come within
    // `cap_ms` (0: no cap) fails all the same. A send may wait up to `cap_ms` too:
    // a server that computes reads nothing, however alive.
    void heed_keepalives(int cap_ms);
    // Host, from any one thread while the stream's owner does not use it (the
    // session's thread is computing): a keep-alive, a header-only frame or a beat
    // of the ring's heartbeat. Never waits: skipped while the socket has no room
    // (its guest reads nothing, so it waits on nothing either).
    Status send_keepalive();
    bool uses_ring() const { return ring_ != nullptr; }
    // How this side waits for its peer: its process's options (a ring attached
    // later gets them too).
    void set_wait_options(const WaitOptions &options) {
        wait_options_ = options;
        socket_spin_.set_options(options);
        if (ring_ != nullptr) ring_->set_options(options);
    }
    // See SpinPolicy::set_peer_busy.
    void set_peer_busy(bool busy) {
        socket_spin_.set_peer_busy(busy);
        if (ring_ != nullptr) ring_->set_peer_busy(busy);
    }
    // See SpinPolicy::set_compute_threads.
    void set_compute_threads(int threads) {
        socket_spin_.set_compute_threads(threads);
        if (ring_ != nullptr) ring_->set_compute_threads(threads);
    }
    // See SpinPolicy::set_cores_contended.
    void set_cores_contended(bool contended) {
        socket_spin_.set_cores_contended(contended);
        if (ring_ != nullptr) ring_->set_cores_contended(contended);
    }

    // Bytes of the peer's already read from the socket (TCP reads ahead) and not
    // yet taken: a poll on fd() does not see them.
    bool has_unread_bytes() const { return inbox_at_ < inbox_end_; }

    // Whether the peer's next bytes are here (read ahead, or on the socket) or come
    // within `timeout_ms`: it is sending, not idling.
    bool input_waiting(int timeout_ms) const;

    // Each write to the socket carries at most `bytes` (0: no limit). vsock guests
    // use it: see kVsockWriteBytes in guest/session/connector.cpp.
    void cap_writes(size_t bytes) { write_cap_ = bytes; }

    bool connected() const { return fd_.valid(); }
    int fd() const { return fd_.get(); }
    const std::string &peer() const { return peer_; }
    void close() {
        tls_.reset();
        fd_.reset();
    }

  private:
    Status failure(const char *what, int err);
    // receive_header() without keep-alives.
    Status receive_one_header(protocol::FrameHeader *header, uint64_t max_payload);
    // SO_RCVTIMEO and SO_SNDTIMEO from the limits above.
    void apply_socket_timeouts();
    std::string silence_reason() const;
    Status write_all(struct iovec *iov, size_t count, const int *fds, size_t fd_count);
    // Points `message` at the first write_cap_ bytes of `iov` (a copy in capped_).
    void cap_message(const iovec *iov, size_t count, msghdr *message);
    // Sends descriptors alone, on one byte (shared-ring sessions).
    Status send_fds(const int *fds, size_t fd_count);
    // Receives descriptors into received_fds_; `wait` false when they must be there already.
    Status receive_fds(void *first_bytes, size_t size, bool wait, size_t *got);
    Status write_tls(const struct iovec *iov, size_t count);
    // send_in_place's tail over a socket or TLS: `size` bytes from `fill`, a piece at a time.
    Status send_filled_pieces(uint64_t size, const RingChannel::PieceWriter &fill);
    // Before a frame is read from the socket: spins while the policy says so, until
    // the socket has bytes (the read that follows sleeps if it still has none).
    void spin_until_readable();
    // Whether reads go through inbox_: on sockets that cannot carry descriptors
    // (TCP, vsock), whose frames a descriptor never has to be matched to.
    bool reads_ahead();
    // receive() through inbox_: a guest's batch of small frames (a token's inputs,
    // its compute and its read) costs one system call instead of two per frame.
    Status receive_through_inbox(uint8_t *out, size_t size);

    UniqueFd fd_;
    std::unique_ptr<TlsSession> tls_;  // declared after fd_: ends before the socket closes
    std::string peer_;
    std::vector<UniqueFd> received_fds_;
    std::unique_ptr<RingChannel> ring_;
    WaitOptions wait_options_;
    SpinPolicy socket_spin_;
    int silence_limit_ms_ = 0;
    bool heeds_keepalives_ = false;
    int wait_cap_ms_ = 0;   // with keep-alives: the longest wait for a header, or to send
    int reads_ahead_ = -1;  // unknown until the first read
    size_t write_cap_ = 0;  // bytes per write at most; 0: no cap
    std::vector<struct iovec> capped_;
    std::vector<uint8_t> inbox_;  // bytes read ahead of the frame being read
    size_t inbox_at_ = 0, inbox_end_ = 0;
};

}  // namespace ggml_remote
