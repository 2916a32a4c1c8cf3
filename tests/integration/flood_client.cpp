// flood_client: connects to a ggml-remote-server and hangs up at once, again and
// again, for a number of seconds: the connection flood of issue 40 (class 2), which
// an attacker runs to delay every other peer's guest. Several connections are in
// flight at once, so the flood is as fast as the kernel's accept queue allows.
//
// usage: ggml-remote-flood-client ENDPOINT SECONDS [--from ADDRESS]
//   ENDPOINT  unix:PATH or tcp://HOST:PORT (a TLS listener is flooded over tcp://:
//             these connections never start a handshake)
//   --from    connect to a tcp:// endpoint from this local IPv4 address (127.0.0.2
//             plays another peer than 127.0.0.1)
// prints "flood: N connections in S s" and exits 0; 2 on a usage error.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "transport/endpoint.h"

using namespace ggml_remote;

namespace {

[[noreturn]] void usage(const std::string &why) {
    std::fprintf(stderr, "flood_client: %s\nusage: flood_client ENDPOINT SECONDS [--from ADDRESS]\n", why.c_str());
    std::exit(2);
}

struct Target {
    sockaddr_storage address{};
    socklen_t length = 0;
    sockaddr_in from{};
    bool bind_from = false;
};

Target target_of(const Endpoint &endpoint, const std::string &from) {
    Target target;
    if (endpoint.kind == Endpoint::Kind::unix_socket) {
        auto *un = reinterpret_cast<sockaddr_un *>(&target.address);
        un->sun_family = AF_UNIX;
        std::snprintf(un->sun_path, sizeof(un->sun_path), "%s", endpoint.path.c_str());
        target.length = sizeof(sockaddr_un);
        return target;
    }
    if (endpoint.kind != Endpoint::Kind::tcp) usage("ENDPOINT must be unix:PATH or tcp://HOST:PORT");
    auto *in = reinterpret_cast<sockaddr_in *>(&target.address);
    in->sin_family = AF_INET;
    in->sin_port = htons(static_cast<uint16_t>(endpoint.port));
    const std::string host = endpoint.host == "localhost" ? "127.0.0.1" : endpoint.host;
    if (::inet_pton(AF_INET, host.c_str(), &in->sin_addr) != 1) usage("the host must be an IPv4 address");
    target.length = sizeof(sockaddr_in);
    if (!from.empty()) {
        target.from.sin_family = AF_INET;
        if (::inet_pton(AF_INET, from.c_str(), &target.from.sin_addr) != 1) usage("--from must be an IPv4 address");
        target.bind_from = true;
    }
    return target;
}

// A connection on its way (non-blocking), or -1.
int start_connection(const Target &target) {
    const int fd = ::socket(target.address.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    if (target.address.ss_family == AF_INET) {
        // A reset instead of a close: no TIME_WAIT, so the flood never runs out of ports.
        const linger reset{1, 0};
        (void)::setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
    }
    if (target.bind_from) {
        // The port is chosen at connect, for the whole address pair: ports the
        // server's side still holds in TIME_WAIT stay usable towards other pairs.
        const int late_port = 1;
        (void)::setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &late_port, sizeof(late_port));
        if (::bind(fd, reinterpret_cast<const sockaddr *>(&target.from), sizeof(target.from)) != 0) {
            ::close(fd);
            return -1;
        }
    }
    if (::connect(fd, reinterpret_cast<const sockaddr *>(&target.address), target.length) != 0 &&
        errno != EINPROGRESS) {
        ::close(fd);
        return -1;
    }
    return fd;
}

}  // namespace

int main(int argc, char **argv) {
    if (argc < 3) usage("missing arguments");
    Endpoint endpoint;
    if (!parse_endpoint(argv[1], &endpoint).ok()) usage(std::string("not an endpoint: ") + argv[1]);
    const double seconds = std::atof(argv[2]);
    if (seconds <= 0) usage("SECONDS must be positive");
    std::string from;
    for (int i = 3; i < argc; ++i) {
        if (std::strcmp(argv[i], "--from") == 0 && i + 1 < argc) {
            from = argv[++i];
        } else {
            usage(std::string("unknown argument: ") + argv[i]);
        }
    }
    const Target target = target_of(endpoint, from);
    constexpr size_t kInFlight = 32;
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    uint64_t connections = 0;
    std::vector<pollfd> pending;
    while (std::chrono::steady_clock::now() < end) {
        while (pending.size() < kInFlight) {
            const int fd = start_connection(target);
            if (fd < 0) break;
            pending.push_back({fd, POLLOUT, 0});
        }
        if (pending.empty()) continue;  // the kernel refused new sockets for now: try again
        (void)::poll(pending.data(), pending.size(), 10);
        for (size_t i = 0; i < pending.size();) {
            if (pending[i].revents == 0) {
                ++i;
                continue;
            }
            // Connected (or refused): hang up at once, as the attacker does.
            if ((pending[i].revents & (POLLERR | POLLHUP)) == 0) ++connections;
            ::close(pending[i].fd);
            pending[i] = pending.back();
            pending.pop_back();
        }
    }
    for (const pollfd &entry : pending) ::close(entry.fd);
    std::printf("flood: %llu connections in %.1f s\n", static_cast<unsigned long long>(connections), seconds);
    return 0;
}
