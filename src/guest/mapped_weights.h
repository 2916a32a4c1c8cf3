// Model weights that stay in the guest's own CPU buffers but are read on a remote
// device.
//
// llama.cpp keeps the token-embedding table on the CPU, in a "CPU_Mapped" buffer
// over its memory-mapped model file, and looks each batch's tokens up there with
// GET_ROWS. Run by the guest's CPU backend, that lookup wakes the guest's CPU
// threads for every token, and they then spin for the next graph on the cores the
// server computes on. So a remote device accepts CPU_Mapped buffers
// (supports_buft) for that op, and the host gets the table once: over shm it maps
// the same pages of the same file, over a socket it receives a copy, which stays
// valid because the guest's mapping is read-only.
#pragma once

#include <mutex>
#include <unordered_map>
#include <vector>

#include "abi/ggml_backend_abi_v3.h"
#include "guest/file_mapping.h"
#include "protocol/tensor_codec.h"

namespace ggml_remote::guest {

class RemoteDevice;

class MappedWeights {
  public:
    explicit MappedWeights(RemoteDevice *device) : device_(device) {}
    MappedWeights(const MappedWeights &) = delete;
    MappedWeights &operator=(const MappedWeights &) = delete;

    // Off (GuestOptions::mapped_weights), every op on CPU_Mapped weights stays on the CPU.
    void set_enabled(bool enabled) { enabled_ = enabled; }
    bool enabled() const { return enabled_; }
    // Whether `buft` is the CPU device's buffer type for memory-mapped weights.
    static bool is_mapped_weights_type(ggml_backend_buffer_type_t buft);

    // How `op` touches CPU_Mapped buffers: not at all, as the one lookup a remote
    // device takes over, or otherwise (then the device must refuse the op: ggml
    // would not copy those sources). The lookup is a GET_ROWS reading a read-only
    // file mapping that holds little besides that table: when the guest's CPU also
    // holds model layers (llama.cpp -ngl below the layer count), the looked-up rows
    // would only come back to them, one more hand-over per token.
    enum class Use { none, allowed, refused };
    Use classify(const ggml_tensor *op);

    // Before each graph is prepared: the host's copies are checked against the
    // guest's mappings again before their first use (a model may have been freed
    // and another mapped at the same address).
    void begin_graph();
    // Before a graph that reads `tensor` is encoded: when it lies in a CPU_Mapped
    // buffer, the host's copy of its bytes is checked, or made on first use (this
    // talks to the host). False when it should have a copy and cannot.
    bool prepare(const ggml_tensor *tensor);
    // A TensorListEncoder locator for tensors in CPU_Mapped buffers: where the
    // host's copy of the bytes is, as prepare() left it; never talks to the host.
    bool locate(const ggml_tensor *tensor, protocol::TensorLocation *location);

  private:
    // The host's copy (or mapping) of one weight tensor's bytes.
    struct HostCopy {
        ggml_backend_buffer_t buffer = nullptr;  // one of ours
        const uint8_t *begin = nullptr;          // the guest's bytes
        size_t size = 0;
        MappedFile file;
        bool checked = false;  // since begin_graph()
    };
    bool readable_file(const ggml_tensor *weight);
    HostCopy *copy_of(const ggml_tensor *weight);
    const HostCopy *prepared_copy_of(const ggml_tensor *weight) const;
    ggml_backend_buffer_t make_host_copy(const uint8_t *begin, size_t size);

    RemoteDevice *device_;
    bool enabled_ = true;
    std::mutex mutex_;
    std::vector<HostCopy> copies_;
    std::unordered_map<const void *, bool> readable_;  // by data address: a read-only file mapping?
};

}  // namespace ggml_remote::guest
