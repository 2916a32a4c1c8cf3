// The weight store's channel: how a session worker asks the store's owner
// (store_owner.h) for entries and hands it new ones. One SOCK_SEQPACKET socket pair
// per worker, made by the listener at spawn; one fixed-size message each way per
// request, descriptors passed with SCM_RIGHTS.
//
//   identify  refused: the listener fixes every tenant, a TLS guest's once it proved
//             its key (worker_contract.h); the number stays so that it stays refused
//   find      digest, size, flags   -> found (or being written by another worker: in
//                                      flight), content offset, a read-only descriptor
//   commit    digest, size, phase,  -> accepted (space reserved) or refused (in flight:
//             flags, a pipe's read     another worker writes it; found: it is named
//                                      already); then the worker writes
//             end and another's        exactly `size` bytes into the pipe, and reads one
//             write end                byte from the other: 1 named, 0 not
//   waiters   -                     -> how many of this worker's claims others wait for
#pragma once

#include <signal.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "protocol/status.h"
#include "transport/unique_fd.h"

namespace ggml_remote::host::store_channel {

enum class Kind : uint32_t { identify = 1, find = 2, commit = 3, waiters = 4 };

// Request flags.
// A derived entry (a repacked image): named by a key the worker makes from its
// source's digest and layout, so the owner cannot check the bytes against the name;
// it is kept for the worker's own tenant only, whatever the store's sharing.
constexpr uint32_t kDerived = 1;
// find: on a miss, this worker will send the bytes (it claims the entry), and other
// workers that look it up meanwhile hear "in flight" and may wait for it.
constexpr uint32_t kClaim = 2;

// Reply::found.
constexpr uint32_t kNotFound = 0;
constexpr uint32_t kFound = 1;
constexpr uint32_t kInFlight = 2;

constexpr size_t kMaxIdentity = 512;

struct Request {
    uint32_t kind = 0;
    uint32_t identity_size = 0;
    uint8_t digest[16] = {};
    uint64_t size = 0;
    uint64_t phase = 0;
    uint32_t flags = 0;
    uint32_t unused = 0;
    char identity[kMaxIdentity] = {};
};

struct Reply {
    int32_t code = 0;    // protocol Code: 0 success
    uint32_t found = 0;  // kNotFound, kFound, kInFlight; waiters: their count
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
