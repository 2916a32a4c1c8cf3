#include "host/worker/graph/op_replay.h"

#include <csetjmp>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <mutex>

namespace ggml_remote::host {

namespace {

// --- Turning ggml's aborts inside a replay into refusals -----------------------
//
// ggml_abort calls the abort callback and then abort(). While a replay runs on
// this thread, the callback jumps back to it instead. Only ggml's constructors run
// between the jump's two ends (C code that holds no locks and owns nothing but
// objects in the replay's own scratch context), so nothing is left half done.
// A division by a guest's zero inside a constructor (SIGFPE) takes the same way.

thread_local sigjmp_buf *t_replay_jump = nullptr;
thread_local char t_abort_message[256];
ggml_abort_callback_t g_previous_abort_callback = nullptr;

void on_ggml_abort(const char *message) {
    if (t_replay_jump != nullptr) {
        std::snprintf(t_abort_message, sizeof(t_abort_message), "%s", message);
        siglongjmp(*t_replay_jump, 1);
    }
    if (g_previous_abort_callback != nullptr) {
        g_previous_abort_callback(message);
    } else {
        std::fprintf(stderr, "%s\n", message);  // what ggml prints without a callback
    }
}

void on_arithmetic_trap(int signal) {
    if (t_replay_jump != nullptr) {
        std::snprintf(t_abort_message, sizeof(t_abort_message), "arithmetic trap");
        siglongjmp(*t_replay_jump, 1);
    }
    // Not ours: the default action ends the process when the instruction traps again.
    std::signal(signal, SIG_DFL);
}

void install_traps_once() {
    static std::once_flag once;
    std::call_once(once, [] {
        g_previous_abort_callback = ggml_set_abort_callback(on_ggml_abort);
        struct sigaction action {};
        action.sa_handler = on_arithmetic_trap;
        sigemptyset(&action.sa_mask);
        sigaction(SIGFPE, &action, nullptr);
    });
}

// --- Calling each constructor with the node's own arguments ---------------------

int32_t param(const ggml_tensor *node, int i) { return node->op_params[i]; }

float float_param(const ggml_tensor *node, int i) {
    float value = 0.0f;
    std::memcpy(&value, &node->op_params[i], sizeof(value));
    return value;
}

using Constructor = ggml_tensor *(*)(ggml_context *ctx, const ggml_tensor *node);

// ggml's constructors take non-const sources; they only read them.
ggml_tensor *src(const ggml_tensor *node, int i) { return node->src[i]; }

ggml_tensor *make_arange(ggml_context *ctx, const ggml_tensor *node) {
    return ggml_arange(ctx, float_param(node, 0), float_param(node, 1), float_param(node, 2));
}

ggml_tensor *make_timestep_embedding(ggml_context *ctx, const ggml_tensor *node) {
    return ggml_timestep_embedding(ctx, src(node, 0), param(node, 0), param(node, 1));
}

ggml_tensor *make_conv_transpose_1d(ggml_context *ctx, const ggml_tensor *node) {
    return ggml_conv_transpose_1d(ctx, src(node, 0), src(node, 1), param(node, 0), param(node, 1), param(node, 2));
}

ggml_tensor *make_conv_transpose_2d(ggml_context *ctx, const ggml_tensor *node) {
    return ggml_conv_transpose_2d_p0(ctx, src(node, 0), src(node, 1), param(node, 0));
}

ggml_tensor *make_im2col(ggml_context *ctx, const ggml_tensor *node) {
    return ggml_im2col(ctx, src(node, 0), src(node, 1), param(node, 0), param(node, 1), param(node, 2),
                       param(node, 3), param(node, 4), param(node, 5), param(node, 6) != 0, node->type);
}

ggml_tensor *make_im2col_3d(ggml_context *ctx, const ggml_tensor *node) {
    return ggml_im2col_3d(ctx, src(node, 0), src(node, 1), param(node, 9), param(node, 0), param(node, 1),
                          param(node, 2), param(node, 3), param(node, 4), param(node, 5), param(node, 6),
                          param(node, 7), param(node, 8), node->type);
}

ggml_tensor *make_conv_2d(ggml_context *ctx, const ggml_tensor *node) {
    return ggml_conv_2d_direct(ctx, src(node, 0), src(node, 1), param(node, 0), param(node, 1), param(node, 2),
                               param(node, 3), param(node, 4), param(node, 5));
}

ggml_tensor *make_conv_2d_dw(ggml_context *ctx, const ggml_tensor *node) {
    return ggml_conv_2d_dw_direct(ctx, src(node, 0), src(node, 1), param(node, 0), param(node, 1), param(node, 2),
                                  param(node, 3), param(node, 4), param(node, 5));
}

ggml_tensor *make_conv_3d(ggml_context *ctx, const ggml_tensor *node) {
    return ggml_conv_3d_direct(ctx, src(node, 0), src(node, 1), param(node, 0), param(node, 1), param(node, 2),
                               param(node, 3), param(node, 4), param(node, 5), param(node, 6), param(node, 7),
                               param(node, 8), param(node, 9), param(node, 10), param(node, 11));
}

ggml_tensor *make_col2im_1d(ggml_context *ctx, const ggml_tensor *node) {
    return ggml_col2im_1d(ctx, src(node, 0), param(node, 0), param(node, 1), param(node, 2));
}

ggml_tensor *make_pool_1d(ggml_context *ctx, const ggml_tensor *node) {
    return ggml_pool_1d(ctx, src(node, 0), static_cast<ggml_op_pool>(param(node, 0)), param(node, 1), param(node, 2),
                        param(node, 3));
}

ggml_tensor *make_pool_2d(ggml_context *ctx, const ggml_tensor *node) {
    return ggml_pool_2d(ctx, src(node, 0), static_cast<ggml_op_pool>(param(node, 0)), param(node, 1), param(node, 2),
                        param(node, 3), param(node, 4), float(param(node, 5)), float(param(node, 6)));
}

ggml_tensor *make_upscale(ggml_context *ctx, const ggml_tensor *node) {
    return ggml_interpolate(ctx, src(node, 0), node->ne[0], node->ne[1], node->ne[2], node->ne[3],
                            static_cast<uint32_t>(param(node, 0)));
}

ggml_tensor *make_pad(ggml_context *ctx, const ggml_tensor *node) {
    const int32_t *p = node->op_params;
    if (param(node, 8) == 1) return ggml_pad_ext_circular(ctx, src(node, 0), p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7]);
    return ggml_pad_ext(ctx, src(node, 0), p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7]);
}

ggml_tensor *make_pad_reflect_1d(ggml_context *ctx, const ggml_tensor *node) {
    return ggml_pad_reflect_1d(ctx, src(node, 0), param(node, 0), param(node, 1));
}

ggml_tensor *make_roll(ggml_context *ctx, const ggml_tensor *node) {
    return ggml_roll(ctx, src(node, 0), param(node, 0), param(node, 1), param(node, 2), param(node, 3));
}

ggml_tensor *make_tri(ggml_context *ctx, const ggml_tensor *node) {
    return ggml_tri(ctx, src(node, 0), static_cast<ggml_tri_type>(param(node, 0)));
}

ggml_tensor *make_ssm_conv(ggml_context *ctx, const ggml_tensor *node) {
    return ggml_ssm_conv(ctx, src(node, 0), src(node, 1));
}

ggml_tensor *make_ssm_scan(ggml_context *ctx, const ggml_tensor *node) {
    return ggml_ssm_scan(ctx, src(node, 0), src(node, 1), src(node, 2), src(node, 3), src(node, 4), src(node, 5),
                         src(node, 6), param(node, 0));
}

ggml_tensor *make_rwkv_wkv6(ggml_context *ctx, const ggml_tensor *node) {
    return ggml_rwkv_wkv6(ctx, src(node, 0), src(node, 1), src(node, 2), src(node, 3), src(node, 4), src(node, 5));
}

ggml_tensor *make_rwkv_wkv7(ggml_context *ctx, const ggml_tensor *node) {
    return ggml_rwkv_wkv7(ctx, src(node, 0), src(node, 1), src(node, 2), src(node, 3), src(node, 4), src(node, 5),
                          src(node, 6));
}

ggml_tensor *make_gated_linear_attn(ggml_context *ctx, const ggml_tensor *node) {
    return ggml_gated_linear_attn(ctx, src(node, 0), src(node, 1), src(node, 2), src(node, 3), src(node, 4),
                                  float_param(node, 0));
}

ggml_tensor *make_gated_delta_net(ggml_context *ctx, const ggml_tensor *node) {
    return ggml_gated_delta_net(ctx, src(node, 0), src(node, 1), src(node, 2), src(node, 3), src(node, 4),
                                src(node, 5), param(node, 0));
}

ggml_tensor *make_solve_tri(ggml_context *ctx, const ggml_tensor *node) {
    return ggml_solve_tri(ctx, src(node, 0), src(node, 1), true, true, false);  // the only variant ggml has
}

ggml_tensor *make_cross_entropy_loss_back(ggml_context *ctx, const ggml_tensor *node) {
    return ggml_cross_entropy_loss_back(ctx, src(node, 0), src(node, 1), src(node, 2));
}

ggml_tensor *make_opt_step_adamw(ggml_context *ctx, const ggml_tensor *node) {
    return ggml_opt_step_adamw(ctx, src(node, 0), src(node, 1), src(node, 2), src(node, 3), src(node, 4));
}

ggml_tensor *make_opt_step_sgd(ggml_context *ctx, const ggml_tensor *node) {
    return ggml_opt_step_sgd(ctx, src(node, 0), src(node, 1), src(node, 2));
}

ggml_tensor *make_lightning_indexer(ggml_context *ctx, const ggml_tensor *node) {
    return ggml_lightning_indexer(ctx, src(node, 0), src(node, 1), src(node, 2), src(node, 3));
}

ggml_tensor *make_dsv4_hc_comb(ggml_context *ctx, const ggml_tensor *node) {
    return ggml_dsv4_hc_comb(ctx, src(node, 0), src(node, 1), src(node, 2), float_param(node, 0), param(node, 1));
}

// The gated form makes the same op from a gate, with op_params = {scale, 1}.
ggml_tensor *make_dsv4_hc_pre(ggml_context *ctx, const ggml_tensor *node) {
    if (node->op_params[1] != 0) return ggml_dsv4_hc_pre_gated(ctx, src(node, 0), src(node, 1), float_param(node, 0));
    return ggml_dsv4_hc_pre(ctx, src(node, 0), src(node, 1));
}

ggml_tensor *make_dsv4_hc_post(ggml_context *ctx, const ggml_tensor *node) {
    return ggml_dsv4_hc_post(ctx, src(node, 0), src(node, 1), src(node, 2), src(node, 3));
}

struct Replay {
    ggml_op op;
    Constructor make;
    // How the kernel reads each source, one letter per source from src[0] (a source
    // past the end of the string is 'c'): 'c' as one contiguous block, so it must
    // be contiguous; 'r' row by row through its strides, so its rows must be dense;
    // 's' element by element through its strides, so any layout the constructor
    // accepts is safe.
    const char *source_layouts;
};

constexpr Replay kReplays[] = {
    {GGML_OP_ARANGE, make_arange, ""},
    {GGML_OP_TIMESTEP_EMBEDDING, make_timestep_embedding, ""},
    {GGML_OP_CONV_TRANSPOSE_1D, make_conv_transpose_1d, ""},
    {GGML_OP_CONV_TRANSPOSE_2D, make_conv_transpose_2d, ""},
    {GGML_OP_IM2COL, make_im2col, ""},
    {GGML_OP_IM2COL_3D, make_im2col_3d, "sr"},
    {GGML_OP_CONV_2D, make_conv_2d, "cs"},
    {GGML_OP_CONV_2D_DW, make_conv_2d_dw, "ss"},
    {GGML_OP_CONV_3D, make_conv_3d, ""},
    {GGML_OP_COL2IM_1D, make_col2im_1d, ""},
    {GGML_OP_POOL_1D, make_pool_1d, ""},
    {GGML_OP_POOL_2D, make_pool_2d, ""},
    {GGML_OP_UPSCALE, make_upscale, "ss"},
    {GGML_OP_PAD, make_pad, "ss"},
    {GGML_OP_PAD_REFLECT_1D, make_pad_reflect_1d, ""},
    {GGML_OP_ROLL, make_roll, "ss"},
    {GGML_OP_TRI, make_tri, ""},
    {GGML_OP_SSM_CONV, make_ssm_conv, ""},
    {GGML_OP_SSM_SCAN, make_ssm_scan, ""},
    {GGML_OP_RWKV_WKV6, make_rwkv_wkv6, ""},
    {GGML_OP_RWKV_WKV7, make_rwkv_wkv7, ""},
    {GGML_OP_GATED_LINEAR_ATTN, make_gated_linear_attn, ""},
    {GGML_OP_GATED_DELTA_NET, make_gated_delta_net, "rrrccc"},
    {GGML_OP_SOLVE_TRI, make_solve_tri, ""},
    {GGML_OP_CROSS_ENTROPY_LOSS_BACK, make_cross_entropy_loss_back, ""},
    {GGML_OP_OPT_STEP_ADAMW, make_opt_step_adamw, ""},
    {GGML_OP_OPT_STEP_SGD, make_opt_step_sgd, ""},
    {GGML_OP_LIGHTNING_INDEXER, make_lightning_indexer, ""},
    {GGML_OP_DSV4_HC_COMB, make_dsv4_hc_comb, ""},
    {GGML_OP_DSV4_HC_PRE, make_dsv4_hc_pre, ""},
    {GGML_OP_DSV4_HC_POST, make_dsv4_hc_post, ""},
};

const Replay *find_replay(ggml_op op) {
    for (const Replay &replay : kReplays) {
        if (replay.op == op) return &replay;
    }
    return nullptr;
}

// Arguments the constructors take on trust; out of range they overflow the
// constructors' own arithmetic or make kernels loop for ever. Convolutions and
// pooling: strides, dilations and kernel sizes of at least 1, paddings of at
// least 0; everything far below the 2^31 where ggml's int arithmetic wraps.
std::string check_geometry(const ggml_tensor *node) {
    constexpr int32_t kLimit = 1 << 16;
    auto in = [](int32_t value, int32_t low) { return value >= low && value <= kLimit; };
    const int32_t *p = node->op_params;
    auto all = [&](std::initializer_list<int> positive, std::initializer_list<int> non_negative) {
        for (int i : positive) {
            if (!in(p[i], 1)) return "op_params[" + std::to_string(i) + "] = " + std::to_string(p[i]) + " out of range";
        }
        for (int i : non_negative) {
            if (!in(p[i], 0)) return "op_params[" + std::to_string(i) + "] = " + std::to_string(p[i]) + " out of range";
        }
        return std::string();
    };
    switch (node->op) {
        case GGML_OP_CONV_TRANSPOSE_1D: return all({0, 2}, {1});
        case GGML_OP_CONV_TRANSPOSE_2D: return all({0}, {});
        case GGML_OP_IM2COL:
            if (p[6] != 0 && p[6] != 1) return "is_2D must be 0 or 1";
            return p[6] != 0 ? all({0, 1, 4, 5}, {2, 3}) : all({0, 4}, {2});
        case GGML_OP_IM2COL_3D: return all({0, 1, 2, 6, 7, 8, 9}, {3, 4, 5});
        case GGML_OP_CONV_2D:
        case GGML_OP_CONV_2D_DW: return all({0, 1, 4, 5}, {2, 3});
        case GGML_OP_CONV_3D: return all({0, 1, 2, 6, 7, 8, 9, 10, 11}, {3, 4, 5});
        case GGML_OP_COL2IM_1D: return all({0, 1}, {2});
        case GGML_OP_POOL_1D:
            if (p[0] != GGML_OP_POOL_MAX && p[0] != GGML_OP_POOL_AVG) return "unknown pooling";
            return all({1, 2}, {3});
        case GGML_OP_POOL_2D:
            if (p[0] != GGML_OP_POOL_MAX && p[0] != GGML_OP_POOL_AVG) return "unknown pooling";
            return all({1, 2, 3, 4}, {5, 6});
        case GGML_OP_PAD:
            if (p[8] != 0 && p[8] != 1) return "circular must be 0 or 1";
            return all({}, {0, 1, 2, 3, 4, 5, 6, 7});
        case GGML_OP_TIMESTEP_EMBEDDING: return all({0, 1}, {});
        case GGML_OP_TRI:
            if (p[0] < GGML_TRI_TYPE_UPPER_DIAG || p[0] > GGML_TRI_TYPE_LOWER) return "unknown triangle";
            return {};
        case GGML_OP_SSM_SCAN:
        case GGML_OP_GATED_DELTA_NET: return all({0}, {});
        case GGML_OP_DSV4_HC_COMB: return all({1}, {});  // iterations: a huge count would spin the worker
        case GGML_OP_ARANGE: {
            const float start = float_param(node, 0), stop = float_param(node, 1), step = float_param(node, 2);
            // Compared this way, NaN and infinities fail too.
            if (!(step > 0.0f) || !(stop > start) || !((stop - start) / step < float(1 << 30))) {
                return "start, stop and step do not make a range";
            }
            return {};
        }
        default: return {};
    }
}

std::string shape_text(const ggml_tensor *t) {
    return "[" + std::to_string(t->ne[0]) + ", " + std::to_string(t->ne[1]) + ", " + std::to_string(t->ne[2]) + ", " +
           std::to_string(t->ne[3]) + "] " + ggml_type_name(t->type);
}

// What differs between the guest's node and the constructor's.
std::string compare(const ggml_tensor *node, const ggml_tensor *made) {
    if (made->op != node->op) return "ggml makes a different op from these arguments";
    if (made->type != node->type || !ggml_are_same_shape(made, node)) {
        return "the result " + shape_text(node) + " should be " + shape_text(made);
    }
    if (!ggml_are_same_stride(made, node)) return "the result's strides differ from the ones ggml gives it";
    if (std::memcmp(made->op_params, node->op_params, sizeof(made->op_params)) != 0) {
        return "op_params hold values ggml's constructor does not set";
    }
    for (int i = 0; i < GGML_MAX_SRC; ++i) {
        if (made->src[i] != node->src[i]) return "src[" + std::to_string(i) + "] should not be there";
    }
    // An in-place op (the optimizer steps) writes into its first source.
    if (made->view_src != nullptr && node->data != static_cast<char *>(made->view_src->data) + made->view_offs) {
        return "the result must lie over src[0]";
    }
    return {};
}

std::string check_source_layouts(const ggml_tensor *node, const Replay &replay) {
    const size_t letters = std::strlen(replay.source_layouts);
    for (int i = 0; i < GGML_MAX_SRC; ++i) {
        const ggml_tensor *t = node->src[i];
        const char layout = size_t(i) < letters ? replay.source_layouts[i] : 'c';
        if (t == nullptr || layout == 's') continue;
        if (layout == 'r' && t->nb[0] != ggml_type_size(t->type)) {
            return "src[" + std::to_string(i) + "] rows are not dense";
        }
        if (layout == 'c' && !ggml_is_contiguous(t)) return "src[" + std::to_string(i) + "] is not contiguous";
    }
    return {};
}

struct ScratchContext {
    ggml_context *ctx;
    ScratchContext() {
        ggml_init_params params{};
        params.mem_size = 8 * ggml_tensor_overhead();  // every constructor makes one or two tensors
        params.no_alloc = true;
        ctx = ggml_init(params);
    }
    ~ScratchContext() { ggml_free(ctx); }
    ScratchContext(const ScratchContext &) = delete;
    ScratchContext &operator=(const ScratchContext &) = delete;
};

// Calls `make` with every GGML_ASSERT inside it caught. No object with a
// destructor may live between sigsetjmp and the call: the jump skips them.
ggml_tensor *call_trapped(Constructor make, ggml_context *ctx, const ggml_tensor *node, std::string *why) {
    install_traps_once();
    sigjmp_buf jump;
    ggml_tensor *volatile made = nullptr;
    if (sigsetjmp(jump, 1) == 0) {
        t_replay_jump = &jump;
        made = make(ctx, node);
        t_replay_jump = nullptr;
        return made;
    }
    t_replay_jump = nullptr;
    *why = std::string("ggml refuses these arguments: ") + t_abort_message;
    return nullptr;
}

}  // namespace

std::string replay_constructor(const ggml_tensor *node) {
    const Replay *replay = find_replay(node->op);
    if (replay == nullptr) return "no constructor replay for this op";
    std::string why = check_geometry(node);
    if (!why.empty()) return why;
    why = check_source_layouts(node, *replay);
    if (!why.empty()) return why;
    ScratchContext scratch;
    if (scratch.ctx == nullptr) return "out of memory";
    const ggml_tensor *made = call_trapped(replay->make, scratch.ctx, node, &why);
    if (made == nullptr) return why;
    return compare(node, made);
}

}  // namespace ggml_remote::host
