// Rotary position embeddings: ROPE and ROPE_BACK, in every mode ggml has.
#include <ggml-backend.h>

#include "host/worker/graph/ops/checks.h"
#include "host/worker/graph/ops/families.h"

namespace ggml_remote::host::ops {
namespace {

// The mrope sections (op_params[11..14]): ggml-cpu divides by their sum.
Why check_rope_sections(const ggml_tensor *node) {
    int64_t section_sum = 0;
    for (int i = 11; i < 15; ++i) {
        if (node->op_params[i] < 0) return "negative rope section " + std::to_string(node->op_params[i]);
        section_sum += node->op_params[i];
    }
    if (section_sum == 0 || section_sum > node->src[0]->ne[0]) {
        return "rope sections adding up to " + std::to_string(section_sum) + " do not fit " +
               described("src[0]", node->src[0]);
    }
    return {};
}

// op_params = {n_past, n_dims, mode, n_ctx, n_ctx_orig, 6 floats, 4 mrope sections,
// n_offs}. Beyond ggml's own asserts, ggml-cpu divides by the sum of the sections,
// writes rows in pairs of elements, and reads ne[0] / 2 frequency factors however
// few n_dims asks for.
Why check_rope_mode(const ggml_tensor *node) {
    const ggml_tensor *a = node->src[0];
    const int32_t n_dims = node->op_params[1], mode = node->op_params[2], n_offs = node->op_params[15];
    switch (mode) {
        case GGML_ROPE_TYPE_NORMAL:
        case GGML_ROPE_TYPE_NEOX:
        case GGML_ROPE_TYPE_MROPE:
        case GGML_ROPE_TYPE_IMROPE:
        case GGML_ROPE_TYPE_VISION:
            break;
        default:
            return "mode " + std::to_string(mode) + " is not supported";
    }
    // n_dims = 0 makes ggml-cpu's loop over the unrotated pairs step back for ever
    // (found by the session fuzzer).
    if (n_dims <= 0 || n_dims % 2 != 0 || n_offs < 0 || n_offs % 2 != 0 || int64_t(n_dims) + n_offs > a->ne[0]) {
        return "n_dims " + std::to_string(n_dims) + " at offset " + std::to_string(n_offs) + " does not fit " +
               described("src[0]", a);
    }
    if (mode == GGML_ROPE_TYPE_VISION && (int64_t(n_dims) * 2 != a->ne[0] || n_offs != 0)) {
        return "vision rope needs n_dims = ne[0] / 2 and no offset";
    }
    if ((mode & GGML_ROPE_TYPE_MROPE) == 0) return {};
    return check_rope_sections(node);
}

// Whether `count` elements of `t`, read as one dense array from its first byte,
// stay inside its buffer (the bytes past the tensor are the guest's own).
bool dense_read_fits_buffer(const ggml_tensor *t, int64_t count) {
    if (!ggml_is_contiguous(t)) return false;
    // A shape-only query (supports_op) is never computed; a compute checks again.
    if (t->buffer == nullptr || t->data == nullptr) return true;
    const auto *base = static_cast<const char *>(ggml_backend_buffer_get_base(t->buffer));
    const uint64_t offset = static_cast<uint64_t>(static_cast<const char *>(t->data) - base);
    const uint64_t bytes = static_cast<uint64_t>(count) * ggml_type_size(t->type);
    return offset <= ggml_backend_buffer_get_size(t->buffer) &&
           bytes <= ggml_backend_buffer_get_size(t->buffer) - offset;
}

Why check_rope(const ggml_tensor *node) {
    const ggml_tensor *a = node->src[0], *positions = node->src[1], *factors = node->src[2];
    Why why = first({source_type(node, 0, GGML_TYPE_F32, GGML_TYPE_F16), source_type(node, 1, GGML_TYPE_I32),
                     result_type(node, a->type), check_rope_mode(node)});
    if (!why.empty()) return why;
    if (a->ne[0] % 2 != 0) return described("src[0]", a) + " has an odd row length";
    if (!rows_are_dense(a) || !rows_are_dense(node)) return "src[0] or the result has rows that are not dense";
    const int64_t per_token = (node->op_params[2] & GGML_ROPE_TYPE_MROPE) != 0 ? 4 : 1;  // mrope: 4 positions
    if (!ggml_is_vector(positions) || positions->ne[0] / per_token != a->ne[2] || positions->ne[0] % per_token != 0) {
        return "positions " + shape_of(positions) + " do not fit " + described("src[0]", a) + " (" +
               std::to_string(per_token) + " per row of dim 2)";
    }
    if (factors != nullptr) {
        why = source_type(node, 2, GGML_TYPE_F32);
        if (!why.empty()) return why;
        if (factors->ne[0] < node->op_params[1] / 2 || !dense_read_fits_buffer(factors, a->ne[0] / 2)) {
            return "frequency factors " + shape_of(factors) + " are fewer than ne[0] / 2 within their buffer";
        }
    }
    return same_shape_as_source(node);
}

constexpr OpEntry kEntries[] = {
    // src[2] frequency factors are optional.
    ruled(GGML_OP_ROPE, 2, "r", check_rope),
    ruled(GGML_OP_ROPE_BACK, 2, "r", check_rope),
};

}  // namespace

const OpFamily kRopeOps{kEntries};

}  // namespace ggml_remote::host::ops
