// The dispatcher fuzzer's compute gate: which validated graphs it really computes.
//
// Validation never depends on this; it only decides, after a graph passed every
// check, whether the fuzzer lets ggml run it: not when its work exceeds a budget,
// so that every input stays fast. Data-dependent indexes (GET_ROWS, SET_ROWS,
// MUL_MAT_ID, ...) out of range, or computed by the graph, are computed: the
// session's index guard must refuse them, and one it misses is a finding (ggml
// aborts on it, or the write-set oracle sees the stray write).
#pragma once

#include <ggml.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "host/worker/graph/op_validation.h"
#include "protocol/tensor_codec.h"

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

constexpr uint64_t kComputeBudget = 1ull << 26;

inline bool safe_to_compute(const ggml_cgraph *graph) {
    auto *g = const_cast<ggml_cgraph *>(graph);
    const int n = ggml_graph_n_nodes(g);
    uint64_t cost = 0;
    for (int i = 0; i < n; ++i) {
        const ggml_tensor *node = ggml_graph_node(g, i);
        cost = saturating_add(cost, node_cost(node));
    }
    return cost <= kComputeBudget;
}

}  // namespace ggml_remote::fuzz
