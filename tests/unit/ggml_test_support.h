// Helpers shared by the unit tests: the host's CPU device, ggml contexts that own
// no data, a stand-in for a guest buffer that places tensors at known offsets,
// access to the tensors inside an encoded tensor list, and float bytes.
#pragma once

#include <ggml-backend.h>
#include <ggml.h>
#include <gguf.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "protocol/tensor_codec.h"

namespace ggml_remote::test_support {

// The host's CPU device, loaded as the server loads it.
inline ggml_backend_dev_t host_cpu_device() {
    static std::once_flag loaded;
    std::call_once(loaded, [] {
        unsetenv("GGML_BACKEND_PATH");  // never load the remote plugin itself as a host backend
        ggml_backend_load_all();
    });
    return ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
}

inline std::vector<uint8_t> bytes_of(const std::vector<float> &values) {
    std::vector<uint8_t> bytes(values.size() * sizeof(float));
    std::memcpy(bytes.data(), values.data(), bytes.size());
    return bytes;
}

inline std::vector<float> floats_of(const std::vector<uint8_t> &bytes) {
    std::vector<float> values(bytes.size() / sizeof(float));
    std::memcpy(values.data(), bytes.data(), values.size() * sizeof(float));
    return values;
}

struct GgmlContextDeleter {
    void operator()(ggml_context *ctx) const { ggml_free(ctx); }
};
using GgmlContext = std::unique_ptr<ggml_context, GgmlContextDeleter>;

// A context for tensor metadata only (no_alloc): data pointers stay null until placed.
// It has room for `max_graphs` graphs of the default size.
inline GgmlContext metadata_context(size_t max_tensors = 64, size_t max_graphs = 1) {
    ggml_init_params params{};
    params.mem_size = max_tensors * ggml_tensor_overhead() + max_graphs * ggml_graph_overhead();
    params.mem_buffer = nullptr;
    params.no_alloc = true;
    return GgmlContext(ggml_init(params));
}

// Plays the part of one guest buffer: tensors placed in it get data pointers into
// its storage, and its locator reports them as (handle, offset from the start).
class PlacementArena {
  public:
    PlacementArena(uint64_t handle, size_t size) : handle_(handle), storage_(size) {}

    void place(ggml_tensor *tensor, size_t offset) { tensor->data = storage_.data() + offset; }

    protocol::TensorListEncoder::Locator locator() const {
        return [this](const ggml_tensor *tensor, protocol::TensorLocation *location) {
            const auto begin = reinterpret_cast<uintptr_t>(storage_.data());
            const auto address = reinterpret_cast<uintptr_t>(tensor->data);
            if (address < begin || address >= begin + storage_.size()) return false;
            location->buffer = handle_;
            location->offset = address - begin;
            return true;
        };
    }

  private:
    uint64_t handle_;
    std::vector<uint8_t> storage_;
};

// The i-th tensor of an encoded tensor list (the list's structs are packed).
inline protocol::WireTensor wire_tensor_at(const std::vector<uint8_t> &bytes, size_t index) {
    protocol::WireTensor tensor;
    std::memcpy(&tensor, bytes.data() + sizeof(protocol::TensorListHeader) + index * sizeof(protocol::WireTensor),
                sizeof(tensor));
    return tensor;
}

// Rewrites the i-th tensor of an encoded tensor list in place.
template <class Edit>
void edit_wire_tensor(std::vector<uint8_t> &bytes, size_t index, Edit edit) {
    protocol::WireTensor tensor = wire_tensor_at(bytes, index);
    edit(tensor);
    std::memcpy(bytes.data() + sizeof(protocol::TensorListHeader) + index * sizeof(protocol::WireTensor), &tensor,
                sizeof(tensor));
}

// Rewrites the header of an encoded tensor list in place.
inline void set_list_header(std::vector<uint8_t> &bytes, uint32_t n_tensors, uint32_t n_nodes) {
    const protocol::TensorListHeader header{n_tensors, n_nodes};
    std::memcpy(bytes.data(), &header, sizeof(header));
}

// `size` bytes that differ with `seed` and from place to place (weights for tests).
inline std::vector<uint8_t> pattern_bytes(size_t size, uint32_t seed) {
    std::vector<uint8_t> bytes(size);
    uint32_t state = seed * 2654435761u + 1;
    for (uint8_t &byte : bytes) {
        state = state * 1103515245u + 12345u;
        byte = static_cast<uint8_t>(state >> 16);
    }
    return bytes;
}

// Writes a GGUF file at `path` whose tensors ("t0", "t1", ...: one-dimensional,
// of bytes) hold `tensors`, as a model file holds its weights; false on failure.
inline bool write_gguf(const std::string &path, const std::vector<std::vector<uint8_t>> &tensors) {
    size_t bytes = ggml_tensor_overhead() * (tensors.size() + 1);
    for (const std::vector<uint8_t> &tensor : tensors) bytes += tensor.size() + 64;
    ggml_init_params params{bytes, nullptr, false};
    std::unique_ptr<ggml_context, void (*)(ggml_context *)> context(ggml_init(params), &ggml_free);
    std::unique_ptr<gguf_context, void (*)(gguf_context *)> gguf(gguf_init_empty(), &gguf_free);
    gguf_set_val_str(gguf.get(), "general.name", "a test model");
    for (size_t i = 0; i < tensors.size(); ++i) {
        ggml_tensor *tensor = ggml_new_tensor_1d(context.get(), GGML_TYPE_I8, static_cast<int64_t>(tensors[i].size()));
        ggml_set_name(tensor, ("t" + std::to_string(i)).c_str());
        std::memcpy(tensor->data, tensors[i].data(), tensors[i].size());
        gguf_add_tensor(gguf.get(), tensor);
    }
    return gguf_write_to_file(gguf.get(), path.c_str(), false);
}

// Where each tensor's bytes start in the GGUF file at `path`; empty when it cannot be read.
inline std::vector<uint64_t> gguf_tensor_offsets(const std::string &path) {
    gguf_init_params params{true, nullptr};
    std::unique_ptr<gguf_context, void (*)(gguf_context *)> gguf(gguf_init_from_file(path.c_str(), params), &gguf_free);
    std::vector<uint64_t> offsets;
    if (!gguf) return offsets;
    for (int64_t i = 0; i < gguf_get_n_tensors(gguf.get()); ++i) {
        offsets.push_back(gguf_get_data_offset(gguf.get()) + gguf_get_tensor_offset(gguf.get(), i));
    }
    return offsets;
}

}  // namespace ggml_remote::test_support
