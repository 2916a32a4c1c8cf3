// WeightRepack: the host CPU's fastest weight layouts for a remote guest's weights.
//
// Locally, llama.cpp puts each matrix weight that a CPU "extra" buffer type can
// serve (ggml-cpu's REPACK for Q4_0, Q4_K, IQ4_NL...; AMX on Sapphire Rapids for
// F16 and the Q types) into that type, whose set_tensor rearranges the bytes for
// its kernels. A remote device is a GPU to llama.cpp, which offers such types to
// the CPU device alone, so a guest's weights arrive in plain buffers and the host
// computes with the slow kernels (prompt processing at well under half of local
// speed: docs/BENCHMARKS.md, "Weights repacked", has the figures).
//
// So the host repacks them itself: at the first graph in which a MUL_MAT or
// MUL_MAT_ID reads a weight from a read-only buffer (a model file the guest
// mapped) or from one the guest named as weights (llama.cpp's usage flag), it
// copies the weight once into the first extra buffer type that supports the op
// and points the op at the copy. A write into the source range (a command, a
// graph, or the guest's own write into shared memory, which it reports) makes
// the copy be repacked again before the next compute.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <tuple>
#include <vector>

#include "ggml-backend.h"
#include "protocol/content_digest.h"

namespace ggml_remote::host {

// What a repacked image was made from: a range of a session's buffer.
struct ImageSource {
    uint64_t buffer = 0;  // the session's handle
    uint64_t offset = 0;
    uint64_t size = 0;
};

// Where repacked images are shared with other sessions (the weight store: sessions
// of one tenant that compute with the same weights map one image).
class RepackedImages {
  public:
    virtual ~RepackedImages() = default;
    // Fills `size` bytes at `image` (page-aligned) from the image named `key`; false
    // when there is none.
    virtual bool fill(const protocol::ContentDigest &key, uint8_t *image, uint64_t size) = 0;
    // Offers the image just made at `image` to other sessions; its pages may be
    // swapped for the shared ones later, and `lost()` is called if that fails.
    virtual void share(const protocol::ContentDigest &key, uint8_t *image, uint64_t size, const ImageSource &source,
                       std::function<void()> lost) = 0;
};

class WeightRepack {
  public:
    // `charge(bytes)` asks the session for memory (its quota; false: no copy),
    // `charge(-bytes)` gives it back.
    using Charge = std::function<bool(int64_t bytes)>;

    WeightRepack() = default;
    ~WeightRepack();
    WeightRepack(const WeightRepack &) = delete;
    WeightRepack &operator=(const WeightRepack &) = delete;

    // Points each matrix product of `graph` whose weight may be copied (`source_of`
    // names its buffer: a handle and that buffer's size, or 0) at a repacked copy,
    // making the copies it lacks. Returns how many ops now read a copy.
    int apply(ggml_backend_dev_t device, ggml_cgraph *graph,
              const std::function<uint64_t(const ggml_tensor *weight, uint64_t *buffer_size)> &source_of,
              const Charge &charge);
    // Frees the copies made from a buffer (it is being freed); returns their bytes.
    uint64_t forget(uint64_t buffer);
    // Bytes [offset, offset + size) of a buffer are about to change: the copies of
    // weights there are repacked again by refresh().
    void written(uint64_t buffer, uint64_t offset, uint64_t size);
    // Repacks the copies whose weights changed; before every compute.
    void refresh();

    size_t copies() const { return copies_.size(); }
    // At most this many copies; a weight beyond them is computed from as it is.
    void set_max_copies(size_t max_copies) { max_copies_ = max_copies; }
    // Copies are looked for in `images`, and those made are shared there (null: none).
    void share_images(RepackedImages *images) { images_ = images; }

  private:
    struct BufferDeleter {
        void operator()(ggml_backend_buffer_t buffer) const { ggml_backend_buffer_free(buffer); }
    };
    struct ContextDeleter {
        void operator()(ggml_context *context) const;
    };
    struct Copy {
        std::unique_ptr<ggml_context, ContextDeleter> context;
        std::unique_ptr<ggml_backend_buffer, BufferDeleter> buffer;
        ggml_tensor *tensor = nullptr;
        uint64_t source = 0;  // the buffer handle it was copied from
        uint64_t source_offset = 0;
        const void *source_data = nullptr;
        uint64_t source_bytes = 0;
        uint64_t bytes = 0;
        bool stale = false;
    };
    // What identifies a weight: its buffer, place and layout.
    using Key = std::tuple<uint64_t, uint64_t, int, std::vector<int64_t>, std::vector<size_t>>;

    ggml_tensor *copy_for(ggml_backend_dev_t device, const std::vector<ggml_backend_buffer_type_t> &extra_types,
                          ggml_tensor *op, uint64_t buffer, uint64_t buffer_size, const Charge &charge);
    // Makes the copy's bytes: from a shared image, or by repacking (then shared).
    void fill_copy(Copy *copy, const ggml_tensor *weight, ggml_backend_buffer_type_t type);

    std::map<Key, std::unique_ptr<Copy>> copies_;
    std::set<Key> refused_;  // weights with no faster layout (or no room for one)
    std::map<uint64_t, uint64_t> bytes_by_buffer_;
    bool any_stale_ = false;
    size_t max_copies_ = SIZE_MAX;
    RepackedImages *images_ = nullptr;
};

}  // namespace ggml_remote::host
