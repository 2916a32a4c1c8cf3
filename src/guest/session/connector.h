// Connecting: a new connection to a server's endpoint within a time limit, up to
// the handshake, and when it fails, an error that says why (no server, a wrong
// key, a server that does not speak TLS).
#pragma once

#include <functional>
#include <memory>

#include "guest/guest_options.h"
#include "transport/connection.h"
#include "transport/endpoint.h"
#include "transport/ivshmem_region.h"

namespace ggml_remote::guest {

// Makes a new connection to the server (within timeout_ms), up to the handshake:
// connector_for() makes one for an endpoint; tests give their own.
using Connector = std::function<Status(FramedStream *stream, int timeout_ms)>;

// A new connection to `endpoint` within timeout_ms, TLS included, up to the handshake.
Status connect_stream(const Endpoint &endpoint, const GuestOptions &options, int timeout_ms, FramedStream *out);
// connect_stream() for `endpoint` each time it is called: how a lost connection is made again.
Connector connector_for(const Endpoint &endpoint, const GuestOptions &options);
// A VM's session through an ivshmem region: the rings in it carry the frames from
// the handshake on; the stream's descriptor is the region's file, never a socket.
Status open_region(const Endpoint &endpoint, const GuestOptions &options, FramedStream *stream,
                   std::shared_ptr<GuestRegion> *region);

}  // namespace ggml_remote::guest
