// One entry per op a guest may send: everything the worker knows about GGML_OP_X
// (its sources, how its kernel reads each tensor, its rule, its constructor
// replay, its op_params ranges, the sources it writes in place, the indexes it
// follows) in one row of one family file (ops/*.cpp). ops/op_table.h looks the
// row up by op; an op without a row is refused.
#pragma once

#include <ggml.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "protocol/status.h"

namespace ggml_remote::host::ops {

// Why a node breaks its op's rules; empty when it does not.
using Why = std::string;
using Check = Why (*)(const ggml_tensor *node);
// ggml's own constructor for the op, called with the node's sources and the
// arguments its op_params encode (op_replay.h compares what it makes).
using Constructor = ggml_tensor *(*)(ggml_context * ctx, const ggml_tensor *node);
// Op-specific refusals of the source whose indexes a kernel follows.
using IndexRefusal = Status (*)(const ggml_tensor *node, const ggml_tensor *indexes);

// Names the result (kResult) or src[tensor] for an extent ne[dim].
constexpr int8_t kResult = -1;
struct Extent {
    int8_t tensor = kResult;
    int8_t dim = 0;
};
constexpr Extent result_ne(int dim) { return {kResult, int8_t(dim)}; }
constexpr Extent src_ne(int source, int dim) { return {int8_t(source), int8_t(dim)}; }

// The source whose elements the kernel follows as indexes (index_guard.h copies
// and checks them), and the extent each index must stay under.
struct IndexRead {
    int8_t source = -1;  // -1: the kernel follows no data
    Extent bound;
    // Copied so that it holds still, but not checked: values, not indexes (ARGSORT's,
    // which std::sort compares many times over).
    bool values_only = false;
    IndexRefusal refuse = nullptr;  // what no copy or check can make safe
};

struct OpEntry {
    ggml_op op = GGML_OP_COUNT;
    // src[0] to src[sources - 1] must be there; optional ones (past these) are
    // checked by the rule when present.
    int sources = 0;
    // How the kernel reads each tensor, one letter per tensor: the result first,
    // then src[0], src[1], ...; tensors past the end of the string take its last
    // letter.
    //   's' element by element through every stride: any layout is safe;
    //   'r' row by row: ggml-cpu asserts dense rows (nb[0] one element), checked
    //       before the op's own rule;
    //   'c' as one block: dense rows as 'r', then the whole tensor contiguous,
    //       checked after `geometry` and before the replay.
    const char *layout = "r";
    Check geometry = nullptr;      // op_params that the constructor takes on trust
    Constructor replay = nullptr;  // the node must be what ggml's constructor makes
    Check check = nullptr;         // the op's own rule, after the replay if any
    uint32_t written_sources = 0;  // bit i: the kernel also writes src[i] in place
    bool writes_nothing = false;   // a view: another look at src[0]'s bytes
    IndexRead index;

    // Builders, so that a row names only what its op has.
    constexpr OpEntry with_geometry(Check g) const {
        OpEntry e = *this;
        e.geometry = g;
        return e;
    }
    constexpr OpEntry then(Check c) const {
        OpEntry e = *this;
        e.check = c;
        return e;
    }
    constexpr OpEntry writing_sources(uint32_t mask) const {
        OpEntry e = *this;
        e.written_sources = mask;
        return e;
    }
    constexpr OpEntry following_indexes(int source, Extent bound, IndexRefusal refuse = nullptr) const {
        OpEntry e = *this;
        e.index.source = int8_t(source);
        e.index.bound = bound;
        e.index.refuse = refuse;
        return e;
    }
    constexpr OpEntry holding_values_still(int source) const {
        OpEntry e = *this;
        e.index.source = int8_t(source);
        e.index.values_only = true;
        return e;
    }
};

// An op checked by its own rule.
constexpr OpEntry ruled(ggml_op op, int sources, const char *layout, Check check) {
    OpEntry e;
    e.op = op;
    e.sources = sources;
    e.layout = layout;
    e.check = check;
    return e;
}

// An op checked by replaying ggml's constructor: for the ops llama.cpp rarely uses
// (convolutions, pooling, padding, the recurrent state ops, ...) every assertion
// ggml makes about them becomes our rule, without restating each one.
constexpr OpEntry replayed(ggml_op op, int sources, const char *layout, Constructor make) {
    OpEntry e;
    e.op = op;
    e.sources = sources;
    e.layout = layout;
    e.replay = make;
    return e;
}

// An op whose result is only another look at its source's bytes: it writes
// nothing, and graph_builder.cpp bounds-checks it against its buffer.
constexpr OpEntry view(ggml_op op, int sources) {
    OpEntry e;
    e.op = op;
    e.sources = sources;
    e.layout = "s";
    e.writes_nothing = true;
    return e;
}

// The rows one family file contributes to the table.
struct OpFamily {
    const OpEntry *entries;
    size_t count;
    template <size_t N>
    constexpr OpFamily(const OpEntry (&rows)[N]) : entries(rows), count(N) {}
};

}  // namespace ggml_remote::host::ops
