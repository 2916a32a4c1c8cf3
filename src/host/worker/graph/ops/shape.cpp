// Ops that rearrange or resize a tensor: REPEAT, REPEAT_BACK, CONCAT, DIAG, and the
// replayed PAD, PAD_REFLECT_1D, ROLL and UPSCALE.
#include "host/worker/graph/ops/checks.h"
#include "host/worker/graph/ops/families.h"

namespace ggml_remote::host::ops {
namespace {

Why check_repeat(const ggml_tensor *node) {
    if (!ggml_can_repeat(node->src[0], node))
        return described("src[0]", node->src[0]) + " cannot be repeated to " + described("result", node);
    return {};
}

Why check_repeat_back(const ggml_tensor *node) {
    if (!ggml_can_repeat(node, node->src[0]))
        return described("result", node) + " cannot be repeated to " + described("src[0]", node->src[0]);
    return {};
}

Why check_concat(const ggml_tensor *node) {
    const ggml_tensor *a = node->src[0], *b = node->src[1];
    const int32_t dim = node->op_params[0];
    if (dim < 0 || dim >= GGML_MAX_DIMS) return "dimension " + std::to_string(dim) + " does not exist";
    if (a->type != b->type || node->type != a->type) return "src[0], src[1] and the result differ in type";
    int64_t ne[GGML_MAX_DIMS];
    for (int d = 0; d < GGML_MAX_DIMS; ++d) {
        if (d != dim && a->ne[d] != b->ne[d]) {
            return described("src[0]", a) + " and " + described("src[1]", b) + " differ outside dimension " +
                   std::to_string(dim);
        }
        if (d == dim && __builtin_add_overflow(a->ne[d], b->ne[d], &ne[d])) return "concatenated size overflows";
        if (d != dim) ne[d] = a->ne[d];
    }
    return result_shape(node, ne[0], ne[1], ne[2], ne[3]);
}

Why check_diag(const ggml_tensor *node) {
    const ggml_tensor *a = node->src[0];
    if (a->ne[1] != 1) return described("src[0]", a) + " is not a row";
    return result_shape(node, a->ne[0], a->ne[0], a->ne[2], a->ne[3]);
}

ggml_tensor *make_pad(ggml_context *ctx, const ggml_tensor *node) {
    const int32_t *p = node->op_params;
    if (param(node, 8) == 1)
        return ggml_pad_ext_circular(ctx, src(node, 0), p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7]);
    return ggml_pad_ext(ctx, src(node, 0), p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7]);
}

// op_params = {8 paddings, circular}.
Why pad_geometry(const ggml_tensor *node) {
    if (param(node, 8) != 0 && param(node, 8) != 1) return "circular must be 0 or 1";
    return params_in_range(node, {}, {0, 1, 2, 3, 4, 5, 6, 7});
}

ggml_tensor *make_pad_reflect_1d(ggml_context *ctx, const ggml_tensor *node) {
    return ggml_pad_reflect_1d(ctx, src(node, 0), param(node, 0), param(node, 1));
}

ggml_tensor *make_roll(ggml_context *ctx, const ggml_tensor *node) {
    return ggml_roll(ctx, src(node, 0), param(node, 0), param(node, 1), param(node, 2), param(node, 3));
}

ggml_tensor *make_upscale(ggml_context *ctx, const ggml_tensor *node) {
    return ggml_interpolate(ctx, src(node, 0), node->ne[0], node->ne[1], node->ne[2], node->ne[3],
                            static_cast<uint32_t>(param(node, 0)));
}

constexpr OpEntry kEntries[] = {
    ruled(GGML_OP_REPEAT, 1, "r", check_repeat),
    ruled(GGML_OP_REPEAT_BACK, 1, "r", check_repeat_back),
    ruled(GGML_OP_CONCAT, 2, "r", check_concat),
    ruled(GGML_OP_DIAG, 1, "r", check_diag),
    // PAD, ROLL and UPSCALE walk every tensor element by element.
    replayed(GGML_OP_PAD, 1, "s", make_pad).with_geometry(pad_geometry),
    replayed(GGML_OP_PAD_REFLECT_1D, 1, "rc", make_pad_reflect_1d),
    replayed(GGML_OP_ROLL, 1, "s", make_roll),
    replayed(GGML_OP_UPSCALE, 1, "s", make_upscale),
};

}  // namespace

const OpFamily kShapeOps{kEntries};

}  // namespace ggml_remote::host::ops
