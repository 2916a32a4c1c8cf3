// Why the server turned a guest or a command away: small fixed lists, so that the
// status board can hold a counter per reason and the metrics endpoint can name them.
#pragma once

#include <cstddef>
#include <cstdint>

#include "protocol/status.h"

namespace ggml_remote::host {

// A guest that got no session, or lost it in the handshake.
enum class GuestRefusal : uint32_t {
    server_full,              // --max-sessions (at accept, or after a TLS handshake)
    peer_limit,               // --max-sessions-per-peer
    unauthenticated_full,     // ended to make room for a newer handshake (--max-unauthenticated)
    unauthenticated_timeout,  // still unauthenticated at the listener's deadline
    tls_failed,               // the worker's TLS handshake failed (or the guest spoke no TLS)
    version_mismatch,         // the handshake asked for a protocol version the server lacks
    handshake_failed,         // anything else before the handshake completed
    server_error,             // the server could not serve it (peer unknown, fork failed)
    start_budget,             // its peer, or the server, started as many workers as it may (--max-starts*)
};
constexpr size_t kGuestRefusalReasons = 9;

// Whether a worker decides this reason (its handshake failed); every other one the
// listener decides and counts itself, so a worker's status slot may not name it.
bool decided_by_worker(GuestRefusal reason);

// A command a session answered with an error, by the error's class.
enum class CommandRefusal : uint32_t {
    invalid_request,  // failed validation, or named a handle that does not exist
    limit_reached,    // a session limit or quota, or the host's memory
    unsupported,      // the host device cannot do it
    host_error,       // anything else
};
constexpr size_t kCommandRefusalReasons = 4;

// The metrics' label value of each reason.
const char *refusal_name(GuestRefusal reason);
const char *refusal_name(CommandRefusal reason);

// The class of a failed command's error code (not Code::ok).
CommandRefusal command_refusal_for(Code code);

// How a worker that turned its guest away before the handshake completed says why.
GuestRefusal handshake_refusal_for(Code code);

}  // namespace ggml_remote::host
