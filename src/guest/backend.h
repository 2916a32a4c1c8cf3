// The guest's ggml backend on a remote device: a stream of the host's work,
// computing graphs there and waiting on events.
#pragma once

#include "abi/ggml_backend_abi_v3.h"
#include "guest/device.h"

namespace ggml_remote::guest {

ggml_backend_t create_remote_backend(RemoteDevice *device);

// An error naming the first tensor of `graph` whose bytes are in a lost buffer;
// every lost buffer the graph reads then counts as reported (its compute fails).
Status report_lost_buffers_read(ggml_cgraph *graph);

void remote_event_synchronize(RemoteDevice *device, ggml_backend_event_t event);
// Sets the host's thread count for a backend of ours (ggml_backend_set_n_threads).
void remote_backend_set_n_threads(ggml_backend_t backend, int n_threads);
// A backend of ours in a tensor-parallel group: its computes return at once.
void remote_backend_set_grouped(ggml_backend_t backend, bool grouped);
// The device of a backend of ours; null for any other backend.
RemoteDevice *remote_device_of(ggml_backend_t backend);

}  // namespace ggml_remote::guest
