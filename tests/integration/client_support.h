// What the guest programs of the integration tests share: a failure that ends the
// test with a line the script shows, and owners for ggml's objects.
#pragma once

#include <ggml-backend.h>
#include <ggml.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

namespace client_support {

// Prints "FAIL: why" and ends the program with status 1.
[[noreturn]] inline void fail(const std::string &why) {
    std::printf("FAIL: %s\n", why.c_str());
    std::fflush(stdout);
    std::exit(1);
}

struct ContextFree {
    void operator()(ggml_context *ctx) const { ggml_free(ctx); }
};
struct BufferFree {
    void operator()(ggml_backend_buffer *buffer) const { ggml_backend_buffer_free(buffer); }
};
struct BackendFree {
    void operator()(ggml_backend *backend) const { ggml_backend_free(backend); }
};
using Context = std::unique_ptr<ggml_context, ContextFree>;
using Buffer = std::unique_ptr<ggml_backend_buffer, BufferFree>;
using Backend = std::unique_ptr<ggml_backend, BackendFree>;

}  // namespace client_support
