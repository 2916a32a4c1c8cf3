// Convolutions, im2col and pooling, all checked by replaying ggml's constructor
// after their strides, paddings and dilations are found in range.
#include "host/worker/graph/ops/checks.h"
#include "host/worker/graph/ops/families.h"

namespace ggml_remote::host::ops {
namespace {

ggml_tensor *make_conv_transpose_1d(ggml_context *ctx, const ggml_tensor *node) {
    return ggml_conv_transpose_1d(ctx, src(node, 0), src(node, 1), param(node, 0), param(node, 1), param(node, 2));
}
Why conv_transpose_1d_geometry(const ggml_tensor *node) { return params_in_range(node, {0, 2}, {1}); }

ggml_tensor *make_conv_transpose_2d(ggml_context *ctx, const ggml_tensor *node) {
    return ggml_conv_transpose_2d_p0(ctx, src(node, 0), src(node, 1), param(node, 0));
}
Why conv_transpose_2d_geometry(const ggml_tensor *node) { return params_in_range(node, {0}, {}); }

ggml_tensor *make_im2col(ggml_context *ctx, const ggml_tensor *node) {
    return ggml_im2col(ctx, src(node, 0), src(node, 1), param(node, 0), param(node, 1), param(node, 2), param(node, 3),
                       param(node, 4), param(node, 5), param(node, 6) != 0, node->type);
}
Why im2col_geometry(const ggml_tensor *node) {
    const int32_t is_2d = param(node, 6);
    if (is_2d != 0 && is_2d != 1) return "is_2D must be 0 or 1";
    return is_2d != 0 ? params_in_range(node, {0, 1, 4, 5}, {2, 3}) : params_in_range(node, {0, 4}, {2});
}

ggml_tensor *make_im2col_3d(ggml_context *ctx, const ggml_tensor *node) {
    return ggml_im2col_3d(ctx, src(node, 0), src(node, 1), param(node, 9), param(node, 0), param(node, 1),
                          param(node, 2), param(node, 3), param(node, 4), param(node, 5), param(node, 6),
                          param(node, 7), param(node, 8), node->type);
}
Why im2col_3d_geometry(const ggml_tensor *node) { return params_in_range(node, {0, 1, 2, 6, 7, 8, 9}, {3, 4, 5}); }

ggml_tensor *make_conv_2d(ggml_context *ctx, const ggml_tensor *node) {
    return ggml_conv_2d_direct(ctx, src(node, 0), src(node, 1), param(node, 0), param(node, 1), param(node, 2),
                               param(node, 3), param(node, 4), param(node, 5));
}
Why conv_2d_geometry(const ggml_tensor *node) { return params_in_range(node, {0, 1, 4, 5}, {2, 3}); }

ggml_tensor *make_conv_2d_dw(ggml_context *ctx, const ggml_tensor *node) {
    return ggml_conv_2d_dw_direct(ctx, src(node, 0), src(node, 1), param(node, 0), param(node, 1), param(node, 2),
                                  param(node, 3), param(node, 4), param(node, 5));
}

// ggml-cpu computes a dense kernel over an input that is either contiguous or
// channels-first contiguous (CWHN), and aborts on anything else.
Why check_conv_2d_dw(const ggml_tensor *node) {
    const ggml_tensor *kernel = node->src[0], *input = node->src[1];
    const size_t element = ggml_type_size(kernel->type);
    // The CWHN kernel: channels (dim 3) innermost, then x, then y.
    const bool cwhn_kernel = kernel->nb[3] == element && kernel->nb[0] == size_t(kernel->ne[3]) * element &&
                             kernel->nb[1] == kernel->nb[0] * size_t(kernel->ne[0]);
    if (!ggml_is_contiguous(kernel) && !cwhn_kernel) return "the kernel is neither contiguous nor CWHN";
    if (!ggml_is_contiguous(input) && !ggml_is_contiguous_channels(input)) return "the input is neither WHCN nor CWHN";
    return {};
}

ggml_tensor *make_conv_3d(ggml_context *ctx, const ggml_tensor *node) {
    return ggml_conv_3d_direct(ctx, src(node, 0), src(node, 1), param(node, 0), param(node, 1), param(node, 2),
                               param(node, 3), param(node, 4), param(node, 5), param(node, 6), param(node, 7),
                               param(node, 8), param(node, 9), param(node, 10), param(node, 11));
}
Why conv_3d_geometry(const ggml_tensor *node) {
    return params_in_range(node, {0, 1, 2, 6, 7, 8, 9, 10, 11}, {3, 4, 5});
}

ggml_tensor *make_col2im_1d(ggml_context *ctx, const ggml_tensor *node) {
    return ggml_col2im_1d(ctx, src(node, 0), param(node, 0), param(node, 1), param(node, 2));
}
Why col2im_1d_geometry(const ggml_tensor *node) { return params_in_range(node, {0, 1}, {2}); }

ggml_tensor *make_pool_1d(ggml_context *ctx, const ggml_tensor *node) {
    return ggml_pool_1d(ctx, src(node, 0), static_cast<ggml_op_pool>(param(node, 0)), param(node, 1), param(node, 2),
                        param(node, 3));
}
Why pool_1d_geometry(const ggml_tensor *node) {
    if (param(node, 0) != GGML_OP_POOL_MAX && param(node, 0) != GGML_OP_POOL_AVG) return "unknown pooling";
    return params_in_range(node, {1, 2}, {3});
}

ggml_tensor *make_pool_2d(ggml_context *ctx, const ggml_tensor *node) {
    return ggml_pool_2d(ctx, src(node, 0), static_cast<ggml_op_pool>(param(node, 0)), param(node, 1), param(node, 2),
                        param(node, 3), param(node, 4), float(param(node, 5)), float(param(node, 6)));
}
Why pool_2d_geometry(const ggml_tensor *node) {
    if (param(node, 0) != GGML_OP_POOL_MAX && param(node, 0) != GGML_OP_POOL_AVG) return "unknown pooling";
    return params_in_range(node, {1, 2, 3, 4}, {5, 6});
}

constexpr OpEntry kEntries[] = {
    replayed(GGML_OP_CONV_TRANSPOSE_1D, 2, "rc", make_conv_transpose_1d).with_geometry(conv_transpose_1d_geometry),
    replayed(GGML_OP_CONV_TRANSPOSE_2D, 2, "rc", make_conv_transpose_2d).with_geometry(conv_transpose_2d_geometry),
    replayed(GGML_OP_IM2COL, 2, "rc", make_im2col).with_geometry(im2col_geometry),
    // The kernel reads src[0] and src[1] row by row.
    replayed(GGML_OP_IM2COL_3D, 2, "rrrc", make_im2col_3d).with_geometry(im2col_3d_geometry),
    // A contiguous kernel over an input walked through its strides.
    replayed(GGML_OP_CONV_2D, 2, "scs", make_conv_2d).with_geometry(conv_2d_geometry),
    replayed(GGML_OP_CONV_2D_DW, 2, "s", make_conv_2d_dw).with_geometry(conv_2d_geometry).then(check_conv_2d_dw),
    replayed(GGML_OP_CONV_3D, 2, "rc", make_conv_3d).with_geometry(conv_3d_geometry),
    replayed(GGML_OP_COL2IM_1D, 1, "rc", make_col2im_1d).with_geometry(col2im_1d_geometry),
    replayed(GGML_OP_POOL_1D, 1, "rc", make_pool_1d).with_geometry(pool_1d_geometry),
    replayed(GGML_OP_POOL_2D, 1, "rc", make_pool_2d).with_geometry(pool_2d_geometry),
};

}  // namespace

const OpFamily kConvolutionOps{kEntries};

}  // namespace ggml_remote::host::ops
