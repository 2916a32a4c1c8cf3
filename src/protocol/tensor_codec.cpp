#include "protocol/tensor_codec.h"

#include <algorithm>
#include <cstring>

#include "protocol/printable.h"

namespace ggml_remote::protocol {

namespace {

bool op_carries_function_pointers(int32_t op) {
    return op == GGML_OP_MAP_CUSTOM1 || op == GGML_OP_MAP_CUSTOM2 || op == GGML_OP_MAP_CUSTOM3 || op == GGML_OP_CUSTOM;
}

Status bad(const std::string &what) { return error(Code::bad_request, what); }

// Whether ggml_new_tensor accepts the shape: it asserts (GGML_ASSERT, an abort) that
// the element count, multiplied up one dimension at a time, stays below INT64_MAX,
// and a zero extent does not end its check. The same rule, with zeros counted as
// ones, refuses every shape it aborts on (and a few absurd ones it would take). A
// tensor with zero strides can claim that many elements and still fit its buffer.
bool element_count_fits(const WireTensor &t) {
    int64_t count = t.ne[0] > 0 ? t.ne[0] : 1;
    for (int d = 1; d < GGML_MAX_DIMS; ++d) {
        if (t.ne[d] <= 1) continue;
        if (INT64_MAX / t.ne[d] <= count) return false;
        count *= t.ne[d];
    }
    return true;
}

// A guest's tensor, named in an error: the name is the guest's, so it is escaped.
std::string tensor_label(size_t index, const WireTensor &t) {
    const std::string_view name(t.name, strnlen(t.name, sizeof(t.name)));
    return "tensor " + std::to_string(index) + (name.empty() ? "" : " '" + printable(name) + "'");
}

}  // namespace

TensorListEncoder::TensorListEncoder(Locator locator) : locator_(std::move(locator)) {}

WireTensor TensorListEncoder::describe(const ggml_tensor *tensor) {
    WireTensor wire;
    std::memset(&wire, 0, sizeof(wire));
    wire.type = tensor->type;
    wire.op = tensor->op;
    for (int i = 0; i < GGML_MAX_DIMS; ++i) {
        wire.ne[i] = tensor->ne[i];
        wire.nb[i] = tensor->nb[i];
    }
    std::memcpy(wire.op_params, tensor->op_params, sizeof(wire.op_params));
    wire.flags = tensor->flags;
    wire.view_offs = tensor->view_offs;
    wire.view_src = -1;
    for (int i = 0; i < GGML_MAX_SRC; ++i) wire.src[i] = -1;
    if (locator_) {
        std::memcpy(wire.name, tensor->name, sizeof(wire.name));
        wire.name[sizeof(wire.name) - 1] = '\0';
        TensorLocation location;
        if (tensor->data != nullptr) {
            if (!locator_(tensor, &location)) {
                if (error_.empty()) {
                    error_ = std::string("tensor '") + tensor->name + "' (" + ggml_op_desc(tensor) +
                             ") is not in a buffer of this remote device";
                }
            }
        }
        wire.buffer = location.buffer;
        wire.data_offset = location.offset;
    }
    return wire;
}

int32_t TensorListEncoder::add(const ggml_tensor *root) {
    if (root == nullptr) return -1;
    auto found = index_.find(root);
    if (found != index_.end()) return found->second;

    // Iterative post-order walk: graphs can be thousands of nodes deep.
    struct Frame {
        const ggml_tensor *tensor;
        int next_dependency;  // 0..GGML_MAX_SRC-1 = src[i], GGML_MAX_SRC = view_src
    };
    std::vector<Frame> stack{{root, 0}};
    while (!stack.empty()) {
        Frame &frame = stack.back();
        if (frame.next_dependency <= GGML_MAX_SRC) {
            const int d = frame.next_dependency++;
            const ggml_tensor *dep = d < GGML_MAX_SRC ? frame.tensor->src[d] : frame.tensor->view_src;
            if (dep != nullptr && dep != frame.tensor && index_.find(dep) == index_.end()) stack.push_back({dep, 0});
            continue;
        }
        const ggml_tensor *tensor = frame.tensor;
        stack.pop_back();
        if (index_.count(tensor) != 0) continue;  // reached twice through a diamond
        WireTensor wire = describe(tensor);
        for (int i = 0; i < GGML_MAX_SRC; ++i) {
            if (tensor->src[i] == tensor) {
                wire.src[i] = kSelf;
            } else if (tensor->src[i] != nullptr) {
                wire.src[i] = index_.at(tensor->src[i]);
            }
        }
        if (tensor->view_src != nullptr) wire.view_src = index_.at(tensor->view_src);
        const int32_t index = static_cast<int32_t>(tensors_.size());
        index_.emplace(tensor, index);
        tensors_.push_back(wire);
        order_.push_back(tensor);
    }
    return index_.at(root);
}

void TensorListEncoder::add_node(const ggml_tensor *tensor) { nodes_.push_back(add(tensor)); }

int32_t TensorListEncoder::add_op_with_sources(const ggml_tensor *op) {
    WireTensor wire = describe(op);
    for (int i = 0; i < GGML_MAX_SRC; ++i) {
        const ggml_tensor *src = op->src[i];
        if (src == nullptr) continue;
        if (src == op) {
            wire.src[i] = kSelf;
            continue;
        }
        auto found = index_.find(src);
        if (found == index_.end()) {
            WireTensor leaf = describe(src);
            leaf.op = GGML_OP_NONE;  // where a source came from does not matter here
            std::memset(leaf.op_params, 0, sizeof(leaf.op_params));
            found = index_.emplace(src, static_cast<int32_t>(tensors_.size())).first;
            tensors_.push_back(leaf);
            order_.push_back(src);
        }
        wire.src[i] = found->second;
    }
    const int32_t index = static_cast<int32_t>(tensors_.size());
    tensors_.push_back(wire);
    order_.push_back(op);
    return index;
}

int32_t TensorListEncoder::add_storage(const ggml_tensor *tensor) {
    if (tensor == nullptr) return -1;
    auto found = index_.find(tensor);
    if (found != index_.end()) return found->second;
    // Views of views are a short chain: recursion stays shallow.
    const int32_t view_src =
        tensor->view_src != nullptr && tensor->view_src != tensor ? add_storage(tensor->view_src) : -1;
    WireTensor wire = describe(tensor);
    wire.op = GGML_OP_NONE;
    std::memset(wire.op_params, 0, sizeof(wire.op_params));
    wire.view_src = view_src;
    const int32_t index = static_cast<int32_t>(tensors_.size());
    index_.emplace(tensor, index);
    tensors_.push_back(wire);
    order_.push_back(tensor);
    return index;
}

std::vector<uint8_t> TensorListEncoder::finish() {
    std::vector<uint8_t> out;
    out.reserve(sizeof(TensorListHeader) + tensors_.size() * sizeof(WireTensor) + nodes_.size() * 4);
    TensorListHeader header{static_cast<uint32_t>(tensors_.size()), static_cast<uint32_t>(nodes_.size())};
    append_pod(out, header);
    const auto *tensor_bytes = reinterpret_cast<const uint8_t *>(tensors_.data());
    out.insert(out.end(), tensor_bytes, tensor_bytes + tensors_.size() * sizeof(WireTensor));
    const auto *node_bytes = reinterpret_cast<const uint8_t *>(nodes_.data());
    out.insert(out.end(), node_bytes, node_bytes + nodes_.size() * sizeof(int32_t));
    return out;
}

bool tensor_byte_span(const ggml_tensor *tensor, uint64_t *span) {
    WireTensor wire{};
    wire.type = tensor->type;
    for (int d = 0; d < GGML_MAX_DIMS; ++d) {
        wire.ne[d] = tensor->ne[d];
        wire.nb[d] = tensor->nb[d];
    }
    return tensor_byte_span(wire, span);
}

bool tensor_byte_span(const WireTensor &t, uint64_t *span) {
    const auto type = static_cast<ggml_type>(t.type);
    if (t.type < 0 || t.type >= GGML_TYPE_COUNT || ggml_blck_size(type) <= 0) return false;
    const uint64_t block = static_cast<uint64_t>(ggml_blck_size(type));
    const uint64_t type_size = ggml_type_size(type);
    for (int i = 0; i < GGML_MAX_DIMS; ++i) {
        if (t.ne[i] == 0) {
            *span = 0;
            return true;
        }
    }
    // Highest byte any element touches: each dimension's last index times its stride,
    // plus one block.
    uint64_t last = 0;
    for (int i = 0; i < GGML_MAX_DIMS; ++i) {
        const uint64_t count = i == 0 ? static_cast<uint64_t>(t.ne[0]) / block : static_cast<uint64_t>(t.ne[i]);
        uint64_t step = 0;
        if (__builtin_mul_overflow(count - 1, t.nb[i], &step) || __builtin_add_overflow(last, step, &last)) {
            return false;
        }
    }
    uint64_t exact = 0;
    if (__builtin_add_overflow(last, type_size, &exact)) return false;
    if (block == 1) {
        *span = exact;  // the same as ggml_nbytes
        return true;
    }
    // For block types, ggml_nbytes (which copies use) counts the first row in full.
    uint64_t row = 0, nbytes = 0;
    if (__builtin_mul_overflow(static_cast<uint64_t>(t.ne[0]) / block, t.nb[0], &row) ||
        __builtin_add_overflow(last - (static_cast<uint64_t>(t.ne[0]) / block - 1) * t.nb[0], row, &nbytes)) {
        return false;
    }
    *span = std::max(exact, nbytes);
    return true;
}

Status decode_tensor_list(ByteView bytes, const TensorListLimits &limits, TensorList *list) {
    TensorListHeader header;
    if (!read_pod(bytes, 0, &header)) return bad("tensor list: truncated header");
    if (header.n_tensors > limits.max_tensors) {
        return bad("tensor list: " + std::to_string(header.n_tensors) + " tensors exceed the limit of " +
                   std::to_string(limits.max_tensors));
    }
    if (header.n_nodes > limits.max_nodes) {
        return bad("tensor list: " + std::to_string(header.n_nodes) + " nodes exceed the limit of " +
                   std::to_string(limits.max_nodes));
    }
    const uint64_t expected = sizeof(TensorListHeader) + uint64_t(header.n_tensors) * sizeof(WireTensor) +
                              uint64_t(header.n_nodes) * sizeof(int32_t);
    if (bytes.size != expected) {
        return bad("tensor list: " + std::to_string(bytes.size) + " bytes, expected " + std::to_string(expected));
    }
    list->tensors.resize(header.n_tensors);
    if (header.n_tensors > 0) {
        std::memcpy(list->tensors.data(), bytes.data + sizeof(TensorListHeader),
                    size_t(header.n_tensors) * sizeof(WireTensor));
    }
    list->nodes.resize(header.n_nodes);
    if (header.n_nodes > 0) {
        std::memcpy(list->nodes.data(),
                    bytes.data + sizeof(TensorListHeader) + size_t(header.n_tensors) * sizeof(WireTensor),
                    size_t(header.n_nodes) * sizeof(int32_t));
    }

    for (size_t i = 0; i < list->tensors.size(); ++i) {
        WireTensor &t = list->tensors[i];
        t.name[sizeof(t.name) - 1] = '\0';
        if (t.type < 0 || t.type >= GGML_TYPE_COUNT || ggml_blck_size(static_cast<ggml_type>(t.type)) <= 0 ||
            ggml_type_size(static_cast<ggml_type>(t.type)) == 0) {
            return bad(tensor_label(i, t) + ": invalid type " + std::to_string(t.type));
        }
        if (t.op < 0 || t.op >= GGML_OP_COUNT) return bad(tensor_label(i, t) + ": invalid op " + std::to_string(t.op));
        if (op_carries_function_pointers(t.op)) {
            return bad(tensor_label(i, t) + ": op " + ggml_op_name(static_cast<ggml_op>(t.op)) +
                       " carries host function pointers and is refused");
        }
        for (int d = 0; d < GGML_MAX_DIMS; ++d) {
            if (t.ne[d] < 0) return bad(tensor_label(i, t) + ": negative ne[" + std::to_string(d) + "]");
        }
        if (!element_count_fits(t)) return bad(tensor_label(i, t) + ": the element count overflows");
        const int64_t block = ggml_blck_size(static_cast<ggml_type>(t.type));
        if (t.ne[0] % block != 0) {
            return bad(tensor_label(i, t) + ": ne[0]=" + std::to_string(t.ne[0]) + " is not a multiple of the " +
                       ggml_type_name(static_cast<ggml_type>(t.type)) + " block size " + std::to_string(block));
        }
        uint64_t span = 0;
        if (!tensor_byte_span(t, &span)) return bad(tensor_label(i, t) + ": shape and strides overflow");
        for (int s = 0; s < GGML_MAX_SRC; ++s) {
            if (t.src[s] == kSelf) continue;
            if (t.src[s] < -1 || t.src[s] >= static_cast<int64_t>(i)) {
                return bad(tensor_label(i, t) + ": src[" + std::to_string(s) + "] index " + std::to_string(t.src[s]) +
                           " does not name an earlier tensor");
            }
        }
        if (t.view_src < -1 || t.view_src >= static_cast<int64_t>(i)) {
            return bad(tensor_label(i, t) + ": view_src index " + std::to_string(t.view_src) +
                       " does not name an earlier tensor");
        }
        if (t.buffer == 0 && t.data_offset != 0) return bad(tensor_label(i, t) + ": data offset without a buffer");
    }
    for (size_t n = 0; n < list->nodes.size(); ++n) {
        if (list->nodes[n] < 0 || static_cast<size_t>(list->nodes[n]) >= list->tensors.size()) {
            return bad("tensor list: node " + std::to_string(n) + " names tensor " + std::to_string(list->nodes[n]) +
                       " of " + std::to_string(list->tensors.size()));
        }
    }
    return Status::success();
}

}  // namespace ggml_remote::protocol
