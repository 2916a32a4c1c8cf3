// The dispatcher fuzzer's compute gate: which validated graphs it really computes.
//
// Validation never depends on this; it only decides, after a graph passed every
// check, whether the fuzzer lets ggml run it. Two kinds are not run:
// - graphs whose data-dependent indexes (GET_ROWS, GET_ROWS_BACK, SET_ROWS row ids,
//   MUL_MAT_ID expert ids, ADD_ID ids) are out of range, or written by an earlier
//   node of the graph so that they cannot be checked beforehand: ggml aborts on them inside
//   the guest's worker, the known and contained gap of docs/SECURITY.md;
// - graphs whose work exceeds a budget, so that every input stays fast.
#pragma once

#include "host/op_validation.h"
#include "protocol/tensor_codec.h"

#include <ggml.h>

#include <cstdint>
#include <cstring>
#include <vector>

namespace ggml_remote::fuzz {

inline bool writes_nothing(ggml_op op) {
    return op == GGML_OP_NONE || op == GGML_OP_VIEW || op == GGML_OP_RESHAPE || op == GGML_OP_PERMUTE ||
           op == GGML_OP_TRANSPOSE;
}

struct AddressRange {
    uintptr_t begin = 0, end = 0;
    bool overlaps(const AddressRange &other) const { return begin < other.end && other.begin < end; }
};

// The bytes a validated tensor's elements may touch (graph_builder.cpp checked the span).
inline AddressRange address_range(const ggml_tensor *t) {
    uint64_t span = 0;
    if (!protocol::tensor_byte_span(t, &span)) span = UINT64_MAX / 2;
    const auto begin = reinterpret_cast<uintptr_t>(t->data);
    return {begin, begin + span};
}

inline uint64_t saturating_elements(const ggml_tensor *t) {
    if (t == nullptr) return 0;
    uint64_t n = 1;
    for (int d = 0; d < GGML_MAX_DIMS; ++d) {
        if (__builtin_mul_overflow(n, static_cast<uint64_t>(t->ne[d]), &n)) return UINT64_MAX;
    }
    return n;
}

inline uint64_t saturating_add(uint64_t a, uint64_t b) { return a + b < a ? UINT64_MAX : a + b; }
inline uint64_t saturating_mul(uint64_t a, uint64_t b) {
    uint64_t r = 0;
    return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}

// Roughly the element operations of one node.
inline uint64_t node_cost(const ggml_tensor *node) {
    if (writes_nothing(node->op)) return 0;
    uint64_t cost = saturating_elements(node);
    for (int s = 0; s < GGML_MAX_SRC; ++s) {
        if (node->src[s] != node) cost = saturating_add(cost, saturating_elements(node->src[s]));
    }
    switch (node->op) {
        case GGML_OP_MUL_MAT:
        case GGML_OP_MUL_MAT_ID:
        case GGML_OP_OUT_PROD:
            return saturating_add(cost, saturating_mul(saturating_elements(node), node->src[0]->ne[0]));
        case GGML_OP_FLASH_ATTN_EXT:  // every query row against every key row
            return saturating_add(cost, saturating_mul(saturating_elements(node->src[0]), node->src[1]->ne[1]));
        default:
            return cost;
    }
}

// Whether every index of `ids` lies in [0, bound) and nothing the graph writes
// before it is read overlaps it (then its values now are the values the kernel
// will read: ggml computes the nodes in order). `written`: what earlier nodes write.
inline bool indexes_in_range(const ggml_tensor *ids, int64_t bound, const std::vector<AddressRange> &written) {
    if (ids == nullptr || ids->data == nullptr || !ggml_is_contiguous(ids)) return false;
    if (ids->type != GGML_TYPE_I32 && ids->type != GGML_TYPE_I64) return false;
    const AddressRange range = address_range(ids);
    for (const AddressRange &w : written) {
        if (w.overlaps(range)) return false;
    }
    const auto *bytes = static_cast<const uint8_t *>(ids->data);
    const uint64_t n = saturating_elements(ids);
    const size_t size = ggml_type_size(ids->type);
    for (uint64_t i = 0; i < n; ++i) {
        int64_t value = 0;
        if (size == 4) {
            int32_t v;
            std::memcpy(&v, bytes + i * size, size);
            value = v;
        } else {
            std::memcpy(&value, bytes + i * size, size);
        }
        if (value < 0 || value >= bound) return false;
    }
    return true;
}

constexpr uint64_t kComputeBudget = 1ull << 26;

inline bool safe_to_compute(const ggml_cgraph *graph) {
    auto *g = const_cast<ggml_cgraph *>(graph);
    const int n = ggml_graph_n_nodes(g);
    uint64_t cost = 0;
    for (int i = 0; i < n; ++i) {
        const ggml_tensor *node = ggml_graph_node(g, i);
        cost = saturating_add(cost, node_cost(node));
    }
    if (cost > kComputeBudget) return false;
    std::vector<AddressRange> written;
    for (int i = 0; i < n; ++i) {
        const ggml_tensor *node = ggml_graph_node(g, i);
        bool ok = true;
        switch (node->op) {
            case GGML_OP_GET_ROWS: ok = indexes_in_range(node->src[1], node->src[0]->ne[1], written); break;
            case GGML_OP_GET_ROWS_BACK: ok = indexes_in_range(node->src[1], node->ne[1], written); break;
            case GGML_OP_SET_ROWS: ok = indexes_in_range(node->src[1], node->ne[1], written); break;
            case GGML_OP_MUL_MAT_ID: ok = indexes_in_range(node->src[2], node->src[0]->ne[2], written); break;
            case GGML_OP_ADD_ID: ok = indexes_in_range(node->src[2], node->src[1]->ne[1], written); break;
            default: break;
        }
        if (!ok) return false;
        if (!writes_nothing(node->op)) written.push_back(address_range(node));
    }
    return true;
}

}  // namespace ggml_remote::fuzz
