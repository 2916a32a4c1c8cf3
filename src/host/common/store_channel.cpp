#include "host/common/store_channel.h"

#include <poll.h>
#include <sys/socket.h>
#include <time.h>

#include <cstring>

#include "transport/socket.h"

namespace ggml_remote::host::store_channel {

namespace {

constexpr size_t kMaxFds = 4;

}  // namespace

bool send_message(int fd, const void *data, size_t size, const int *fds, size_t count) {
    if (count > kMaxFds) return false;
    iovec part{const_cast<void *>(data), size};
    msghdr message{};
    message.msg_iov = &part;
    message.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)];
    if (count > 0) attach_fds(&message, control, sizeof(control), fds, count);
    ssize_t sent;
    do {
        sent = ::sendmsg(fd, &message, MSG_NOSIGNAL);
    } while (sent < 0 && errno == EINTR);
    return sent == static_cast<ssize_t>(size);
}

bool receive_message(int fd, void *data, size_t size, std::vector<UniqueFd> *fds, size_t max_fds, int timeout_ms) {
    if (timeout_ms >= 0 && poll_one(fd, POLLIN, timeout_ms) <= 0) return false;
    iovec part{data, size};
    msghdr message{};
    message.msg_iov = &part;
    message.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)];
    message.msg_control = control;
    message.msg_controllen = sizeof(control);
    ssize_t got;
    do {
        got = ::recvmsg(fd, &message, MSG_CMSG_CLOEXEC);
    } while (got < 0 && errno == EINTR);
    std::vector<UniqueFd> received;
    for (cmsghdr *cmsg = CMSG_FIRSTHDR(&message); got >= 0 && cmsg != nullptr; cmsg = CMSG_NXTHDR(&message, cmsg)) {
        if (cmsg->cmsg_level != SOL_SOCKET || cmsg->cmsg_type != SCM_RIGHTS) continue;
        const size_t n = (cmsg->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < n; ++i) {
            int received_fd = -1;
            std::memcpy(&received_fd, CMSG_DATA(cmsg) + i * sizeof(int), sizeof(int));
            received.emplace_back(received_fd);  // closed unless kept
        }
    }
    const bool truncated = (message.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0;
    if (got != static_cast<ssize_t>(size) || truncated || received.size() > max_fds) return false;
    if (fds != nullptr) *fds = std::move(received);
    return true;
}

NoSigpipe::NoSigpipe() {
    sigset_t pipe;
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    ::pthread_sigmask(SIG_BLOCK, &pipe, &previous_);
}

NoSigpipe::~NoSigpipe() {
    sigset_t pipe, pending;
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    sigemptyset(&pending);
    // Only a SIGPIPE blocked by us is taken (one the thread had blocked stays).
    if (!sigismember(&previous_, SIGPIPE) && ::sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE)) {
        const timespec now{0, 0};
        (void)::sigtimedwait(&pipe, nullptr, &now);
    }
    ::pthread_sigmask(SIG_SETMASK, &previous_, nullptr);
}

}  // namespace ggml_remote::host::store_channel
