// Endpoints: where a server listens and a guest connects.
// Written "unix:/path/to.sock", "shm:/path/to.sock", "tcp://host:port" or
// "tls://host:port" (IPv6 hosts in brackets). shm: is a unix socket over which the
// guest also asks for shared-memory buffers; a server's unix socket serves both.
// tls: is TCP with TLS and a pre-shared key; a server started with --tls-psk speaks
// it on its tcp:// listeners.
#pragma once

#include "protocol/status.h"

#include <string>
#include <vector>

namespace ggml_remote {

struct Endpoint {
    enum class Kind { unix_socket, shared_memory, tcp, tls };
    Kind kind = Kind::unix_socket;
    std::string path;  // unix, shared_memory
    std::string host;  // tcp, tls
    int port = 0;      // tcp, tls

    std::string to_string() const;
    bool uses_unix_socket() const { return kind == Kind::unix_socket || kind == Kind::shared_memory; }
    bool uses_tls() const { return kind == Kind::tls; }
    bool is_loopback() const;
};

// Parses one endpoint; the error names the accepted forms.
Status parse_endpoint(const std::string &text, Endpoint *endpoint);
// Parses a comma-separated list (GGML_REMOTE_SERVERS); empty items are skipped.
Status parse_endpoint_list(const std::string &text, std::vector<Endpoint> *endpoints);

}  // namespace ggml_remote
