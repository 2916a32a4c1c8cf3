#include "transport/connection.h"

#include <sys/socket.h>
#include <sys/uio.h>

#include <cerrno>
#include <cstring>

namespace ggml_remote {

using protocol::ByteView;
using protocol::FrameHeader;

Status FramedStream::failure(const char *what, int err) {
    std::string reason = err == 0 ? "connection closed by peer" : std::strerror(err);
    return error(Code::disconnected, std::string(what) + " " + peer_ + ": " + reason);
}

Status FramedStream::send(FrameHeader header, std::initializer_list<ByteView> parts) {
    return send(header, parts, nullptr, 0);
}

Status FramedStream::send(FrameHeader header, std::initializer_list<ByteView> parts, const int *fds,
                          size_t fd_count) {
    if (fd_count > kMaxFdsPerFrame) return error(Code::error, "send: too many descriptors in one frame");
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
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFdsPerFrame)];
    bool fds_pending = fd_count > 0;
    while (count > 0) {
        msghdr message{};
        message.msg_iov = next;
        message.msg_iovlen = count;
        if (fds_pending) {
            // The descriptors ride on the first bytes of the frame.
            std::memset(control, 0, sizeof(control));
            message.msg_control = control;
            message.msg_controllen = CMSG_SPACE(sizeof(int) * fd_count);
            cmsghdr *cmsg = CMSG_FIRSTHDR(&message);
            cmsg->cmsg_level = SOL_SOCKET;
            cmsg->cmsg_type = SCM_RIGHTS;
            cmsg->cmsg_len = CMSG_LEN(sizeof(int) * fd_count);
            std::memcpy(CMSG_DATA(cmsg), fds, sizeof(int) * fd_count);
        }
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

Status FramedStream::receive(void *data, size_t size) {
    if (!fd_.valid()) return error(Code::disconnected, "receive from " + peer_ + ": not connected");
    if (tls_) {
        Status status = tls_->read(data, size);
        if (!status) return error(status.code(), "receive from " + peer_ + ": " + status.message());
        return Status::success();
    }
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

Status FramedStream::receive_header(FrameHeader *header, uint64_t max_payload) {
    if (!fd_.valid()) return error(Code::disconnected, "receive from " + peer_ + ": not connected");
    received_fds_.clear();
    Status status = tls_ ? receive(header, sizeof(*header)) : receive_header_and_fds(header);
    if (!status) return status;
    if (header->payload_size > max_payload) {
        return error(Code::limit_exceeded, "message of " + std::to_string(header->payload_size) +
                                               " bytes exceeds the limit of " + std::to_string(max_payload));
    }
    return Status::success();
}

Status FramedStream::receive_header_and_fds(FrameHeader *header) {
    // The first read takes any descriptors that came with the frame.
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFdsPerFrame)];
    iovec iov{header, sizeof(*header)};
    msghdr message{};
    message.msg_iov = &iov;
    message.msg_iovlen = 1;
    message.msg_control = control;
    message.msg_controllen = sizeof(control);
    ssize_t got;
    do {
        got = ::recvmsg(fd_.get(), &message, MSG_CMSG_CLOEXEC);
    } while (got < 0 && errno == EINTR);
    if (got < 0) return failure("receive from", errno);
    if (got == 0) return failure("receive from", 0);
    for (cmsghdr *cmsg = CMSG_FIRSTHDR(&message); cmsg != nullptr; cmsg = CMSG_NXTHDR(&message, cmsg)) {
        if (cmsg->cmsg_level != SOL_SOCKET || cmsg->cmsg_type != SCM_RIGHTS) continue;
        const size_t n = (cmsg->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < n; ++i) {
            int fd;
            std::memcpy(&fd, CMSG_DATA(cmsg) + i * sizeof(int), sizeof(int));
            received_fds_.emplace_back(fd);
        }
    }
    if (message.msg_flags & MSG_CTRUNC) {
        return error(Code::bad_request, "receive from " + peer_ + ": too many descriptors with one message");
    }
    return receive(reinterpret_cast<uint8_t *>(header) + got, sizeof(*header) - static_cast<size_t>(got));
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
