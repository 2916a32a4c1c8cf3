#include "transport/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
// After sys/socket.h, which it needs.
#include <linux/vm_sockets.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace ggml_remote {

namespace {

std::string errno_text(int err) { return std::strerror(err); }

sockaddr_un unix_address(const std::string &path) {
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
    return address;
}

// Waits for a non-blocking connect to finish.
int finish_connect(int fd, int timeout_ms) {
    const int ready = poll_one(fd, POLLOUT, timeout_ms);
    if (ready == 0) return ETIMEDOUT;
    if (ready < 0) return errno;
    int err = 0;
    socklen_t len = sizeof(err);
    ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    return err;
}

// Connects the non-blocking stream socket `fd` within `timeout_ms`, then makes it
// blocking and tuned (tune_stream_socket); 0 or the errno that failed it.
int connect_stream_within(int fd, const sockaddr *address, socklen_t length, int timeout_ms) {
    if (::connect(fd, address, length) != 0) {
        const int err = errno == EINPROGRESS ? finish_connect(fd, timeout_ms) : errno;
        if (err != 0) return err;
    }
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    tune_stream_socket(fd);
    return 0;
}

Status connect_unix(const Endpoint &endpoint, UniqueFd *out) {
    UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd.valid()) return error(Code::disconnected, "socket: " + errno_text(errno));
    sockaddr_un address = unix_address(endpoint.path);
    if (::connect(fd.get(), reinterpret_cast<sockaddr *>(&address), sizeof(address)) != 0) {
        const int err = errno;
        return error(Code::disconnected, "connect " + endpoint.to_string() + ": " + errno_text(err) +
                                             " (is ggml-remote-server running and listening there?)");
    }
    *out = std::move(fd);
    return Status::success();
}

Status connect_tcp(const Endpoint &endpoint, int timeout_ms, UniqueFd *out) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo *found = nullptr;
    const std::string port = std::to_string(endpoint.port);
    const int rc = ::getaddrinfo(endpoint.host.c_str(), port.c_str(), &hints, &found);
    if (rc != 0) {
        return error(Code::disconnected,
                     "connect " + endpoint.to_string() + ": cannot resolve host: " + gai_strerror(rc));
    }
    int last_error = ECONNREFUSED;
    for (addrinfo *a = found; a != nullptr; a = a->ai_next) {
        UniqueFd fd(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol));
        if (!fd.valid()) {
            last_error = errno;
            continue;
        }
        const int err = connect_stream_within(fd.get(), a->ai_addr, a->ai_addrlen, timeout_ms);
        if (err != 0) {
            last_error = err;
            continue;
        }
        ::freeaddrinfo(found);
        *out = std::move(fd);
        return Status::success();
    }
    ::freeaddrinfo(found);
    return error(Code::disconnected, "connect " + endpoint.to_string() + ": " + errno_text(last_error) +
                                         " (is ggml-remote-server running and listening there?)");
}

sockaddr_vm vsock_address(uint32_t cid, uint32_t port) {
    sockaddr_vm address{};
    address.svm_family = AF_VSOCK;
    address.svm_cid = cid;
    address.svm_port = port;
    return address;
}

// Why a vsock call failed, in words a user can act on.
std::string vsock_hint(int err, bool listening) {
    if (err == EADDRNOTAVAIL && listening) return " (that CID is not this machine's: listen on vsock://ANY:PORT)";
    if (err == EAFNOSUPPORT || err == ENODEV) {
        return " (no vsock transport here: a guest needs its VM's virtio-vsock device and the "
               "vmw_vsock_virtio_transport module, a host the vhost_vsock module; microVMs: see docs/MICROVMS.md)";
    }
    if (err == ECONNRESET || err == ECONNREFUSED) return " (is ggml-remote-server listening on that vsock port?)";
    return "";
}

Status connect_vsock(const Endpoint &endpoint, int timeout_ms, UniqueFd *out) {
    const std::string name = "connect " + endpoint.to_string() + ": ";
    if (endpoint.cid == Endpoint::kAnyCid) {
        return error(Code::disconnected, name + "ANY is for listening; a guest connects to CID 2, its host");
    }
    UniqueFd fd(::socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    int err = fd.valid() ? 0 : errno;
    if (err != 0) return error(Code::disconnected, name + errno_text(err) + vsock_hint(err, false));
    const sockaddr_vm address = vsock_address(endpoint.cid, endpoint.vsock_port);
    err = connect_stream_within(fd.get(), reinterpret_cast<const sockaddr *>(&address), sizeof(address), timeout_ms);
    if (err != 0) return error(Code::disconnected, name + errno_text(err) + vsock_hint(err, false));
    *out = std::move(fd);
    return Status::success();
}

Status listen_vsock(Endpoint *endpoint, UniqueFd *out) {
    const std::string name = "listen " + endpoint->to_string() + ": ";
    UniqueFd fd(::socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC, 0));
    const sockaddr_vm address = vsock_address(endpoint->cid, endpoint->vsock_port);
    if (!fd.valid() || ::bind(fd.get(), reinterpret_cast<const sockaddr *>(&address), sizeof(address)) != 0 ||
        ::listen(fd.get(), 64) != 0) {
        const int err = errno;
        return error(Code::error, name + errno_text(err) + vsock_hint(err, true));
    }
    *out = std::move(fd);
    return Status::success();
}

Status listen_unix(Endpoint *endpoint, UniqueFd *out) {
    struct stat st{};
    if (::lstat(endpoint->path.c_str(), &st) == 0) {
        if (!S_ISSOCK(st.st_mode)) {
            return error(Code::error, "listen " + endpoint->to_string() + ": the path exists and is not a socket");
        }
        UniqueFd probe;
        if (connect_unix(*endpoint, &probe).ok()) {
            return error(Code::error,
                         "listen " + endpoint->to_string() + ": another server is already listening there");
        }
        ::unlink(endpoint->path.c_str());  // stale socket of a server that exited
    }
    UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd.valid()) return error(Code::error, "socket: " + errno_text(errno));
    sockaddr_un address = unix_address(endpoint->path);
    if (::bind(fd.get(), reinterpret_cast<sockaddr *>(&address), sizeof(address)) != 0 || ::listen(fd.get(), 64) != 0) {
        return error(Code::error, "listen " + endpoint->to_string() + ": " + errno_text(errno));
    }
    *out = std::move(fd);
    return Status::success();
}

// How a log line names the peer of an accepted connection.
std::string describe_peer(int fd, const Endpoint &endpoint, const sockaddr_storage &address, socklen_t len) {
    if (endpoint.uses_unix_socket()) {
        ucred cred{};
        socklen_t cred_len = sizeof(cred);
        if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cred_len) != 0) return endpoint.to_string();
        return endpoint.to_string() + " pid " + std::to_string(cred.pid) + " uid " + std::to_string(cred.uid);
    }
    if (address.ss_family == AF_VSOCK) {
        const auto &vm = reinterpret_cast<const sockaddr_vm &>(address);
        return "vsock://" + std::to_string(vm.svm_cid) + ":" + std::to_string(vm.svm_port);
    }
    char host[NI_MAXHOST] = "?", service[NI_MAXSERV] = "?";
    ::getnameinfo(reinterpret_cast<const sockaddr *>(&address), len, host, sizeof(host), service, sizeof(service),
                  NI_NUMERICHOST | NI_NUMERICSERV);
    return std::string("tcp://") + host + ":" + service;
}

}  // namespace

bool adopt_listening_socket(int fd, InheritedSocket *socket) {
    ::fcntl(fd, F_SETFD, FD_CLOEXEC);  // workers must not inherit it
    sockaddr_storage address{};
    socklen_t length = sizeof(address);
    if (::getsockname(fd, reinterpret_cast<sockaddr *>(&address), &length) != 0) return false;
    if (address.ss_family == AF_UNIX) {
        socket->endpoint.kind = Endpoint::Kind::unix_socket;
        socket->endpoint.path = reinterpret_cast<sockaddr_un *>(&address)->sun_path;
    } else if (address.ss_family == AF_INET || address.ss_family == AF_INET6) {
        char host[NI_MAXHOST] = "?", service[NI_MAXSERV] = "0";
        ::getnameinfo(reinterpret_cast<sockaddr *>(&address), length, host, sizeof(host), service, sizeof(service),
                      NI_NUMERICHOST | NI_NUMERICSERV);
        socket->endpoint.kind = Endpoint::Kind::tcp;
        socket->endpoint.host = host;
        // NI_NUMERICSERV: the port's digits, or the "0" it started as.
        socket->endpoint.port = static_cast<int>(std::strtol(service, nullptr, 10));
    } else if (address.ss_family == AF_VSOCK) {
        const auto &vm = reinterpret_cast<const sockaddr_vm &>(address);
        socket->endpoint.kind = Endpoint::Kind::vsock;
        socket->endpoint.cid = vm.svm_cid;
        socket->endpoint.vsock_port = vm.svm_port;
    } else {
        return false;
    }
    socket->fd.reset(fd);
    return true;
}

std::vector<InheritedSocket> adopt_listening_sockets(int count) {
    std::vector<InheritedSocket> sockets;
    constexpr int kFirstFd = 3;  // systemd's SD_LISTEN_FDS_START
    for (int fd = kFirstFd; fd < kFirstFd + count; ++fd) {
        InheritedSocket socket;
        if (adopt_listening_socket(fd, &socket)) sockets.push_back(std::move(socket));
    }
    return sockets;
}

void tune_stream_socket(int fd) {
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));  // fails harmlessly on unix sockets
    if (::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one)) == 0) {
        // A peer that vanished without a FIN (cable, VM killed) is noticed within a minute.
        int idle = 30, interval = 5, count = 6;
        ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
        ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof(interval));
        ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof(count));
    }
}

namespace {

int socket_option(int fd, int option) {
    int value = -1;
    socklen_t length = sizeof(value);
    return ::getsockopt(fd, SOL_SOCKET, option, &value, &length) == 0 ? value : -1;
}

}  // namespace

Status expect_connected_tcp(int fd) {
    struct stat status{};
    if (::fstat(fd, &status) != 0) return error(Code::bad_request, "not an open descriptor: " + errno_text(errno));
    if (!S_ISSOCK(status.st_mode)) return error(Code::bad_request, "not a socket but a file of another kind");
    const int domain = socket_option(fd, SO_DOMAIN);
    if (domain != AF_INET && domain != AF_INET6) {
        return error(Code::bad_request, "a socket of address family " + std::to_string(domain) + ", not TCP");
    }
    if (socket_option(fd, SO_TYPE) != SOCK_STREAM || socket_option(fd, SO_PROTOCOL) != IPPROTO_TCP) {
        return error(Code::bad_request, "an IP socket that is not TCP");
    }
    if (socket_option(fd, SO_ACCEPTCONN) != 0) return error(Code::bad_request, "a listening socket, not a connection");
    sockaddr_storage peer{};
    socklen_t length = sizeof(peer);
    if (::getpeername(fd, reinterpret_cast<sockaddr *>(&peer), &length) != 0) {
        return error(Code::bad_request, "a TCP socket that is not connected");
    }
    return Status::success();
}

Status connect_endpoint(const Endpoint &endpoint, int timeout_ms, UniqueFd *fd) {
    if (endpoint.uses_unix_socket()) return connect_unix(endpoint, fd);
    if (endpoint.is_vsock()) return connect_vsock(endpoint, timeout_ms, fd);
    return connect_tcp(endpoint, timeout_ms, fd);
}

Status listen_endpoint(Endpoint *endpoint, UniqueFd *out) {
    if (endpoint->uses_unix_socket()) return listen_unix(endpoint, out);
    if (endpoint->is_vsock()) return listen_vsock(endpoint, out);

    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    addrinfo *found = nullptr;
    const std::string port = std::to_string(endpoint->port);
    const int rc = ::getaddrinfo(endpoint->host.c_str(), port.c_str(), &hints, &found);
    if (rc != 0) return error(Code::error, "listen " + endpoint->to_string() + ": " + gai_strerror(rc));
    std::string failure = "no address";
    for (addrinfo *a = found; a != nullptr; a = a->ai_next) {
        UniqueFd fd(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
        if (!fd.valid()) continue;
        int one = 1;
        ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (::bind(fd.get(), a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd.get(), 64) != 0) {
            failure = errno_text(errno);
            continue;
        }
        sockaddr_storage bound{};
        socklen_t len = sizeof(bound);
        if (::getsockname(fd.get(), reinterpret_cast<sockaddr *>(&bound), &len) == 0) {
            endpoint->port = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6 *>(&bound)->sin6_port
                                                               : reinterpret_cast<sockaddr_in *>(&bound)->sin_port);
        }
        ::freeaddrinfo(found);
        *out = std::move(fd);
        return Status::success();
    }
    ::freeaddrinfo(found);
    return error(Code::error, "listen " + endpoint->to_string() + ": " + failure);
}

Status accept_connection(int listen_fd, const Endpoint &endpoint, UniqueFd *out, std::string *peer) {
    sockaddr_storage address{};
    socklen_t len = sizeof(address);
    UniqueFd fd(::accept4(listen_fd, reinterpret_cast<sockaddr *>(&address), &len, SOCK_CLOEXEC));
    if (!fd.valid()) return error(Code::error, "accept on " + endpoint.to_string() + ": " + errno_text(errno));
    *peer = describe_peer(fd.get(), endpoint, address, len);
    tune_stream_socket(fd.get());
    *out = std::move(fd);
    return Status::success();
}

int poll_one(int fd, short events, int timeout_ms) {
    pollfd p{fd, events, 0};
    int ready;
    do {
        ready = ::poll(&p, 1, timeout_ms);
    } while (ready < 0 && errno == EINTR);
    return ready;
}

int ms_until(std::chrono::steady_clock::time_point deadline) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    return static_cast<int>(std::clamp<int64_t>(left.count(), 0, INT_MAX));
}

bool write_fully(int fd, const void *data, size_t size) {
    const auto *bytes = static_cast<const uint8_t *>(data);
    while (size > 0) {
        const ssize_t done = ::write(fd, bytes, size);
        if (done < 0 && errno == EINTR) continue;
        if (done <= 0) return false;
        bytes += done;
        size -= static_cast<size_t>(done);
    }
    return true;
}

void attach_fds(msghdr *message, char *control, size_t control_size, const int *fds, size_t count) {
    std::memset(control, 0, control_size);
    message->msg_control = control;
    message->msg_controllen = CMSG_SPACE(sizeof(int) * count);
    cmsghdr *cmsg = CMSG_FIRSTHDR(message);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(sizeof(int) * count);
    std::memcpy(CMSG_DATA(cmsg), fds, sizeof(int) * count);
}

}  // namespace ggml_remote
