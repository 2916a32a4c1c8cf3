// Tensor parallelism over our servers: ggml's comm interface (ggml-backend.h's
// ggml_backend_comm_*, found through the registry's get_proc_address), which
// ggml's meta backend (llama.cpp -sm tensor) calls to sum the partial results of
// its servers after each sub-graph.
//
// The servers sum them among themselves through a memory file this process gives
// each (transport/peer_exchange.h): one one-way command per server and step, no
// bytes through here and no wait. Where that cannot be (a server on TCP, two
// devices of one server, a tensor that is not F32), the all-reduce answers false
// and ggml's own, through this process, does the step.
#pragma once

#include <ggml-backend.h>

#include <cstdint>
#include <string>

#include "protocol/status.h"

namespace ggml_remote::guest {

class RemoteDevice;

// ggml_backend_comm_init_t: a group of `n_backends` backends of ours, or null.
void *tensor_parallel_init(ggml_backend_t *backends, size_t n_backends);
// ggml_backend_comm_free_t.
void tensor_parallel_free(void *group);
// ggml_backend_comm_allreduce_tensor_t: `tensors` holds one per backend, in the
// group's order; false: ggml does this step itself.
bool tensor_parallel_allreduce(void *group, ggml_tensor **tensors);
// What the groups did so far (GGML_REMOTE_STATS=1 prints it at exit).
struct TensorParallelCounts {
    uint64_t groups = 0;        // groups made
    uint64_t by_servers = 0;    // all-reduces the servers did among themselves
    uint64_t left_to_ggml = 0;  // all-reduces answered false: ggml's, through this process
};
TensorParallelCounts tensor_parallel_counts();
// A call of `device`'s backend failed (its connection lost, or a step failed on
// its server): its groups are done. The other servers fail their steps at once
// instead of waiting for it, ggml does every later step, and the next compute of
// the group fails with `why`, so that the application hears of the token it
// lost. The servers' groups are not made again on a new connection.
void tensor_parallel_member_failed(const RemoteDevice *device, const Status &why);
// Whether the compute about to start on `device`'s grouped backend must fail
// (tensor_parallel_member_failed), and why; told once per group.
bool tensor_parallel_compute_refused(const RemoteDevice *device, std::string *why);

}  // namespace ggml_remote::guest
