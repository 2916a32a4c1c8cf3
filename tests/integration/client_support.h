// What the guest programs of the integration tests share: a failure that ends the
// test with a line the script shows, and owners for ggml's objects.
#pragma once

#include <ggml-backend.h>
#include <ggml.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

namespace client_support {

// Prints "FAIL: why" and ends the program with status 1.
[[noreturn]] inline void fail(const std::string &why) {
    std::printf("FAIL: %s\n", why.c_str());
    std::fflush(stdout);
    std::exit(1);
}

// The first device the ggml-remote plugin registered.
inline ggml_backend_dev_t first_remote_device() {
    ggml_backend_load_all();
    for (size_t i = 0; i < ggml_backend_dev_count(); ++i) {
        ggml_backend_dev_t device = ggml_backend_dev_get(i);
        if (std::strncmp(ggml_backend_dev_name(device), "REMOTE", 6) == 0) return device;
    }
    fail("no REMOTE device (is the server running, GGML_BACKEND_PATH set?)");
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
