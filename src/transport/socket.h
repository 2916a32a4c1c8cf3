// Stream sockets for the socket transports: unix, TCP and vsock.
#pragma once

#include <sys/socket.h>

#include <chrono>
#include <string>
#include <vector>

#include "protocol/status.h"
#include "transport/endpoint.h"
#include "transport/unique_fd.h"

namespace ggml_remote {

// Connects to an endpoint. The error says what failed and hints at the cause.
Status connect_endpoint(const Endpoint &endpoint, int timeout_ms, UniqueFd *fd);

// Listens on an endpoint. A stale unix socket file (nobody listening) is replaced;
// a live one is an error. For tcp port 0, the chosen port is written back.
Status listen_endpoint(Endpoint *endpoint, UniqueFd *fd);

// Accepts one connection; `peer` describes the other side for log lines.
Status accept_connection(int listen_fd, const Endpoint &endpoint, UniqueFd *fd, std::string *peer);

// A listening socket handed over by systemd socket activation, with the endpoint
// it listens on.
struct InheritedSocket {
    Endpoint endpoint;
    UniqueFd fd;
};
// Takes the `count` listening sockets systemd passed from descriptor 3 on (the
// server reads LISTEN_FDS and checks LISTEN_PID), made close-on-exec.
std::vector<InheritedSocket> adopt_listening_sockets(int count);
// Takes one inherited listening socket `fd` (made close-on-exec); false when it is
// no unix, TCP or vsock socket (then `fd` is left as it is).
bool adopt_listening_socket(int fd, InheritedSocket *socket);

// Per-connection socket options: no Nagle delay, keep-alive probes on TCP.
void tune_stream_socket(int fd);

// Whether `fd` is a connected TCP socket (IPv4 or IPv6): the only kind of
// descriptor a peer-link connection may be. Anything else (a pipe, a memfd, an
// O_PATH descriptor, a unix or listening socket, /dev/null) is an error that says
// what it is: a descriptor another process hands on is checked before it is used.
Status expect_connected_tcp(int fd);

// poll() on one descriptor for `events`, retried when a signal interrupts it:
// 1 when ready, 0 on timeout (-1 waits forever), -1 with errno on failure.
int poll_one(int fd, short events, int timeout_ms);
// Milliseconds left until `deadline` (rounded up), at least 0: a poll timeout.
int ms_until(std::chrono::steady_clock::time_point deadline);

// Writes all `size` bytes to `fd` (a file, a pipe), again after a signal or a short
// write; false with errno when a write fails or writes nothing.
bool write_fully(int fd, const void *data, size_t size);

// Puts `count` descriptors on `message` (SCM_RIGHTS), in `control`, which must
// hold CMSG_SPACE(sizeof(int) * count) bytes.
void attach_fds(msghdr *message, char *control, size_t control_size, const int *fds, size_t count);

}  // namespace ggml_remote
