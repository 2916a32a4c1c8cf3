// The guest's ggml buffers on a remote device: their three forms, the calls that
// move tensor data, and what a new connection can put back of each.
#pragma once

#include <string>
#include <vector>

#include "abi/ggml_backend_abi_v3.h"
#include "guest/device.h"
#include "guest/file_mapping.h"
#include "guest/session/restorable.h"
#include "protocol/tensor_codec.h"
#include "transport/shared_memory.h"

namespace ggml_remote::guest {

// A buffer on a remote device, in one of three forms:
// - remote: the memory is on the host only. The base is a reserved, inaccessible
//   address range of the buffer's size, so tensor addresses stay unique and aligned
//   as ggml expects and a stray access from the guest faults instead of reading
//   garbage; data moves in messages.
// - shared: a memory file mapped by both sides; tensors are read and written in
//   place with no message, and the host computes in the same pages.
// - file: the guest's own read-only mapping of model weights, which the host maps
//   from the same file (or holds a copy of).
struct RemoteBuffer : Restorable {
    enum class Kind { remote, shared, file };
    // What of a remote buffer's contents a new connection can put back: nothing
    // written yet, a clear, weights written from files the guest holds (sources),
    // or bytes only the host held (written by the application or by a graph).
    enum class Content { fresh, cleared, sourced, host_only };
    // Bytes written from the guest's read-only mapping of a model file.
    struct WeightSource {
        uint64_t offset = 0;  // in the buffer
        uint64_t size = 0;
        MappedFile file;  // where the bytes are
    };
    Kind kind = Kind::remote;
    RemoteDevice *device = nullptr;
    ggml_backend_buffer_t owner = nullptr;  // the ggml buffer this one backs
    uint64_t handle = 0;
    void *base = nullptr;
    void *reservation = nullptr;  // remote: the reserved address range
    size_t reservation_size = 0;
    Mapping mapping;             // shared: this side's mapping of the memory file
    UniqueFd memory_file;        // shared: the memory file, handed back on a new connection
    size_t max_tensor_size = 0;  // file: as ggml asked
    bool weights_told = false;   // the host has been told this buffer holds weights
    bool restorable = false;     // in the session's list of objects to restore (leaves it when destroyed)
    Content content = Content::fresh;
    // A graph wrote into the buffer: its contents are the host's for good, even
    // after a clear (the same graph, replayed, writes again unseen).
    bool graph_target = false;
    uint8_t clear_value = 0;
    std::vector<WeightSource> sources;
    // A new connection could not put the contents back (the buffer now holds
    // zeros), and the application has not been told yet: the next compute that
    // reads the buffer fails, naming it, unless the application writes or clears
    // all of it first.
    bool lost = false;

    RemoteBuffer() = default;
    RemoteBuffer(const RemoteBuffer &) = delete;
    RemoteBuffer &operator=(const RemoteBuffer &) = delete;
    ~RemoteBuffer() override;

    // The handle and offset of a tensor's data (plus `offset`) in this buffer.
    protocol::BufferRange range(const ggml_tensor *tensor, size_t offset, size_t size) const;
    // Reads bytes of a tensor in this (remote) buffer, in chunks within the
    // server's message limit. `deferred`: the name of a read whose replies wait in
    // line (run_later); null to wait for each. On failure the rest of `data` is
    // zeroed, never left uninitialised.
    Status read_tensor(const ggml_tensor *tensor, size_t offset, void *data, size_t size, const char *deferred);
    // Notes a write of [offset, +size) from `data` (a whole-buffer write makes a
    // lost buffer good again); `data` null: not from a file (a memset, a copy).
    void note_write(uint64_t offset, uint64_t size, const void *data);
    void note_clear(uint8_t value);
    // A graph writes into (or reads scratch of) this buffer.
    void note_graph_use();
    // Names the buffer in messages: its type, size and usage.
    std::string describe() const;
    void restore(SessionCalls &calls, RestoreReport *report) override;
    // The application is told, by a failed compute: the zeros are its to use.
    void lost_was_reported() { set_lost(false); }

  private:
    void set_lost(bool now_lost);
    Status restore_remote(SessionCalls &calls, RestoreReport *report);
    Status restore_sources(SessionCalls &calls);
};

// How many remote buffers are lost now: computes check their graphs only then.
size_t lost_buffer_count();

// Whether a ggml buffer is one of ours (and then its RemoteBuffer).
RemoteBuffer *remote_buffer_of(ggml_backend_buffer_t buffer);
// The RemoteBuffer holding a tensor's bytes (its own buffer or its view source's), if ours.
RemoteBuffer *remote_buffer_of(const ggml_tensor *tensor);
// A TensorListEncoder locator: where a tensor's bytes are on the host, when they
// are in one of our buffers (of `session`, unless it is null).
bool locate_on_host(const RemoteSession *session, const ggml_tensor *tensor, protocol::TensorLocation *location);
// Tells the host, once, that the buffer holding a tensor holds weights (as
// llama.cpp marks its model's buffers): the host may then repack them.
void tell_weights(const ggml_tensor *tensor);

// A host buffer over [ptr, +size) of the guest's CPU memory (shared-memory
// sessions): the host maps the file behind it, or gets a copy when it cannot.
// `calls`: the session's, or its pipeline while restoring.
bool host_buffer_of_memory(SessionCalls &calls, RemoteDevice *device, void *ptr, size_t size, size_t max_tensor_size,
                           uint64_t *handle);
// A tensor of `size` bytes at `data` in `buffer`, as ggml would pass one to a
// buffer's set_tensor.
ggml_tensor byte_tensor(ggml_backend_buffer_t buffer, void *data, size_t size);
// Writes bytes into a remote buffer as set_tensor does (the store first, else
// chunks), without noting the write: restoring weights from their source.
void upload_to(SessionCalls &calls, RemoteBuffer *remote, uint64_t offset, const void *data, size_t size);

ggml_backend_buffer_t allocate_remote_buffer(ggml_backend_buffer_type_t buft, size_t size);
// ggml's buffer_from_host_ptr for shared-memory devices: `ptr` is normally a mapped
// model file, which the host then maps too.
ggml_backend_buffer_t remote_buffer_from_host_ptr(ggml_backend_dev_t dev, void *ptr, size_t size,
                                                  size_t max_tensor_size);

}  // namespace ggml_remote::guest
