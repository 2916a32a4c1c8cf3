// ggml-remote-async-client PLUGIN [deferred]: drives a remote device's asynchronous
// stream through ggml's public API (the server comes from GGML_REMOTE_SERVERS):
// set_tensor_async, graph_compute_async, get_tensor_async, tensor_copy_async and
// events, and checks every result against the same arithmetic done here.
// With `deferred` (socket transports), it also checks that an asynchronous read
// really waits in line until synchronize instead of blocking the caller.
// Exit code 0 and "PASS" when every check held.
#include <ggml-backend.h>
#include <ggml.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

namespace {

int failures = 0;

void check(bool ok, const char *what) {
    std::printf("%s: %s\n", ok ? "ok" : "FAILED", what);
    if (!ok) ++failures;
}

bool all_equal(const std::vector<float> &got, const std::vector<float> &want) {
    for (size_t i = 0; i < want.size(); ++i) {
        if (std::fabs(got[i] - want[i]) > 1e-6f) {
            std::printf("  element %zu: %g, expected %g\n", i, got[i], want[i]);
            return false;
        }
    }
    return true;
}

}  // namespace

int main(int argc, char **argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s PLUGIN [deferred]\n", argv[0]);
        return 2;
    }
    const bool expect_deferred = argc > 2 && std::strcmp(argv[2], "deferred") == 0;
    ggml_backend_load_all();  // the CPU backend too, as applications do: the plugin checks its API version
    ggml_backend_reg_t reg = ggml_backend_load(argv[1]);
    if (reg == nullptr || ggml_backend_reg_dev_count(reg) == 0) {
        std::fprintf(stderr, "no remote device (is the server running?)\n");
        return 1;
    }
    ggml_backend_dev_t device = ggml_backend_reg_dev_get(reg, 0);
    ggml_backend_dev_props props{};
    ggml_backend_dev_get_props(device, &props);
    check(props.caps.async && props.caps.events, "the device says it has an asynchronous stream and events");
    ggml_backend_t backend = ggml_backend_dev_init(device, nullptr);
    if (backend == nullptr) return 1;

    constexpr int64_t n = 1 << 20;  // 4 MiB per tensor
    ggml_init_params params{ggml_tensor_overhead() * 8 + ggml_graph_overhead(), nullptr, true};
    ggml_context *ctx = ggml_init(params);
    ggml_tensor *a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, n);
    ggml_tensor *b = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, n);
    ggml_tensor *sum = ggml_add(ctx, a, b);
    ggml_tensor *copy = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, n);
    ggml_cgraph *graph = ggml_new_graph(ctx);
    ggml_build_forward_expand(graph, sum);
    ggml_backend_buffer_t buffer = ggml_backend_alloc_ctx_tensors(ctx, backend);
    if (buffer == nullptr) return 1;
    const size_t bytes = n * sizeof(float);

    std::vector<float> va(n), vb(n), want(n), got(n), got_copy(n);
    ggml_backend_event_t event = ggml_backend_event_new(device);
    for (int round = 0; round < 3; ++round) {
        for (int64_t i = 0; i < n; ++i) {
            va[i] = static_cast<float>((i * 7 + round) % 1000) * 0.5f;
            vb[i] = static_cast<float>((i * 13 + 3 * round) % 997) * 0.25f;
            want[i] = va[i] + vb[i];
        }
        std::fill(got.begin(), got.end(), -1.0f);
        std::fill(got_copy.begin(), got_copy.end(), -1.0f);
        // Everything in line, then one wait.
        ggml_backend_tensor_set_async(backend, a, va.data(), 0, bytes);
        ggml_backend_tensor_set_async(backend, b, vb.data(), 0, bytes);
        check(ggml_backend_graph_compute_async(backend, graph) == GGML_STATUS_SUCCESS, "graph_compute_async");
        ggml_backend_tensor_get_async(backend, sum, got.data(), 0, bytes);
        ggml_backend_tensor_copy_async(backend, backend, sum, copy);
        ggml_backend_tensor_get_async(backend, copy, got_copy.data(), 0, bytes);
        if (expect_deferred) check(got[0] == -1.0f, "get_tensor_async returns before the data is read");
        ggml_backend_event_record(event, backend);
        ggml_backend_event_wait(backend, event);  // same stream: nothing to wait for
        ggml_backend_event_synchronize(event);
        check(all_equal(got, want), "get_tensor_async after event_synchronize: a + b");
        check(all_equal(got_copy, want), "tensor_copy_async on the host, read after the same event");

        // A partial read at an offset, then synchronize instead of an event.
        std::vector<float> tail(16, -1.0f);
        ggml_backend_tensor_get_async(backend, sum, tail.data(), bytes - sizeof(float) * 16, sizeof(float) * 16);
        ggml_backend_synchronize(backend);
        check(all_equal(tail, std::vector<float>(want.end() - 16, want.end())),
              "get_tensor_async of the last 16 values");
    }
    ggml_backend_event_free(event);
    ggml_backend_buffer_free(buffer);
    ggml_free(ctx);
    ggml_backend_free(backend);
    if (failures != 0) {
        std::printf("%d check(s) failed\n", failures);
        return 1;
    }
    std::printf("PASS\n");
    return 0;
}
