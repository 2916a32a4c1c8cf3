// Tensors and graphs on the wire.
//
// A tensor list is a TensorListHeader, n_tensors WireTensors and n_nodes int32
// node indexes. Tensors refer to their sources and view sources by index into the
// same list, always to an earlier entry, so a list is acyclic by construction.
// Data is located by buffer handle + offset from the buffer's start; a tensor with
// buffer 0 has no data (supports_op / alloc_size queries).
#pragma once

#include <ggml.h>

#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "protocol/status.h"
#include "protocol/wire.h"

namespace ggml_remote::protocol {

// A source that is the tensor itself: ggml_cast makes a CPY whose destination
// (src[1]) is its own result. The only reference that is not to an earlier entry.
constexpr int32_t kSelf = -2;

#pragma pack(push, 1)
struct TensorListHeader {
    uint32_t n_tensors;
    uint32_t n_nodes;
};

struct WireTensor {
    int32_t type;
    int32_t op;
    int64_t ne[GGML_MAX_DIMS];
    uint64_t nb[GGML_MAX_DIMS];
    int32_t op_params[GGML_MAX_OP_PARAMS / sizeof(int32_t)];
    int32_t flags;
    int32_t view_src;  // index into the list, or -1
    uint64_t view_offs;
    int32_t src[GGML_MAX_SRC];  // indexes into the list, -1, or kSelf
    uint64_t buffer;            // handle, 0 = no data
    uint64_t data_offset;       // from the buffer's start
    char name[GGML_MAX_NAME];
};
#pragma pack(pop)
static_assert(sizeof(WireTensor) == 4 + 4 + 32 + 32 + 64 + 4 + 4 + 8 + 40 + 8 + 8 + 64, "wire tensor layout");

// Where a guest tensor's data lives: a buffer handle and an offset, or
// buffer == 0 for a tensor with no data.
struct TensorLocation {
    uint64_t buffer = 0;
    uint64_t offset = 0;
};

// Builds a tensor list from ggml tensors, sources before their users.
class TensorListEncoder {
  public:
    // Returns false when the tensor's data is somewhere the host cannot reach.
    using Locator = std::function<bool(const ggml_tensor *tensor, TensorLocation *location)>;

    // `locator` may be empty: then no tensor has data and names are left out,
    // which makes the bytes a signature of the op (for caching queries).
    explicit TensorListEncoder(Locator locator);

    // Adds a tensor and everything it depends on; returns its index or -1.
    int32_t add(const ggml_tensor *tensor);
    // Adds a tensor and marks it as a graph node to compute, in call order.
    void add_node(const ggml_tensor *tensor);
    // Adds an op and its direct sources only, the sources as plain leaves: what a
    // device needs to say whether it supports the op, and a small cache key.
    int32_t add_op_with_sources(const ggml_tensor *op);
    // Adds a tensor as a plain leaf, after the views it lies in, without its op
    // or sources: what a buffer's init_tensor needs (its sources may lie anywhere,
    // in the guest's own memory too).
    int32_t add_storage(const ggml_tensor *tensor);

    // The tensors added so far, in list order (sources before their users).
    const std::vector<const ggml_tensor *> &order() const { return order_; }

    bool failed() const { return !error_.empty(); }
    const std::string &error() const { return error_; }
    std::vector<uint8_t> finish();

  private:
    WireTensor describe(const ggml_tensor *tensor);

    Locator locator_;
    std::unordered_map<const ggml_tensor *, int32_t> index_;
    std::vector<WireTensor> tensors_;
    std::vector<const ggml_tensor *> order_;
    std::vector<int32_t> nodes_;
    std::string error_;
};

// A tensor list that passed the structural checks (see decode_tensor_list).
struct TensorList {
    std::vector<WireTensor> tensors;
    std::vector<int32_t> nodes;
};

// Limits for a decoded list; the host sets them from its flags.
struct TensorListLimits {
    uint32_t max_tensors = 1u << 20;
    uint32_t max_nodes = 1u << 20;
};

// Decodes and checks everything that can be checked without the session's
// buffers: counts and sizes, type and op ids, shapes, block alignment, index
// ranges, ops that carry function pointers.
Status decode_tensor_list(ByteView bytes, const TensorListLimits &limits, TensorList *list);

// The number of bytes from a tensor's data pointer to one past the last byte
// that an op may touch, from ne and nb (at least ggml_nbytes). False on overflow.
bool tensor_byte_span(const WireTensor &tensor, uint64_t *span);
// The same for a tensor the host built (its type, ne and nb).
bool tensor_byte_span(const ggml_tensor *tensor, uint64_t *span);

}  // namespace ggml_remote::protocol
