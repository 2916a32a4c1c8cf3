// The weight store's channel: how a session worker asks the store's owner
// (store_owner.h) for entries and hands it new ones. One SOCK_SEQPACKET socket pair
// per worker, made by the listener at spawn; one fixed-size message each way per
// request, descriptors passed with SCM_RIGHTS.
//
//   identify  (TLS workers only, once, first): the identity the guest authenticated as
//   find      digest, size          -> found, content offset, a read-only entry descriptor
//   commit    digest, size, phase,  -> accepted (space reserved) or refused; then the
//             a pipe's read end and    worker writes exactly `size` bytes into the pipe,
//             another's write end      and reads one byte from the other: 1 named, 0 not
#pragma once

#include <signal.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "protocol/status.h"
#include "transport/unique_fd.h"

namespace ggml_remote::host::store_channel {

enum class Kind : uint32_t { identify = 1, find = 2, commit = 3 };

constexpr size_t kMaxIdentity = 512;

struct Request {
    uint32_t kind = 0;
    uint32_t identity_size = 0;
    uint8_t digest[16] = {};
    uint64_t size = 0;
    uint64_t phase = 0;
    char identity[kMaxIdentity] = {};
};

struct Reply {
    int32_t code = 0;  // protocol Code: 0 success
    uint32_t found = 0;
    uint64_t content_offset = 0;
    char message[200] = {};
};

// The answer to a commit's transfer, on the result pipe.
constexpr uint8_t kNamed = 1;
constexpr uint8_t kNotNamed = 0;

// Sends one message with `count` descriptors. False on failure (the peer is gone).
bool send_message(int fd, const void *data, size_t size, const int *fds, size_t count);
// Receives one message of exactly `size` bytes, with at most `max_fds` descriptors
// (any more are closed); false on end of file, failure, or a message of another size.
// `timeout_ms` < 0: waits for ever.
bool receive_message(int fd, void *data, size_t size, std::vector<UniqueFd> *fds, size_t max_fds, int timeout_ms);

// Blocks SIGPIPE in the calling thread while it lives: a write to a pipe whose
// reader is gone fails with EPIPE instead of ending the process; a SIGPIPE raised
// meanwhile is taken before the mask is restored.
class NoSigpipe {
  public:
    NoSigpipe();
    ~NoSigpipe();
    NoSigpipe(const NoSigpipe &) = delete;
    NoSigpipe &operator=(const NoSigpipe &) = delete;

  private:
    sigset_t previous_;
};

}  // namespace ggml_remote::host::store_channel
