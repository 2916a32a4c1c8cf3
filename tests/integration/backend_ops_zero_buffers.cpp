// LD_PRELOAD shim for test-backend-ops: every buffer that test-backend-ops allocates
// for a test case starts zeroed.
//
// Why: in --test-file mode (test_generic_op) test-backend-ops initializes only the
// sources of each op. Its sentinel tensors, and the rows of a SET_ROWS result that the
// op does not write, keep whatever the fresh buffer held, and the comparison then
// reports "[NONE] NaN at index ..." with the same NaN on both backends. A fresh CPU or
// CUDA allocation is usually zero-filled by the kernel or driver; a buffer that a
// long-lived server carves out of its heap holds the previous test's bytes. ggml
// promises neither, so the harness, not the backend, has to fix this.
#include <dlfcn.h>
#include <ggml-alloc.h>
#include <ggml-backend.h>

extern "C" __attribute__((visibility("default"))) ggml_backend_buffer_t
ggml_backend_alloc_ctx_tensors(struct ggml_context *ctx, ggml_backend_t backend) {
    using alloc_fn = ggml_backend_buffer_t (*)(struct ggml_context *, ggml_backend_t);
    static const alloc_fn next = reinterpret_cast<alloc_fn>(dlsym(RTLD_NEXT, "ggml_backend_alloc_ctx_tensors"));
    ggml_backend_buffer_t buffer = next(ctx, backend);
    if (buffer != nullptr) {
        ggml_backend_buffer_clear(buffer, 0);
    }
    return buffer;
}
