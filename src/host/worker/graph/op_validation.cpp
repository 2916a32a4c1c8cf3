// A guest describes each node field by field, so nothing guarantees that a node came
// out of ggml_add() or ggml_mul_mat(): a source may be missing, or the shapes may
// break the op's rules. ggml's CPU kernels do not check again (their shape checks are
// assert(), compiled out in release builds), so such a node would dereference a null
// source, read or write past its tensors, or abort the worker on a GGML_ASSERT.
//
// The rules are those of ggml's op constructors (ggml.c of libggml 0.27.0), plus the
// few relations that the CPU kernels rely on without asserting them, one row per op
// in the op table (ops/op_table.h). This file runs every row the same way. Each
// tensor's own bytes are bounds-checked against its buffer in graph_builder.cpp;
// the rules check how the tensors of one node fit together.
//
// Not checked here, because they are tensor data that exists only at compute time:
// the indexes a row declares it follows (row ids, expert ids, sequence ids).
// index_guard.h checks them, in a private copy that the kernel then reads, before
// each compute (or between segments of it).
#include "host/worker/graph/op_validation.h"

#include <cstring>
#include <string>

#include "host/worker/graph/op_replay.h"
#include "host/worker/graph/ops/checks.h"
#include "host/worker/graph/ops/op_table.h"
#include "protocol/printable.h"
#include "protocol/tensor_codec.h"

namespace ggml_remote::host {

namespace {

using ops::OpEntry;
using ops::src_label;
using ops::Why;

// decode_tensor_list refuses these first; validate_node does not rely on it.
bool known_type(const ggml_tensor *t) {
    return t->type >= 0 && t->type < GGML_TYPE_COUNT && ggml_blck_size(t->type) > 0 && ggml_type_size(t->type) > 0;
}

// Whether a tensor claims no more elements than the bytes its strides span can hold.
// ggml's tensors never do (their elements do not overlap); a guest's can, with zero or
// tiny strides, and ggml-cpu sizes its work buffer from element counts: a 4 KiB tensor
// that claims 2^50 elements makes it allocate petabytes (std::bad_alloc, which
// terminates the worker), and one of 2^36 makes it allocate and touch 100 GB.
bool elements_fit_span(const ggml_tensor *t, std::string *why) {
    for (int d = 0; d < GGML_MAX_DIMS; ++d) {
        if (t->ne[d] == 0) return true;  // no elements
    }
    uint64_t span = 0, dense = ggml_type_size(t->type);
    bool overflow = !protocol::tensor_byte_span(t, &span);
    for (int d = 0; d < GGML_MAX_DIMS && !overflow; ++d) {
        const uint64_t count = d == 0 ? uint64_t(t->ne[0] / ggml_blck_size(t->type)) : uint64_t(t->ne[d]);
        overflow = __builtin_mul_overflow(dense, count, &dense);
    }
    if (!overflow && dense <= span) return true;
    *why = ops::shape_of(t) + " of " + ggml_type_name(t->type) + " claims more elements than the " +
           (overflow ? std::string("bytes") : std::to_string(span) + " bytes") + " its strides span";
    return false;
}

// The layout letter of tensor `k` (0: the result, i + 1: src[i]); see OpEntry::layout.
char layout_of(const char *layout, size_t letters, int k) {
    return size_t(k) < letters ? layout[k] : layout[letters - 1];
}

// Every tensor of the node exists as a type, has an element count that does not
// overflow, and claims no more elements than its strides span.
Why check_tensors(const ggml_tensor *node) {
    int64_t count = 0;
    std::string overlap;
    if (!known_type(node)) return "type " + std::to_string(node->type) + " does not exist";
    if (!ops::element_count(node, &count)) return "the result's element count overflows";
    if (!elements_fit_span(node, &overlap)) return "result " + overlap;
    for (int i = 0; i < GGML_MAX_SRC; ++i) {
        const ggml_tensor *t = node->src[i];
        if (t == nullptr) continue;
        if (!known_type(t)) return src_label(i) + " type " + std::to_string(t->type) + " does not exist";
        if (!ops::element_count(t, &count)) return src_label(i) + "'s element count overflows";
        if (!elements_fit_span(t, &overlap)) return src_label(i) + " " + overlap;
    }
    return {};
}

// ggml-cpu walks the tensors of layout 'r' and 'c' as rows of adjacent elements
// and asserts that their rows are dense: a node whose rows are not is refused here.
Why check_dense_rows(const ggml_tensor *node, const OpEntry &entry) {
    const size_t letters = std::strlen(entry.layout);
    if (layout_of(entry.layout, letters, 0) != 's' && !ops::rows_are_dense(node)) {
        return "the result's rows are not dense";
    }
    for (int i = 0; i < GGML_MAX_SRC; ++i) {
        const ggml_tensor *t = node->src[i];
        if (t != nullptr && layout_of(entry.layout, letters, i + 1) != 's' && !ops::rows_are_dense(t)) {
            return src_label(i) + " rows are not dense";
        }
    }
    return {};
}

// The tensors of layout 'c' are read as one block.
Why check_blocks(const ggml_tensor *node, const OpEntry &entry) {
    const size_t letters = std::strlen(entry.layout);
    if (layout_of(entry.layout, letters, 0) == 'c' && !ggml_is_contiguous(node)) return "the result is not contiguous";
    for (int i = 0; i < GGML_MAX_SRC; ++i) {
        const ggml_tensor *t = node->src[i];
        if (t != nullptr && layout_of(entry.layout, letters, i + 1) == 'c' && !ggml_is_contiguous(t)) {
            return src_label(i) + " is not contiguous";
        }
    }
    return {};
}

// The row's checks, in the order that keeps each safe: the op_params a constructor
// takes on trust before it runs, the layouts before the replay reads the sources,
// the op's own rule last (it may rely on what the replay proved).
Why check_row(const ggml_tensor *node, const OpEntry &entry) {
    Why why = check_dense_rows(node, entry);
    if (why.empty() && entry.geometry != nullptr) why = entry.geometry(node);
    if (why.empty()) why = check_blocks(node, entry);
    if (why.empty() && entry.replay != nullptr) why = replay_constructor(node, entry.replay);
    if (why.empty() && entry.check != nullptr) why = entry.check(node);
    return why;
}

}  // namespace

bool op_has_rule(ggml_op op) { return ops::op_entry(op) != nullptr; }

uint32_t sources_written_in_place(ggml_op op) {
    const OpEntry *entry = ops::op_entry(op);
    return entry == nullptr ? 0 : entry->written_sources;
}

Status validate_node(const ggml_tensor *node) {
    const std::string name = " node '" + printable(node->name) + "': ";
    // Read as a number: an id outside the enum is not a value of ggml_op.
    static_assert(sizeof(ggml_op) == sizeof(int32_t), "op ids are 32-bit on the wire");
    int32_t op_id;
    std::memcpy(&op_id, &node->op, sizeof op_id);
    if (op_id < 0 || op_id >= GGML_OP_COUNT) {
        return error(Code::bad_request, "op " + std::to_string(op_id) + name + "unknown op");
    }
    const char *op = ggml_op_name(node->op);
    const auto refuse = [&](const std::string &why) { return error(Code::bad_request, op + name + why); };

    const OpEntry *entry = ops::op_entry(node->op);
    if (entry == nullptr) return refuse("op is not accepted from a guest");
    const int required = entry->sources;
    for (int i = 0; i < required; ++i) {
        if (node->src[i] == nullptr) {
            return refuse(src_label(i) + " is missing (" + op + " needs " + std::to_string(required) + " sources)");
        }
    }
    Why why = check_tensors(node);
    if (why.empty()) why = check_row(node, *entry);
    if (!why.empty()) return refuse(why);
    return Status::success();
}

}  // namespace ggml_remote::host
