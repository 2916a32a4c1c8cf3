// gpu_failures_client: a guest application (ggml through the plugin) that meets a
// GPU's failures on the first remote device and checks that each one is an error
// it can handle, after which the device still works:
//   1. a buffer past the device's memory: the allocation fails (null);
//   2. a node the device cannot compute (an f16 SCALE: ggml-vulkan has no kernel
//      and would abort on it), sent as if the scheduler had not asked:
//      ggml_backend_graph_compute returns a failure;
//   3. then a small buffer and c = a + b compute the right numbers.
// Prints one "ok: ..." line per step, or "FAIL: ..." and exits 1.
// usage: GGML_BACKEND_PATH=libggml-remote.so GGML_REMOTE_SERVERS=... gpu_failures_client
#include <ggml-alloc.h>
#include <ggml-backend.h>
#include <ggml.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "client_support.h"

namespace {

using client_support::Backend;
using client_support::Buffer;
using client_support::Context;
using client_support::fail;
using client_support::first_remote_device;

Context metadata_context() {
    ggml_init_params params{};
    params.mem_size = 16 * ggml_tensor_overhead() + ggml_graph_overhead();
    params.no_alloc = true;
    return Context(ggml_init(params));
}

// Computes `output` on `backend`, its tensors in a buffer of the backend's device.
ggml_status compute(ggml_backend_t backend, ggml_context *ctx, ggml_tensor *output, Buffer *buffer) {
    buffer->reset(ggml_backend_alloc_ctx_tensors(ctx, backend));
    if (*buffer == nullptr) fail("cannot allocate a small buffer on the device");
    ggml_backend_buffer_clear(buffer->get(), 0);
    ggml_cgraph *graph = ggml_new_graph(ctx);
    ggml_build_forward_expand(graph, output);
    return ggml_backend_graph_compute(backend, graph);
}

void allocation_past_the_memory_fails(ggml_backend_dev_t device) {
    size_t free_memory = 0, total_memory = 0;
    ggml_backend_dev_memory(device, &free_memory, &total_memory);
    if (total_memory == 0) fail("the device reports no memory");
    Buffer huge(ggml_backend_buft_alloc_buffer(ggml_backend_dev_buffer_type(device), total_memory + 1));
    if (huge != nullptr) fail("a buffer of " + std::to_string(total_memory + 1) + " bytes was allocated");
    std::printf("ok: a buffer of %zu bytes (past the device's memory) was refused\n", total_memory + 1);
}

void unsupported_node_fails_its_compute(ggml_backend_t backend) {
    Context ctx = metadata_context();
    ggml_tensor *half = ggml_new_tensor_1d(ctx.get(), GGML_TYPE_F16, 64);
    ggml_tensor *scaled = ggml_scale(ctx.get(), half, 2.0f);
    ggml_set_name(scaled, "scaled");
    if (ggml_backend_supports_op(backend, scaled)) fail("the device computes an f16 SCALE: pick another op");
    Buffer buffer;
    const ggml_status status = compute(backend, ctx.get(), scaled, &buffer);
    if (status == GGML_STATUS_SUCCESS) fail("the compute of a node the device refused succeeded");
    std::printf("ok: the compute of a node the device cannot compute failed (%s)\n", ggml_status_to_string(status));
}

void the_device_still_computes(ggml_backend_t backend) {
    Context ctx = metadata_context();
    ggml_tensor *a = ggml_new_tensor_1d(ctx.get(), GGML_TYPE_F32, 4);
    ggml_tensor *b = ggml_new_tensor_1d(ctx.get(), GGML_TYPE_F32, 4);
    ggml_tensor *sum = ggml_add(ctx.get(), a, b);
    Buffer buffer(ggml_backend_alloc_ctx_tensors(ctx.get(), backend));
    if (buffer == nullptr) fail("cannot allocate a small buffer after the failures");
    const float a_values[4] = {1, 2, 3, 4}, b_values[4] = {10, 20, 30, 40};
    ggml_backend_tensor_set(a, a_values, 0, sizeof(a_values));
    ggml_backend_tensor_set(b, b_values, 0, sizeof(b_values));
    ggml_cgraph *graph = ggml_new_graph(ctx.get());
    ggml_build_forward_expand(graph, sum);
    if (ggml_backend_graph_compute(backend, graph) != GGML_STATUS_SUCCESS) fail("a + b failed after the failures");
    float result[4] = {};
    ggml_backend_tensor_get(sum, result, 0, sizeof(result));
    for (int i = 0; i < 4; ++i) {
        if (result[i] != a_values[i] + b_values[i]) {
            fail("a + b gave " + std::to_string(result[i]) + " at " + std::to_string(i));
        }
    }
    std::printf("ok: then a + b computed right\n");
}

}  // namespace

int main() {
    ggml_backend_dev_t device = first_remote_device();
    std::printf("device: %s (%s)\n", ggml_backend_dev_name(device), ggml_backend_dev_description(device));
    Backend backend(ggml_backend_dev_init(device, nullptr));
    if (backend == nullptr) fail("cannot start a backend on the device");
    allocation_past_the_memory_fails(device);
    unsupported_node_fails_its_compute(backend.get());
    the_device_still_computes(backend.get());
    std::fflush(stdout);
    return 0;
}
