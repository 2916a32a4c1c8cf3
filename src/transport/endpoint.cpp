#include "transport/endpoint.h"

#include <sys/un.h>

#include <cstdlib>

namespace ggml_remote {

namespace {

Status bad_endpoint(const std::string &text, const std::string &why) {
    return error(Code::bad_request, "invalid endpoint '" + text + "': " + why +
                                        " (expected unix:/path/to.sock, shm:/path/to.sock, tcp://host:port or tls://host:port)");
}

}  // namespace

std::string Endpoint::to_string() const {
    if (kind == Kind::unix_socket) return "unix:" + path;
    if (kind == Kind::shared_memory) return "shm:" + path;
    const bool v6 = host.find(':') != std::string::npos;
    return (kind == Kind::tls ? "tls://" : "tcp://") + (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

bool Endpoint::is_loopback() const {
    if (uses_unix_socket()) return true;
    return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

Status parse_endpoint(const std::string &text, Endpoint *endpoint) {
    Endpoint result;
    const bool shm = text.rfind("shm:", 0) == 0;
    if (text.rfind("unix:", 0) == 0 || shm) {
        result.kind = shm ? Endpoint::Kind::shared_memory : Endpoint::Kind::unix_socket;
        result.path = text.substr(shm ? 4 : 5);
        if (result.path.empty()) return bad_endpoint(text, "empty socket path");
        if (result.path.size() >= sizeof(sockaddr_un{}.sun_path)) return bad_endpoint(text, "socket path too long");
    } else if (text.rfind("tcp://", 0) == 0 || text.rfind("tls://", 0) == 0) {
        result.kind = text.rfind("tls://", 0) == 0 ? Endpoint::Kind::tls : Endpoint::Kind::tcp;
        std::string rest = text.substr(6);
        std::string port_text;
        if (!rest.empty() && rest[0] == '[') {
            const size_t close = rest.find(']');
            if (close == std::string::npos || close + 1 >= rest.size() || rest[close + 1] != ':') {
                return bad_endpoint(text, "bad [IPv6]:port");
            }
            result.host = rest.substr(1, close - 1);
            port_text = rest.substr(close + 2);
        } else {
            const size_t colon = rest.rfind(':');
            if (colon == std::string::npos) return bad_endpoint(text, "missing port");
            result.host = rest.substr(0, colon);
            port_text = rest.substr(colon + 1);
        }
        if (result.host.empty()) return bad_endpoint(text, "empty host");
        char *end = nullptr;
        const long port = std::strtol(port_text.c_str(), &end, 10);
        if (port_text.empty() || *end != '\0' || port < 0 || port > 65535) {
            return bad_endpoint(text, "port must be a number from 0 to 65535");
        }
        result.port = static_cast<int>(port);
    } else {
        return bad_endpoint(text, "unknown scheme");
    }
    *endpoint = result;
    return Status::success();
}

Status parse_endpoint_list(const std::string &text, std::vector<Endpoint> *endpoints) {
    size_t start = 0;
    while (start <= text.size()) {
        size_t comma = text.find(',', start);
        if (comma == std::string::npos) comma = text.size();
        std::string item = text.substr(start, comma - start);
        while (!item.empty() && item.front() == ' ') item.erase(item.begin());
        while (!item.empty() && item.back() == ' ') item.pop_back();
        if (!item.empty()) {
            Endpoint endpoint;
            Status status = parse_endpoint(item, &endpoint);
            if (!status) return status;
            endpoints->push_back(endpoint);
        }
        start = comma + 1;
    }
    return Status::success();
}

}  // namespace ggml_remote
