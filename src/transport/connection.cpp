#include "transport/connection.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "transport/socket.h"

namespace ggml_remote {

using protocol::ByteView;
using protocol::FrameHeader;

Status FramedStream::failure(const char *what, int err) {
    std::string reason = err == 0 ? "connection closed by peer" : std::strerror(err);
    if ((err == EAGAIN || err == EWOULDBLOCK) && silence_limit_ms_ > 0) reason = silence_reason();
    return error(Code::disconnected, std::string(what) + " " + peer_ + ": " + reason);
}

std::string FramedStream::silence_reason() const {
    return "the peer was silent for " + std::to_string(silence_limit_ms_) + " ms";
}

void FramedStream::set_silence_limit_ms(int ms) {
    silence_limit_ms_ = ms;
    if (ring_ != nullptr) ring_->set_silence_limit_ms(ms);
    apply_socket_timeouts();
}

void FramedStream::heed_keepalives(int cap_ms) {
    heeds_keepalives_ = true;
    wait_cap_ms_ = cap_ms;
    if (ring_ != nullptr) ring_->heed_heartbeat(cap_ms);
    apply_socket_timeouts();
}

void FramedStream::apply_socket_timeouts() {
    if (!fd_.valid()) return;
    const int send_ms = heeds_keepalives_ ? wait_cap_ms_ : silence_limit_ms_;
    const timeval receive{silence_limit_ms_ / 1000, (silence_limit_ms_ % 1000) * 1000};
    const timeval send{send_ms / 1000, (send_ms % 1000) * 1000};
    // Not a socket (an ivshmem region's file): the ring alone waits.
    (void)::setsockopt(fd_.get(), SOL_SOCKET, SO_RCVTIMEO, &receive, sizeof(receive));
    (void)::setsockopt(fd_.get(), SOL_SOCKET, SO_SNDTIMEO, &send, sizeof(send));
}

Status FramedStream::send_keepalive() {
    if (!fd_.valid()) return error(Code::disconnected, "send to " + peer_ + ": not connected");
    if (ring_ != nullptr) {
        ring_->beat();
        return Status::success();
    }
    // A socket that polls writable has room for far more than a header (TCP: a
    // third of its buffer; unix: a quarter), so the write below does not block.
    pollfd room{fd_.get(), POLLOUT, 0};
    if (::poll(&room, 1, 0) != 1 || (room.revents & POLLOUT) == 0) return Status::success();
    protocol::FrameHeader header;
    header.flags = protocol::kFrameKeepAlive;
    iovec iov{&header, sizeof(header)};
    return write_all(&iov, 1, nullptr, 0);
}

Status FramedStream::send(FrameHeader header, std::initializer_list<ByteView> parts) {
    return send(header, parts, nullptr, 0);
}

Status FramedStream::send(FrameHeader header, std::initializer_list<ByteView> parts, const int *fds, size_t fd_count) {
    if (fd_count > kMaxFdsPerFrame) return error(Code::error, "send: too many descriptors in one frame");
    if (ring_ != nullptr && fd_count > 0) header.flags |= protocol::kFrameCarriesFds;
    header.payload_size = 0;
    iovec iov[8];
    size_t count = 0;
    iov[count++] = {&header, sizeof(header)};
    for (const ByteView &part : parts) {
        header.payload_size += part.size;
        if (part.size == 0) continue;
        if (count == sizeof(iov) / sizeof(iov[0])) return error(Code::error, "send: too many frame parts");
        iov[count++] = {const_cast<uint8_t *>(part.data), part.size};
    }
    return write_all(iov, count, fds, fd_count);
}

Status FramedStream::send_frames(ByteView frames) {
    iovec iov{const_cast<uint8_t *>(frames.data), frames.size};
    return write_all(&iov, frames.size > 0 ? 1 : 0, nullptr, 0);
}

Status FramedStream::write_all(iovec *next, size_t count, const int *fds, size_t fd_count) {
    if (!fd_.valid()) return error(Code::disconnected, "send to " + peer_ + ": not connected");
    if (tls_) {
        if (fd_count > 0) return error(Code::error, "send to " + peer_ + ": descriptors cannot travel over TLS");
        return write_tls(next, count);
    }
    if (ring_ != nullptr) {
        if (fd_count > 0) {
            Status status = send_fds(fds, fd_count);
            if (!status) return status;
        }
        Status status = ring_->write(next, count, fd_.get());
        return status ? status : error(status.code(), "send to " + peer_ + ": " + status.message());
    }
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFdsPerFrame)];
    bool fds_pending = fd_count > 0;
    while (count > 0) {
        msghdr message{};
        message.msg_iov = next;
        message.msg_iovlen = count;
        if (write_cap_ > 0) cap_message(next, count, &message);
        // The descriptors ride on the first bytes of the frame.
        if (fds_pending) attach_fds(&message, control, sizeof(control), fds, fd_count);
        const ssize_t sent = ::sendmsg(fd_.get(), &message, MSG_NOSIGNAL);
        if (sent < 0) {
            if (errno == EINTR) continue;
            return failure("send to", errno);
        }
        fds_pending = false;
        size_t left = static_cast<size_t>(sent);
        while (count > 0 && left >= next->iov_len) {
            left -= next->iov_len;
            ++next;
            --count;
        }
        if (count > 0) {
            next->iov_base = static_cast<uint8_t *>(next->iov_base) + left;
            next->iov_len -= left;
        }
    }
    return Status::success();
}

Status FramedStream::write_tls(const iovec *iov, size_t count) {
    // Small parts are gathered into one record (a record per part would cost a
    // system call and a record's overhead each); large ones go out as they are.
    uint8_t gathered[16 * 1024];  // TLS's largest record
    size_t used = 0;
    Status status;
    for (size_t i = 0; i < count; ++i) {
        const auto *data = static_cast<const uint8_t *>(iov[i].iov_base);
        const size_t size = iov[i].iov_len;
        if (used > 0 && used + size > sizeof(gathered)) {
            status = tls_->write(gathered, used);
            used = 0;
        }
        if (!status) break;
        if (size >= sizeof(gathered)) {
            status = tls_->write(data, size);
        } else {
            std::memcpy(gathered + used, data, size);
            used += size;
        }
    }
    if (status && used > 0) status = tls_->write(gathered, used);
    if (!status) return error(status.code(), "send to " + peer_ + ": " + status.message());
    return Status::success();
}

void FramedStream::cap_message(const iovec *iov, size_t count, msghdr *message) {
    capped_.clear();
    size_t room = write_cap_;
    for (size_t i = 0; i < count && room > 0; ++i) {
        const size_t take = std::min(iov[i].iov_len, room);
        capped_.push_back({iov[i].iov_base, take});
        room -= take;
    }
    message->msg_iov = capped_.data();
    message->msg_iovlen = capped_.size();
}

Status FramedStream::send_fds(const int *fds, size_t fd_count) {
    uint8_t marker = 0;
    iovec iov{&marker, 1};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFdsPerFrame)];
    msghdr message{};
    message.msg_iov = &iov;
    message.msg_iovlen = 1;
    attach_fds(&message, control, sizeof(control), fds, fd_count);
    ssize_t sent;
    do {
        sent = ::sendmsg(fd_.get(), &message, MSG_NOSIGNAL);
    } while (sent < 0 && errno == EINTR);
    return sent == 1 ? Status::success() : failure("send to", sent < 0 ? errno : 0);
}

Status FramedStream::receive_fds(void *first_bytes, size_t size, bool wait, size_t *got) {
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFdsPerFrame)];
    iovec iov{first_bytes, size};
    msghdr message{};
    message.msg_iov = &iov;
    message.msg_iovlen = 1;
    message.msg_control = control;
    message.msg_controllen = sizeof(control);
    ssize_t n;
    do {
        n = ::recvmsg(fd_.get(), &message, MSG_CMSG_CLOEXEC | (wait ? 0 : MSG_DONTWAIT));
    } while (n < 0 && errno == EINTR);
    if (n < 0) {
        if (!wait && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            return error(Code::bad_request,
                         "receive from " + peer_ + ": a frame announced descriptors that never came");
        }
        return failure("receive from", errno);
    }
    if (n == 0) return failure("receive from", 0);
    for (cmsghdr *cmsg = CMSG_FIRSTHDR(&message); cmsg != nullptr; cmsg = CMSG_NXTHDR(&message, cmsg)) {
        if (cmsg->cmsg_level != SOL_SOCKET || cmsg->cmsg_type != SCM_RIGHTS) continue;
        const size_t count = (cmsg->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < count; ++i) {
            int fd;
            std::memcpy(&fd, CMSG_DATA(cmsg) + i * sizeof(int), sizeof(int));
            received_fds_.emplace_back(fd);
        }
    }
    if (message.msg_flags & MSG_CTRUNC) {
        return error(Code::bad_request, "receive from " + peer_ + ": too many descriptors with one message");
    }
    *got = static_cast<size_t>(n);
    return Status::success();
}

bool FramedStream::reads_ahead() {
    if (reads_ahead_ < 0) {
        int domain = 0;
        socklen_t length = sizeof(domain);
        reads_ahead_ = ::getsockopt(fd_.get(), SOL_SOCKET, SO_DOMAIN, &domain, &length) == 0 &&
                       (domain == AF_INET || domain == AF_INET6 || domain == AF_VSOCK);
    }
    return reads_ahead_ == 1;
}

Status FramedStream::receive_through_inbox(uint8_t *out, size_t size) {
    constexpr size_t kInboxBytes = 64 * 1024;
    const size_t held = std::min(size, inbox_end_ - inbox_at_);
    if (held > 0) std::memcpy(out, inbox_.data() + inbox_at_, held);  // an empty inbox has no data()
    inbox_at_ += held;
    out += held;
    size -= held;
    while (size > 0) {
        // What fills the inbox anyway goes straight to its place.
        const bool direct = size >= kInboxBytes;
        if (!direct && inbox_.size() < kInboxBytes) inbox_.resize(kInboxBytes);
        const ssize_t got = direct ? ::recv(fd_.get(), out, size, 0) : ::recv(fd_.get(), inbox_.data(), kInboxBytes, 0);
        if (got < 0) {
            if (errno == EINTR) continue;
            return failure("receive from", errno);
        }
        if (got == 0) return failure("receive from", 0);
        size_t taken = static_cast<size_t>(got);
        if (!direct) {
            inbox_end_ = taken;
            taken = std::min(taken, size);
            std::memcpy(out, inbox_.data(), taken);
            inbox_at_ = taken;
        }
        out += taken;
        size -= taken;
    }
    return Status::success();
}

Status FramedStream::receive(void *data, size_t size) {
    if (!fd_.valid()) return error(Code::disconnected, "receive from " + peer_ + ": not connected");
    if (tls_) {
        Status status = tls_->read(data, size);
        if (status) return status;
        const bool silent = silence_limit_ms_ > 0 && status.message() == std::strerror(EAGAIN);
        return error(status.code(), "receive from " + peer_ + ": " + (silent ? silence_reason() : status.message()));
    }
    if (ring_ != nullptr) {
        Status status = ring_->read(data, size, fd_.get());
        return status ? status : error(status.code(), "receive from " + peer_ + ": " + status.message());
    }
    if (reads_ahead()) return receive_through_inbox(static_cast<uint8_t *>(data), size);
    auto *out = static_cast<uint8_t *>(data);
    while (size > 0) {
        const ssize_t got = ::recv(fd_.get(), out, size, 0);
        if (got < 0) {
            if (errno == EINTR) continue;
            return failure("receive from", errno);
        }
        if (got == 0) return failure("receive from", 0);
        out += got;
        size -= static_cast<size_t>(got);
    }
    return Status::success();
}

bool FramedStream::input_waiting(int timeout_ms) const {
    if (has_unread_bytes()) return true;
    if (ring_ != nullptr || !fd_.valid()) return false;  // a ring's guest idles the same way
    pollfd ready{fd_.get(), POLLIN, 0};
    return ::poll(&ready, 1, timeout_ms) > 0 && (ready.revents & POLLIN) != 0;
}

Status FramedStream::receive_payload(FrameBuffer *buffer, uint64_t size) {
    if (size > SIZE_MAX) return error(Code::limit_exceeded, "receive from " + peer_ + ": payload too large");
    const auto total = static_cast<size_t>(size);
    size_t received = 0;
    Status status = buffer->resize(0);
    while (status && received < total) {
        const size_t step = FrameBuffer::next_step(received, total);
        status = buffer->resize(step);
        if (status) status = receive(buffer->data() + received, step - received);
        received = step;
    }
    return status;
}

void FramedStream::spin_until_readable() {
    const uint64_t start = SpinPolicy::now_ns();
    const uint64_t spin = socket_spin_.spin_ns();
    pollfd watch{fd_.get(), POLLIN, 0};
    for (uint64_t now = start; now - start < spin; now = SpinPolicy::now_ns()) {
        if (::poll(&watch, 1, 0) != 0) return;  // bytes, an error or a hang-up: the read tells
    }
}

Status FramedStream::receive_header(FrameHeader *header, uint64_t max_payload) {
    const uint64_t start = SpinPolicy::now_ns();
    for (;;) {
        Status status = receive_one_header(header, max_payload);
        if (!status || !heeds_keepalives_ || !(header->flags & protocol::kFrameKeepAlive)) return status;
        if (header->payload_size != 0 || !received_fds_.empty()) {
            return error(Code::bad_request, "receive from " + peer_ + ": a keep-alive that carries more than a header");
        }
        if (wait_cap_ms_ > 0 && SpinPolicy::now_ns() - start >= uint64_t(wait_cap_ms_) * 1000000) {
            return error(Code::disconnected, "receive from " + peer_ + ": the peer kept the session alive for " +
                                                 std::to_string(wait_cap_ms_) + " ms but sent nothing else");
        }
    }
}

Status FramedStream::receive_one_header(FrameHeader *header, uint64_t max_payload) {
    if (!fd_.valid()) return error(Code::disconnected, "receive from " + peer_ + ": not connected");
    received_fds_.clear();
    if (tls_) {
        Status status = receive(header, sizeof(*header));
        if (!status) return status;
    } else if (ring_ != nullptr) {
        Status status = receive(header, sizeof(*header));
        if (!status) return status;
        if (header->flags & protocol::kFrameCarriesFds) {
            header->flags &= static_cast<uint16_t>(~protocol::kFrameCarriesFds);
            uint8_t marker;
            size_t got = 0;
            status = receive_fds(&marker, 1, false, &got);
            if (!status) return status;
        }
    } else if (reads_ahead()) {
        if (inbox_end_ - inbox_at_ >= sizeof(*header)) {
            std::memcpy(header, inbox_.data() + inbox_at_, sizeof(*header));  // came with the last read
            inbox_at_ += sizeof(*header);
        } else {
            const uint64_t start = SpinPolicy::now_ns();
            if (inbox_at_ == inbox_end_) spin_until_readable();
            Status status = receive(header, sizeof(*header));
            if (!status) return status;
            socket_spin_.note_wait(SpinPolicy::now_ns() - start);
        }
    } else {
        const uint64_t start = SpinPolicy::now_ns();
        spin_until_readable();
        // The first read takes any descriptors that came with the frame.
        size_t got = 0;
        Status status = receive_fds(header, sizeof(*header), true, &got);
        if (!status) return status;
        socket_spin_.note_wait(SpinPolicy::now_ns() - start);
        status = receive(reinterpret_cast<uint8_t *>(header) + got, sizeof(*header) - got);
        if (!status) return status;
    }
    if (header->payload_size > max_payload) {
        return error(Code::limit_exceeded, "message of " + std::to_string(header->payload_size) +
                                               " bytes exceeds the limit of " + std::to_string(max_payload));
    }
    return Status::success();
}

Status FramedStream::receive_in_place(uint64_t size, size_t min_piece, const RingChannel::PieceReader &take) {
    if (!fd_.valid()) return error(Code::disconnected, "receive from " + peer_ + ": not connected");
    if (ring_ == nullptr) {
        // Allocated per frame (malloc keeps reusing the same block): an idle session holds none.
        std::vector<uint8_t> piece(static_cast<size_t>(std::min<uint64_t>(size, kFilledPieceBytes)));
        while (size > 0) {
            const size_t n = static_cast<size_t>(std::min<uint64_t>(size, piece.size()));
            Status status = receive(piece.data(), n);
            if (!status) return status;
            take(piece.data(), n);
            size -= n;
        }
        return Status::success();
    }
    Status status = ring_->read_in_place(size, min_piece, take, fd_.get());
    return status ? status : error(status.code(), "receive from " + peer_ + ": " + status.message());
}

Status FramedStream::send_in_place(protocol::FrameHeader header, std::initializer_list<protocol::ByteView> parts,
                                   uint64_t tail_size, size_t min_piece, const RingChannel::PieceWriter &fill) {
    if (!fd_.valid()) return error(Code::disconnected, "send to " + peer_ + ": not connected");
    iovec iov[1 + 4];
    if (parts.size() > 4) return error(Code::error, "send to " + peer_ + ": too many parts");
    size_t count = 0;
    header.payload_size = tail_size;
    iov[count++] = {&header, sizeof(header)};
    for (const protocol::ByteView &part : parts) {
        header.payload_size += part.size;
        if (part.size > 0) iov[count++] = {const_cast<uint8_t *>(part.data), part.size};
    }
    if (ring_ == nullptr) {
        Status status = write_all(iov, count, nullptr, 0);
        return status ? send_filled_pieces(tail_size, fill) : status;
    }
    Status status = ring_->write(iov, count, fd_.get());
    if (status) status = ring_->write_in_place(tail_size, min_piece, fill, fd_.get());
    return status ? status : error(status.code(), "send to " + peer_ + ": " + status.message());
}

Status FramedStream::send_filled_pieces(uint64_t size, const RingChannel::PieceWriter &fill) {
    // Allocated per frame (malloc keeps reusing the same block): an idle session holds none.
    std::vector<uint8_t> piece(static_cast<size_t>(std::min<uint64_t>(size, kFilledPieceBytes)));
    while (size > 0) {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(size, piece.size()));
        fill(piece.data(), n);
        iovec iov{piece.data(), n};
        Status status = write_all(&iov, 1, nullptr, 0);
        if (!status) return status;
        size -= n;
    }
    return Status::success();
}

Status FramedStream::discard(uint64_t size) {
    uint8_t scratch[64 * 1024];
    while (size > 0) {
        const size_t n = size < sizeof(scratch) ? static_cast<size_t>(size) : sizeof(scratch);
        Status status = receive(scratch, n);
        if (!status) return status;
        size -= n;
    }
    return Status::success();
}

}  // namespace ggml_remote
