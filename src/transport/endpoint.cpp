#include "transport/endpoint.h"

#include <sys/un.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>

namespace ggml_remote {

namespace {

Status bad_endpoint(const std::string &text, const std::string &why) {
    return error(
        Code::bad_request,
        "invalid endpoint '" + text + "': " + why +
            " (expected unix:/path/to.sock, shm:/path/to.sock, tcp://host:port (or host:port), "
            "tls://host:port[?psk-file=/path[&psk-identity=NAME]], "
            "vsock://CID:PORT (CID a number or, listening, ANY), ivshmem:[PCI address | file:/path] or, listening, "
            "ivshmem:/path,size=BYTES[,reuse][,group=NAME])");
}

// "64M", "1G", "4096": bytes, with an optional K, M or G (powers of 1024).
bool parse_size(const std::string &text, uint64_t *size) {
    char *end = nullptr;
    const unsigned long long number = std::strtoull(text.c_str(), &end, 10);
    if (text.empty() || end == text.c_str() || text[0] == '-') return false;
    const std::string unit(end);
    int shift = 0;
    if (unit == "K" || unit == "k")
        shift = 10;
    else if (unit == "M" || unit == "m")
        shift = 20;
    else if (unit == "G" || unit == "g")
        shift = 30;
    else if (!unit.empty())
        return false;
    if (number == 0 || number > (~0ull >> shift)) return false;
    *size = static_cast<uint64_t>(number) << shift;
    return true;
}

// "0000:00:04.0": domain, bus, device and function, in hex, as sysfs names them.
bool is_pci_address(const std::string &text) {
    static const char kShape[] = "hhhh:hh:hh.h";
    if (text.size() != sizeof(kShape) - 1) return false;
    for (size_t i = 0; i < text.size(); ++i) {
        const bool hex = std::isxdigit(static_cast<unsigned char>(text[i])) != 0;
        if (kShape[i] == 'h' ? !hex : text[i] != kShape[i]) return false;
    }
    return true;
}

// The options after a server's region path: size=BYTES, reuse, group=NAME.
Status parse_ivshmem_options(const std::string &text, const std::string &options, Endpoint *result) {
    size_t start = 0;
    while (start < options.size()) {
        const size_t end = std::min(options.find(',', start), options.size());
        const std::string option = options.substr(start, end - start);
        start = end + 1;
        if (option.rfind("size=", 0) == 0) {
            if (!parse_size(option.substr(5), &result->size)) {
                return bad_endpoint(text, "size must be a number of bytes, with K, M or G");
            }
        } else if (option == "reuse") {
            result->reuse = true;
        } else if (option.rfind("group=", 0) == 0 && option.size() > 6) {
            result->group = option.substr(6);
        } else {
            return bad_endpoint(text, "unknown ivshmem option '" + option + "' (size=, reuse, group=)");
        }
    }
    return Status::success();
}

// Digits only (no sign, space or hex), at most `max`.
bool parse_decimal(const std::string &text, uint64_t max, uint64_t *value) {
    if (text.empty() || text.size() > 10) return false;
    uint64_t number = 0;
    for (const char c : text) {
        if (c < '0' || c > '9') return false;
        number = number * 10 + static_cast<uint64_t>(c - '0');
    }
    if (number > max) return false;
    *value = number;
    return true;
}

// "vsock://CID:PORT": CID 0 to 4294967294 or ANY, port 0 to 4294967294 (the
// all-ones values are the kernel's wildcards).
Status parse_vsock(const std::string &text, Endpoint *result) {
    const std::string rest = text.substr(8);
    const size_t colon = rest.find(':');
    if (colon == std::string::npos) return bad_endpoint(text, "missing port");
    const std::string cid = rest.substr(0, colon);
    uint64_t number = 0;
    if (cid == "ANY") {
        result->cid = Endpoint::kAnyCid;
    } else if (parse_decimal(cid, Endpoint::kAnyCid - 1, &number)) {
        result->cid = static_cast<uint32_t>(number);
    } else {
        return bad_endpoint(text, "the vsock CID must be a number from 0 to 4294967294, or ANY");
    }
    if (!parse_decimal(rest.substr(colon + 1), 0xFFFFFFFEu, &number)) {
        return bad_endpoint(text, "the vsock port must be a number from 0 to 4294967294");
    }
    result->kind = Endpoint::Kind::vsock;
    result->vsock_port = static_cast<uint32_t>(number);
    return Status::success();
}

Status parse_ivshmem(const std::string &text, Endpoint *result) {
    result->kind = Endpoint::Kind::ivshmem;
    std::string rest = text.substr(8);
    const size_t comma = rest.find(',');
    if (comma != std::string::npos) {
        Status status = parse_ivshmem_options(text, rest.substr(comma + 1), result);
        if (!status) return status;
        rest.resize(comma);
    }
    if (rest.rfind("file:", 0) == 0) rest.erase(0, 5);
    if (is_pci_address(rest)) {
        result->pci_address = rest;
    } else if (!rest.empty()) {
        if (rest[0] != '/') return bad_endpoint(text, "an ivshmem path must be absolute");
        if (rest.find('\0') != std::string::npos) return bad_endpoint(text, "NUL in the path");
        result->path = rest;
    }
    if (result->size != 0 && result->path.empty()) return bad_endpoint(text, "size= goes with a file path");
    if ((result->reuse || !result->group.empty()) && result->size == 0) {
        return bad_endpoint(text, "reuse and group= go with a server's region (path,size=...)");
    }
    return Status::success();
}

// A key identity as psktool writes it: visible ASCII, no separators of ours.
bool is_psk_identity(const std::string &text) {
    constexpr size_t kMaxIdentity = 255;
    if (text.empty() || text.size() > kMaxIdentity) return false;
    for (char c : text) {
        if (c <= ' ' || c > '~' || c == ':' || c == '&' || c == ',') return false;
    }
    return true;
}

// The options after a tls:// endpoint's '?': psk-file=PATH and psk-identity=NAME,
// joined by '&', each at most once.
Status parse_tls_options(const std::string &text, const std::string &options, Endpoint *result) {
    size_t start = 0;
    while (start <= options.size()) {
        const size_t end = std::min(options.find('&', start), options.size());
        const std::string option = options.substr(start, end - start);
        start = end + 1;
        const size_t equals = option.find('=');
        const std::string name = option.substr(0, equals);
        const std::string value = equals == std::string::npos ? "" : option.substr(equals + 1);
        std::string *slot = name == "psk-file"       ? &result->psk_file
                            : name == "psk-identity" ? &result->psk_identity
                                                     : nullptr;
        if (slot == nullptr) return bad_endpoint(text, "unknown option '" + name + "' (psk-file=, psk-identity=)");
        if (!slot->empty()) return bad_endpoint(text, name + "= given twice");
        if (value.empty()) return bad_endpoint(text, name + "= needs a value");
        *slot = value;
    }
    if (result->psk_file.empty()) return bad_endpoint(text, "psk-identity= goes with psk-file=");
    if (result->psk_file[0] != '/') return bad_endpoint(text, "psk-file= must be an absolute path");
    if (!result->psk_identity.empty() && !is_psk_identity(result->psk_identity)) {
        return bad_endpoint(text, "psk-identity= must be 1 to 255 visible characters, without ':', '&' or ','");
    }
    return Status::success();
}

// "host:port" or "[v6]:port", with the options after '?' (tls:// only).
Status parse_host_port(const std::string &text, std::string rest, Endpoint *result) {
    const size_t question = rest.find('?');
    if (question != std::string::npos) {
        if (result->kind != Endpoint::Kind::tls) return bad_endpoint(text, "options after '?' go with tls:// only");
        Status status = parse_tls_options(text, rest.substr(question + 1), result);
        if (!status) return status;
        rest.resize(question);
    }
    std::string port_text;
    if (!rest.empty() && rest[0] == '[') {
        const size_t close = rest.find(']');
        if (close == std::string::npos || close + 1 >= rest.size() || rest[close + 1] != ':') {
            return bad_endpoint(text, "bad [IPv6]:port");
        }
        result->host = rest.substr(1, close - 1);
        port_text = rest.substr(close + 2);
    } else {
        const size_t colon = rest.rfind(':');
        if (colon == std::string::npos) return bad_endpoint(text, "missing port");
        result->host = rest.substr(0, colon);
        port_text = rest.substr(colon + 1);
    }
    if (result->host.empty()) return bad_endpoint(text, "empty host");
    char *end = nullptr;
    const long port = std::strtol(port_text.c_str(), &end, 10);
    if (port_text.empty() || *end != '\0' || port < 0 || port > 65535) {
        return bad_endpoint(text, "port must be a number from 0 to 65535");
    }
    result->port = static_cast<int>(port);
    return Status::success();
}

}  // namespace

std::string Endpoint::to_string() const {
    if (kind == Kind::unix_socket) return "unix:" + path;
    if (kind == Kind::shared_memory) return "shm:" + path;
    if (kind == Kind::ivshmem) return "ivshmem:" + (path.empty() ? pci_address : "file:" + path);
    if (kind == Kind::vsock) {
        return "vsock://" + (cid == kAnyCid ? std::string("ANY") : std::to_string(cid)) + ":" +
               std::to_string(vsock_port);
    }
    const bool v6 = host.find(':') != std::string::npos;
    return (kind == Kind::tls ? "tls://" : "tcp://") + (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

bool Endpoint::is_loopback() const {
    if (uses_unix_socket() || kind == Kind::ivshmem || kind == Kind::vsock) return true;
    return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

namespace {

// "127.0.0.1:50053", "gpu-box:50053", "[::1]:50053": what llama.cpp's --rpc takes,
// and tcp here too. No scheme, no path, a port of digits after the last colon, and
// an IPv6 host only in brackets (a bare one cannot be told from its port).
bool is_bare_host_port(const std::string &text) {
    if (text.find('/') != std::string::npos) return false;
    const size_t colon = text.rfind(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == text.size()) return false;
    for (size_t i = colon + 1; i < text.size(); ++i) {
        if (text[i] < '0' || text[i] > '9') return false;
    }
    const std::string host = text.substr(0, colon);
    const bool bracketed = host.front() == '[' && host.back() == ']';
    return bracketed || host.find(':') == std::string::npos;
}

}  // namespace

Status parse_endpoint(const std::string &text, Endpoint *endpoint) {
    if (is_bare_host_port(text)) return parse_endpoint("tcp://" + text, endpoint);
    Endpoint result;
    const bool shm = text.rfind("shm:", 0) == 0;
    if (text.rfind("unix:", 0) == 0 || shm) {
        result.kind = shm ? Endpoint::Kind::shared_memory : Endpoint::Kind::unix_socket;
        result.path = text.substr(shm ? 4 : 5);
        if (result.path.empty()) return bad_endpoint(text, "empty socket path");
        if (result.path.size() >= sizeof(sockaddr_un{}.sun_path)) return bad_endpoint(text, "socket path too long");
    } else if (text.rfind("ivshmem:", 0) == 0) {
        Status status = parse_ivshmem(text, &result);
        if (!status) return status;
    } else if (text.rfind("vsock://", 0) == 0) {
        Status status = parse_vsock(text, &result);
        if (!status) return status;
    } else if (text.rfind("tcp://", 0) == 0 || text.rfind("tls://", 0) == 0) {
        result.kind = text.rfind("tls://", 0) == 0 ? Endpoint::Kind::tls : Endpoint::Kind::tcp;
        Status status = parse_host_port(text, text.substr(6), &result);
        if (!status) return status;
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
