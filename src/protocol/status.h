// Status: the result of an operation that can fail, with a human-readable reason.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

namespace ggml_remote {

// Error codes shared by both sides; they travel in reply frames.
enum class Code : int32_t {
    ok = 0,
    error = 1,             // anything else, see the message
    version_mismatch = 2,  // handshake: the peers speak different protocol versions
    bad_request = 3,       // the message failed validation
    not_found = 4,         // a handle that does not exist in this session
    out_of_memory = 5,     // an allocation on the host failed
    unsupported = 6,       // the host device cannot do this
    limit_exceeded = 7,    // a per-session limit of the server was reached
    disconnected = 8,      // the peer closed the connection or the transport failed
};

class [[nodiscard]] Status {
  public:
    Status() = default;
    Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}

    static Status success() { return Status(); }

    bool ok() const { return code_ == Code::ok; }
    explicit operator bool() const { return ok(); }
    Code code() const { return code_; }
    const std::string &message() const { return message_; }

  private:
    Code code_ = Code::ok;
    std::string message_;
};

inline Status error(Code code, std::string message) { return Status(code, std::move(message)); }

}  // namespace ggml_remote
