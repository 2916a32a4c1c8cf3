// Fuzz target: the tensor and graph validators. The input is a small prefix that
// describes the session's buffers, then an encoded tensor list as it comes after
// graph_compute, supports_op, alloc_size or init_tensor. The list is decoded
// (tensor_codec.cpp), built over the buffers and validated node by node
// (graph_builder.cpp, op_validation.cpp); a list that passes is handed to the
// host CPU device as the supports_op and alloc_size commands do.
#include <ggml-backend.h>

#include <cstdint>
#include <memory>

#include "fuzz_support.h"
#include "host/worker/graph/graph_builder.h"
#include "protocol/tensor_codec.h"

namespace ggml_remote::fuzz {
namespace {

using namespace protocol;

#pragma pack(push, 1)
struct TensorInputPrefix {
    uint64_t buffer_size;  // every buffer handle 1..kBuffers has this size (capped)
    uint8_t read_only;     // bit h-1: buffer h is read-only (a mapped model file)
    uint8_t policy;        // host::DataPolicy, modulo 3
};
#pragma pack(pop)

constexpr uint64_t kBuffers = 8;
constexpr uint64_t kMaxBufferSize = 1ull << 40;

struct BufferDeleter {
    void operator()(ggml_backend_buffer *buffer) const { ggml_backend_buffer_free(buffer); }
};

// A CPU buffer over an address range that is never touched: building and
// validating tensors reads no tensor data, so no memory needs to be behind it.
ggml_backend_buffer_t untouched_buffer() {
    static std::unique_ptr<ggml_backend_buffer, BufferDeleter> buffer(ggml_backend_dev_buffer_from_host_ptr(
        host_cpu_device(), reinterpret_cast<void *>(uintptr_t(1) << 44), kMaxBufferSize, kMaxBufferSize));
    return buffer.get();
}

}  // namespace
}  // namespace ggml_remote::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    using namespace ggml_remote;
    using namespace ggml_remote::protocol;
    using namespace ggml_remote::fuzz;
    const ByteView input(data, size);
    TensorInputPrefix prefix;
    if (!read_pod(input, 0, &prefix)) return 0;
    const uint64_t buffer_size = prefix.buffer_size % (kMaxBufferSize + 1);
    const auto policy = static_cast<host::DataPolicy>(prefix.policy % 3);
    ggml_backend_dev_t cpu = host_cpu_device();
    ggml_backend_buffer_t buffer = untouched_buffer();

    TensorListLimits limits;
    limits.max_tensors = 1 << 16;
    limits.max_nodes = 1 << 16;
    TensorList list;
    if (!decode_tensor_list(input.subview(sizeof(prefix)), limits, &list).ok()) return 0;

    const host::BufferLookup lookup = [&](uint64_t handle, host::BufferView *view) -> Status {
        if (handle == 0 || handle > kBuffers) return error(Code::not_found, "no such buffer");
        view->buffer = buffer;
        view->size = buffer_size;
        view->writable = (prefix.read_only & (1u << (handle - 1))) == 0;
        return Status::success();
    };
    host::BuiltTensors built;
    if (!host::build_tensors(list, lookup, policy, &built).ok() || built.tensors.empty()) return 0;
    if (policy == host::DataPolicy::none) {
        // What supports_op and alloc_size do with a query that passed.
        ggml_tensor *op = built.tensors.back();
        (void)ggml_backend_dev_supports_op(cpu, op);
        (void)ggml_backend_buft_get_alloc_size(ggml_backend_dev_buffer_type(cpu), op);
    }
    return 0;
}
