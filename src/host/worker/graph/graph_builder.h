// Turns a checked tensor list into real ggml tensors over the session's buffers.
#pragma once

#include <ggml-backend.h>
#include <ggml.h>

#include <functional>
#include <memory>
#include <vector>

#include "host/worker/graph/index_guard.h"
#include "protocol/status.h"
#include "protocol/tensor_codec.h"

namespace ggml_remote::host {

struct ContextDeleter {
    void operator()(ggml_context *ctx) const { ggml_free(ctx); }
};
using ContextPtr = std::unique_ptr<ggml_context, ContextDeleter>;

// A buffer of the session, as the builder needs it.
struct BufferView {
    ggml_backend_buffer_t buffer = nullptr;
    uint64_t size = 0;
    bool writable = true;         // false for a guest's mapped model file
    bool guest_writable = false;  // the guest can write it during a compute (shm, ivshmem, its file)
};
using BufferLookup = std::function<Status(uint64_t handle, BufferView *view)>;

struct BuiltTensors {
    ContextPtr context;
    std::vector<ggml_tensor *> tensors;    // same order as the list
    ggml_cgraph *graph = nullptr;          // only when nodes were requested
    uint64_t checked_for_backend = 0;      // the session's backend found able to compute it (0: none yet)
    std::vector<uint64_t> writes_weights;  // buffers of weights its nodes write (Session::repack_weights)
    // The nodes that follow indexes (or sort values) in tensor data, each reading a
    // private copy checked before it runs; found once, when the graph is built.
    IndexGuard index_guard;
};

enum class DataPolicy {
    none,      // a query about an op: no tensor may have data
    optional,  // tensors may or may not have data (init_tensor)
    required,  // every tensor must have data (graph compute)
};

// Builds the tensors, checking each data range against its buffer's bounds and each
// view against its source. With nodes, also builds the graph; a node that writes
// its result into a read-only buffer is refused.
Status build_tensors(const protocol::TensorList &list, const BufferLookup &lookup, DataPolicy policy,
                     BuiltTensors *built);

}  // namespace ggml_remote::host
