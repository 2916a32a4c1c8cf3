// The op rule table, proven rather than trusted: a generator walks every op in
// ggml's enum, starting from a node ggml's own constructor made and mutating it
// the way a hostile guest would (strides of size-1 dimensions, shapes, types,
// op_params, sources). Every mutant that validate_node accepts is computed by the
// host's CPU backend in memory fenced by guard pages and filled with a canary; the
// oracle then checks that no byte outside the result (and the sources its op
// writes in place) changed. ggml-cpu is not instrumented, so this, not ASan, is
// what sees a stray write. Each op runs in a child process: a kernel that faults
// or aborts on an accepted node is a finding too, named by the op.
#include <ggml-backend.h>
#include <ggml-cpu.h>
#include <ggml.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "host/worker/graph/index_guard.h"
#include "host/worker/graph/op_validation.h"
#include "protocol/tensor_codec.h"
#include "transport/shared_memory.h"

namespace ggml_remote::host {
namespace {

using Seed = std::function<ggml_tensor *(ggml_context *)>;

ggml_tensor *t4(ggml_context *c, ggml_type type, int64_t a, int64_t b = 1, int64_t d = 1, int64_t e = 1) {
    return ggml_new_tensor_4d(c, type, a, b, d, e);
}
ggml_tensor *f(ggml_context *c, int64_t a, int64_t b = 1, int64_t d = 1, int64_t e = 1) {
    return t4(c, GGML_TYPE_F32, a, b, d, e);
}
ggml_tensor *i32(ggml_context *c, int64_t a, int64_t b = 1, int64_t d = 1) { return t4(c, GGML_TYPE_I32, a, b, d); }

// "src[1] f32 [8, 4, 1, 1] nb [4, 32, 128, 128] at +192", for a finding's report.
std::string layout_of(const char *label, const ggml_tensor *t, const void *base) {
    char text[256];
    std::snprintf(text, sizeof(text), "  %s %s [%lld, %lld, %lld, %lld] nb [%zu, %zu, %zu, %zu] at +%lld\n", label,
                  ggml_type_name(t->type), (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                  (long long)t->ne[3], t->nb[0], t->nb[1], t->nb[2], t->nb[3],
                  (long long)(static_cast<const char *>(t->data) - static_cast<const char *>(base)));
    return text;
}

std::string describe_node(const ggml_tensor *node, const void *base) {
    std::string text = layout_of("result", node, base);
    for (int i = 0; i < GGML_MAX_SRC; ++i) {
        if (node->src[i] != nullptr) text += layout_of(("src[" + std::to_string(i) + "]").c_str(), node->src[i], base);
    }
    text += "  op_params";
    for (int i = 0; i < 16; ++i) text += " " + std::to_string(node->op_params[i]);
    return text + "\n";
}

// One node per op, made by ggml's constructor: where the generator starts.
std::map<ggml_op, Seed> seeds() {
    std::map<ggml_op, Seed> s;
    s[GGML_OP_DUP] = [](ggml_context *c) { return ggml_dup(c, f(c, 8, 4)); };
    s[GGML_OP_CPY] = [](ggml_context *c) { return ggml_cpy(c, f(c, 8, 4), t4(c, GGML_TYPE_F16, 8, 4)); };
    s[GGML_OP_CONT] = [](ggml_context *c) {  // of a transposed leaf: the generator places leaves only
        ggml_tensor *transposed = ggml_transpose(c, f(c, 8, 4));
        transposed->op = GGML_OP_NONE;
        transposed->view_src = nullptr;
        transposed->src[0] = nullptr;
        return ggml_cont(c, transposed);
    };
    s[GGML_OP_ADD] = [](ggml_context *c) { return ggml_add(c, f(c, 8, 4, 2), f(c, 8, 1, 2)); };
    s[GGML_OP_SUB] = [](ggml_context *c) { return ggml_sub(c, f(c, 8, 4), f(c, 8)); };
    s[GGML_OP_MUL] = [](ggml_context *c) { return ggml_mul(c, f(c, 8, 4), f(c, 8, 4)); };
    s[GGML_OP_DIV] = [](ggml_context *c) { return ggml_div(c, f(c, 8, 4), f(c, 8)); };
    s[GGML_OP_ADD1] = [](ggml_context *c) {  // as ggml_add1 (deprecated) makes it
        ggml_tensor *node = ggml_dup_tensor(c, f(c, 8, 4));
        node->op = GGML_OP_ADD1;
        node->src[0] = f(c, 8, 4);
        node->src[1] = f(c, 1);
        return node;
    };
    s[GGML_OP_ACC] = [](ggml_context *c) { return ggml_acc(c, f(c, 8, 4), f(c, 4, 2), 32, 128, 128, 8); };
    s[GGML_OP_SET] = [](ggml_context *c) { return ggml_set(c, f(c, 8, 4), f(c, 4, 2), 32, 128, 128, 8); };
    s[GGML_OP_SQR] = [](ggml_context *c) { return ggml_sqr(c, f(c, 8, 4)); };
    s[GGML_OP_SQRT] = [](ggml_context *c) { return ggml_sqrt(c, f(c, 8, 4)); };
    s[GGML_OP_LOG] = [](ggml_context *c) { return ggml_log(c, f(c, 8, 4)); };
    s[GGML_OP_SIN] = [](ggml_context *c) { return ggml_sin(c, f(c, 8, 4)); };
    s[GGML_OP_COS] = [](ggml_context *c) { return ggml_cos(c, f(c, 8, 4)); };
    s[GGML_OP_CUMSUM] = [](ggml_context *c) { return ggml_cumsum(c, f(c, 8, 4)); };
    s[GGML_OP_SUM] = [](ggml_context *c) { return ggml_sum(c, f(c, 8, 4)); };
    s[GGML_OP_SUM_ROWS] = [](ggml_context *c) { return ggml_sum_rows(c, f(c, 8, 4)); };
    s[GGML_OP_MEAN] = [](ggml_context *c) { return ggml_mean(c, f(c, 8, 4)); };
    s[GGML_OP_ARGMAX] = [](ggml_context *c) { return ggml_argmax(c, f(c, 8, 4)); };
    s[GGML_OP_COUNT_EQUAL] = [](ggml_context *c) { return ggml_count_equal(c, i32(c, 8, 4), i32(c, 8, 4)); };
    s[GGML_OP_REPEAT] = [](ggml_context *c) { return ggml_repeat(c, f(c, 8), f(c, 8, 4)); };
    s[GGML_OP_REPEAT_BACK] = [](ggml_context *c) { return ggml_repeat_back(c, f(c, 8, 4), f(c, 8)); };
    s[GGML_OP_CONCAT] = [](ggml_context *c) { return ggml_concat(c, f(c, 8, 4), f(c, 8, 2), 1); };
    s[GGML_OP_SILU_BACK] = [](ggml_context *c) { return ggml_silu_back(c, f(c, 8, 4), f(c, 8, 4)); };
    s[GGML_OP_NORM] = [](ggml_context *c) { return ggml_norm(c, f(c, 8, 4), 1e-5f); };
    s[GGML_OP_RMS_NORM] = [](ggml_context *c) { return ggml_rms_norm(c, f(c, 8, 4), 1e-5f); };
    s[GGML_OP_RMS_NORM_BACK] = [](ggml_context *c) { return ggml_rms_norm_back(c, f(c, 8, 4), f(c, 8, 4), 1e-5f); };
    s[GGML_OP_GROUP_NORM] = [](ggml_context *c) { return ggml_group_norm(c, f(c, 8, 4, 4), 2, 1e-5f); };
    s[GGML_OP_L2_NORM] = [](ggml_context *c) { return ggml_l2_norm(c, f(c, 8, 4), 1e-5f); };
    s[GGML_OP_MUL_MAT] = [](ggml_context *c) {  // with the Hadamard hint; mutants lose it too
        ggml_tensor *node = ggml_mul_mat(c, f(c, 64, 64), f(c, 64, 3, 2));
        ggml_mul_mat_set_hint(node, GGML_HINT_SRC0_IS_HADAMARD);
        return node;
    };
    s[GGML_OP_MUL_MAT_ID] = [](ggml_context *c) {
        return ggml_mul_mat_id(c, f(c, 8, 4, 3), f(c, 8, 2, 2), i32(c, 2, 2));
    };
    s[GGML_OP_OUT_PROD] = [](ggml_context *c) { return ggml_out_prod(c, f(c, 8, 4), f(c, 6, 4)); };
    s[GGML_OP_SCALE] = [](ggml_context *c) { return ggml_scale(c, f(c, 8, 4), 2.0f); };
    s[GGML_OP_GET_ROWS] = [](ggml_context *c) { return ggml_get_rows(c, f(c, 8, 4), i32(c, 3)); };
    s[GGML_OP_GET_ROWS_BACK] = [](ggml_context *c) { return ggml_get_rows_back(c, f(c, 8, 3), i32(c, 3), f(c, 8, 4)); };
    s[GGML_OP_SET_ROWS] = [](ggml_context *c) { return ggml_set_rows(c, f(c, 8, 6), f(c, 8, 3), i32(c, 3)); };
    s[GGML_OP_DIAG] = [](ggml_context *c) { return ggml_diag(c, f(c, 8)); };
    s[GGML_OP_DIAG_MASK_INF] = [](ggml_context *c) { return ggml_diag_mask_inf(c, f(c, 8, 8), 2); };
    s[GGML_OP_DIAG_MASK_ZERO] = [](ggml_context *c) { return ggml_diag_mask_zero(c, f(c, 8, 8), 2); };
    s[GGML_OP_SOFT_MAX] = [](ggml_context *c) { return ggml_soft_max_ext(c, f(c, 8, 4), f(c, 8, 4), 1.0f, 0.0f); };
    s[GGML_OP_SOFT_MAX_BACK] = [](ggml_context *c) {
        return ggml_soft_max_ext_back(c, f(c, 8, 4), f(c, 8, 4), 1.0f, 0.0f);
    };
    s[GGML_OP_ROPE] = [](ggml_context *c) {
        return ggml_rope_ext(c, f(c, 8, 2, 3), i32(c, 3), f(c, 4), 8, GGML_ROPE_TYPE_NEOX, 64, 1e4f, 1, 0, 1, 32, 1);
    };
    s[GGML_OP_ROPE_BACK] = [](ggml_context *c) {
        return ggml_rope_ext_back(c, f(c, 8, 2, 3), i32(c, 3), nullptr, 8, 0, 64, 1e4f, 1, 0, 1, 32, 1);
    };
    s[GGML_OP_CLAMP] = [](ggml_context *c) { return ggml_clamp(c, f(c, 8, 4), -1, 1); };
    s[GGML_OP_CONV_TRANSPOSE_1D] = [](ggml_context *c) {
        return ggml_conv_transpose_1d(c, f(c, 3, 2, 4), f(c, 8, 4), 2, 0, 1);
    };
    s[GGML_OP_IM2COL] = [](ggml_context *c) {
        return ggml_im2col(c, f(c, 3, 3, 2, 2), f(c, 8, 8, 2), 1, 1, 1, 1, 1, 1, true, GGML_TYPE_F32);
    };
    s[GGML_OP_IM2COL_3D] = [](ggml_context *c) {
        return ggml_im2col_3d(c, f(c, 2, 2, 2, 4), f(c, 5, 5, 5, 2), 2, 1, 1, 1, 0, 0, 0, 1, 1, 1, GGML_TYPE_F32);
    };
    s[GGML_OP_CONV_2D] = [](ggml_context *c) {
        return ggml_conv_2d_direct(c, f(c, 3, 3, 2, 4), f(c, 8, 8, 2, 1), 1, 1, 1, 1, 1, 1);
    };
    s[GGML_OP_CONV_3D] = [](ggml_context *c) {
        return ggml_conv_3d_direct(c, f(c, 2, 2, 2, 4), f(c, 5, 5, 5, 2), 1, 1, 1, 0, 0, 0, 1, 1, 1, 2, 1, 2);
    };
    s[GGML_OP_CONV_2D_DW] = [](ggml_context *c) {
        return ggml_conv_2d_dw_direct(c, f(c, 3, 3, 1, 2), f(c, 8, 8, 2, 1), 1, 1, 1, 1, 1, 1);
    };
    s[GGML_OP_CONV_TRANSPOSE_2D] = [](ggml_context *c) {
        return ggml_conv_transpose_2d_p0(c, f(c, 3, 3, 2, 4), f(c, 5, 5, 4, 1), 2);
    };
    s[GGML_OP_POOL_1D] = [](ggml_context *c) { return ggml_pool_1d(c, f(c, 8, 4), GGML_OP_POOL_AVG, 2, 2, 0); };
    s[GGML_OP_POOL_2D] = [](ggml_context *c) {
        return ggml_pool_2d(c, f(c, 8, 8, 2), GGML_OP_POOL_MAX, 2, 2, 2, 2, 0, 0);
    };
    s[GGML_OP_UPSCALE] = [](ggml_context *c) {
        return ggml_interpolate(c, f(c, 4, 4, 2), 8, 8, 2, 1, GGML_SCALE_MODE_BILINEAR);
    };
    s[GGML_OP_PAD] = [](ggml_context *c) { return ggml_pad(c, f(c, 8, 4), 2, 1, 0, 0); };
    s[GGML_OP_PAD_REFLECT_1D] = [](ggml_context *c) { return ggml_pad_reflect_1d(c, f(c, 8, 4), 2, 3); };
    s[GGML_OP_ROLL] = [](ggml_context *c) { return ggml_roll(c, f(c, 8, 4), 3, -1, 0, 0); };
    s[GGML_OP_ARANGE] = [](ggml_context *c) { return ggml_arange(c, 0.0f, 16.0f, 1.0f); };
    s[GGML_OP_TIMESTEP_EMBEDDING] = [](ggml_context *c) { return ggml_timestep_embedding(c, f(c, 4), 8, 100); };
    s[GGML_OP_ARGSORT] = [](ggml_context *c) { return ggml_argsort(c, f(c, 8, 4), GGML_SORT_ORDER_ASC); };
    s[GGML_OP_TOP_K] = [](ggml_context *c) { return ggml_top_k(c, f(c, 8, 4), 3); };
    s[GGML_OP_LEAKY_RELU] = [](ggml_context *c) { return ggml_leaky_relu(c, f(c, 8, 4), 0.1f, false); };
    s[GGML_OP_TRI] = [](ggml_context *c) { return ggml_tri(c, f(c, 8, 8), GGML_TRI_TYPE_LOWER); };
    s[GGML_OP_FILL] = [](ggml_context *c) { return ggml_fill(c, f(c, 8, 4), 3.0f); };
    s[GGML_OP_FLASH_ATTN_EXT] = [](ggml_context *c) {
        return ggml_flash_attn_ext(c, f(c, 8, 2, 2), t4(c, GGML_TYPE_F16, 8, 4, 2), t4(c, GGML_TYPE_F16, 8, 4, 2),
                                   nullptr, 0.5f, 0.0f, 0.0f);
    };
    s[GGML_OP_SSM_CONV] = [](ggml_context *c) { return ggml_ssm_conv(c, f(c, 6, 4, 2), f(c, 3, 4)); };
    s[GGML_OP_SOLVE_TRI] = [](ggml_context *c) { return ggml_solve_tri(c, f(c, 4, 4), f(c, 3, 4), true, true, false); };
    s[GGML_OP_UNARY] = [](ggml_context *c) { return ggml_gelu(c, f(c, 8, 4)); };
    s[GGML_OP_GLU] = [](ggml_context *c) { return ggml_swiglu(c, f(c, 8, 4)); };
    s[GGML_OP_CROSS_ENTROPY_LOSS] = [](ggml_context *c) { return ggml_cross_entropy_loss(c, f(c, 8, 4), f(c, 8, 4)); };
    s[GGML_OP_CROSS_ENTROPY_LOSS_BACK] = [](ggml_context *c) {
        return ggml_cross_entropy_loss_back(c, f(c, 1), f(c, 8, 4), f(c, 8, 4));
    };
    s[GGML_OP_OPT_STEP_SGD] = [](ggml_context *c) {
        ggml_tensor *w = f(c, 8, 4);
        ggml_set_param(w);
        return ggml_opt_step_sgd(c, w, f(c, 8, 4), f(c, 2));
    };
    s[GGML_OP_OPT_STEP_ADAMW] = [](ggml_context *c) {
        ggml_tensor *w = f(c, 8, 4);
        ggml_set_param(w);
        return ggml_opt_step_adamw(c, w, f(c, 8, 4), f(c, 8, 4), f(c, 8, 4), f(c, 7));
    };
    s[GGML_OP_ADD_ID] = [](ggml_context *c) { return ggml_add_id(c, f(c, 8, 4, 2), f(c, 8, 3), i32(c, 4, 2)); };
    s[GGML_OP_COL2IM_1D] = [](ggml_context *c) { return ggml_col2im_1d(c, f(c, 6, 5), 2, 2, 0); };
    s[GGML_OP_SSM_SCAN] = [](ggml_context *c) {
        return ggml_ssm_scan(c, f(c, 4, 2, 2, 1), f(c, 2, 2, 3, 1), f(c, 2, 3, 1), f(c, 1, 2), f(c, 4, 1, 3, 1),
                             f(c, 4, 1, 3, 1), i32(c, 1), 1);
    };
    s[GGML_OP_RWKV_WKV6] = [](ggml_context *c) {
        return ggml_rwkv_wkv6(c, f(c, 64, 1, 3), f(c, 64, 1, 3), f(c, 64, 1, 3), f(c, 64, 1), f(c, 64, 1, 3),
                              f(c, 4096, 1));
    };
    s[GGML_OP_RWKV_WKV7] = [](ggml_context *c) {
        return ggml_rwkv_wkv7(c, f(c, 64, 1, 3), f(c, 64, 1, 3), f(c, 64, 1, 3), f(c, 64, 1, 3), f(c, 64, 1, 3),
                              f(c, 64, 1, 3), f(c, 4096, 1));
    };
    s[GGML_OP_GATED_LINEAR_ATTN] = [](ggml_context *c) {
        return ggml_gated_linear_attn(c, f(c, 64, 1, 3), f(c, 64, 1, 3), f(c, 64, 1, 3), f(c, 64, 1, 3), f(c, 4096, 1),
                                      0.5f);
    };
    s[GGML_OP_GATED_DELTA_NET] = [](ggml_context *c) {
        return ggml_gated_delta_net(c, f(c, 4, 2, 3, 1), f(c, 4, 2, 3, 1), f(c, 4, 2, 3, 1), f(c, 1, 2, 3, 1),
                                    f(c, 1, 2, 3, 1), f(c, 4, 4, 2, 1), 1);
    };
    s[GGML_OP_LIGHTNING_INDEXER] = [](ggml_context *c) {
        return ggml_lightning_indexer(c, f(c, 8, 2, 3, 1), f(c, 8, 1, 5, 1), f(c, 2, 3, 1, 1),
                                      t4(c, GGML_TYPE_F16, 5, 3, 1, 1));
    };
    s[GGML_OP_DSV4_HC_COMB] = [](ggml_context *c) {
        return ggml_dsv4_hc_comb(c, f(c, 24, 3), f(c, 3), f(c, 24), 1e-6f, 3);
    };
    s[GGML_OP_DSV4_HC_PRE] = [](ggml_context *c) { return ggml_dsv4_hc_pre(c, f(c, 8, 4, 3), f(c, 4, 3)); };
    s[GGML_OP_DSV4_HC_POST] = [](ggml_context *c) {
        return ggml_dsv4_hc_post(c, f(c, 8, 3), f(c, 8, 4, 3), f(c, 4, 3), f(c, 4, 4, 3));
    };
    return s;
}

// A deterministic stream of hostile choices.
struct Mutator {
    std::mt19937_64 rng;
    explicit Mutator(uint64_t seed) : rng(seed) {}
    uint64_t below(uint64_t n) { return rng() % n; }

    int64_t hostile_stride(const ggml_tensor *t) {
        const int64_t element = int64_t(ggml_type_size(t->type));
        switch (below(4)) {
            case 0:
                return element * int64_t(1 + below(64));
            case 1:
                return int64_t(1) << (12 + below(8));
            case 2:
                return 0;
            default:
                return element * t->ne[0] * int64_t(1 + below(4));
        }
    }

    void mutate(ggml_tensor *node) {
        ggml_tensor *targets[GGML_MAX_SRC + 1] = {node};
        int count = 1;
        for (ggml_tensor *s : node->src) {
            if (s != nullptr) targets[count++] = s;
        }
        ggml_tensor *t = targets[below(count)];
        const int d = int(below(GGML_MAX_DIMS));
        switch (below(6)) {
            case 0:  // the attack: a stride of a dimension the span check multiplies by zero
            case 1:
                for (int k = 1; k < GGML_MAX_DIMS; ++k) {
                    if (t->ne[k] == 1) t->nb[k] = size_t(hostile_stride(t));
                }
                break;
            case 2:
                t->nb[d] = size_t(hostile_stride(t));
                break;
            case 3:
                t->ne[d] = std::max<int64_t>(1, t->ne[d] + int64_t(below(5)) - 2);
                break;
            case 4:
                node->op_params[below(16)] = int32_t(below(2) ? int64_t(below(9)) - 4 : int64_t(rng()));
                break;
            default:
                t->ne[d] = 1;
                break;
        }
    }
};

// Guarded, canary-filled memory that holds one node and its sources.
class FencedArena {
  public:
    explicit FencedArena(ggml_backend_dev_t cpu) {
        EXPECT_TRUE(Mapping::anonymous(kSize, &memory_).ok());
        buffer_ = ggml_backend_dev_buffer_from_host_ptr(cpu, memory_.data(), kSize, kSize);
    }
    ~FencedArena() { ggml_backend_buffer_free(buffer_); }
    const void *base() const { return memory_.data(); }

    // Places every tensor with a gap between them; false when they do not fit.
    bool place(const std::vector<ggml_tensor *> &tensors) {
        auto *base = static_cast<uint8_t *>(memory_.data());
        std::memset(base, kCanary, kSize);
        uint64_t offset = 64;
        for (ggml_tensor *t : tensors) {
            uint64_t span = 0;
            if (!protocol::tensor_byte_span(t, &span) || offset + span + 64 > kSize) return false;
            t->data = base + offset;
            t->buffer = buffer_;
            // Indexes start in range (row 0); other data must differ from the canary, or
            // a kernel that copies or averages it would write the canary back unseen.
            const bool index = t->type == GGML_TYPE_I32 || t->type == GGML_TYPE_I64;
            std::memset(t->data, index ? 0 : kData, span);
            offset += (span + 64 + 63) / 64 * 64;
        }
        std::memcpy(before_.data(), base, kSize);
        return true;
    }

    // Whether `t`'s bytes lie inside the arena, as graph_builder.cpp requires.
    bool holds(const ggml_tensor *t) const {
        uint64_t span = 0;
        const auto offset = static_cast<const uint8_t *>(t->data) - static_cast<const uint8_t *>(memory_.data());
        return protocol::tensor_byte_span(t, &span) && offset >= 0 && uint64_t(offset) + span <= kSize;
    }

    // The first changed byte outside `allowed`, or -1.
    int64_t stray_write(const std::vector<const ggml_tensor *> &allowed, size_t from = 0) const {
        const auto *now = static_cast<const uint8_t *>(memory_.data());
        for (size_t i = from; i < kSize; ++i) {
            if (now[i] == before_[i]) continue;
            bool inside = false;
            for (const ggml_tensor *t : allowed) {
                uint64_t span = 0;
                protocol::tensor_byte_span(t, &span);
                const auto *begin = static_cast<const uint8_t *>(t->data);
                inside |= now + i >= begin && now + i < begin + span;
            }
            if (!inside) return int64_t(i);
        }
        return -1;
    }

  private:
    static constexpr size_t kSize = 1u << 20;
    static constexpr uint8_t kCanary = 0xA5;
    static constexpr uint8_t kData = 0x3C;  // 0.0115f, a small finite float
    Mapping memory_;
    ggml_backend_buffer_t buffer_ = nullptr;
    std::vector<uint8_t> before_ = std::vector<uint8_t>(kSize);
};

ggml_backend_dev_t cpu_device() {
    if (ggml_backend_dev_count() == 0) {
        unsetenv("GGML_BACKEND_PATH");
        ggml_backend_load_all();
    }
    return ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
}

constexpr int kMutantsPerOp = 400;

// Runs one op's mutants; returns the number computed, or exits 3 on a stray write.
int run_op(ggml_op op, const Seed &seed, ggml_backend_t backend, ggml_backend_dev_t cpu) {
    Mutator mutator(0x5eed0000u + uint64_t(op));
    FencedArena arena(cpu);
    int computed = 0;
    for (int i = 0; i < kMutantsPerOp; ++i) {
        ggml_init_params params{64 * ggml_tensor_overhead() + ggml_graph_overhead(), nullptr, true};
        ggml_context *ctx = ggml_init(params);
        ggml_tensor *node = seed(ctx);
        const int mutations = i == 0 ? 0 : 1 + int(mutator.below(3));
        for (int m = 0; m < mutations; ++m) mutator.mutate(node);
        std::vector<ggml_tensor *> tensors;
        for (ggml_tensor *s : node->src) {
            if (s != nullptr && s->op == GGML_OP_NONE) tensors.push_back(s);
        }
        if (node->view_src == nullptr) tensors.push_back(node);
        const bool placed = arena.place(tensors);
        bool fits = placed;
        if (node->view_src != nullptr) {  // an in-place op: the result lies over its source
            node->data = static_cast<char *>(node->view_src->data) + node->view_offs;
            node->buffer = node->view_src->buffer;
            fits = fits && arena.holds(node);  // graph_builder.cpp's bounds check, which the server makes first
        }
        if (fits && validate_node(node).ok()) {
            ggml_cgraph *graph = ggml_new_graph(ctx);
            ggml_build_forward_expand(graph, node);  // marks it to be computed, as a guest's graph is
            if (std::getenv("GGML_REMOTE_ORACLE_VERBOSE") != nullptr) {  // a crash's last words name the mutant
                std::fprintf(stderr, "%s mutant %d\n%s", ggml_op_desc(node), i,
                             describe_node(node, arena.base()).c_str());
            }
            if (check_data_indexes(graph).ok() && ggml_backend_graph_compute(backend, graph) == GGML_STATUS_SUCCESS) {
                std::vector<const ggml_tensor *> allowed{node};
                const uint32_t in_place = sources_written_in_place(op);
                for (int s = 0; s < GGML_MAX_SRC; ++s) {
                    if ((in_place >> s) & 1u) allowed.push_back(node->src[s]);
                }
                const int64_t stray = arena.stray_write(allowed);
                if (stray >= 0) {
                    int64_t last = stray;
                    while (last + 1 < int64_t(1u << 20) && arena.stray_write(allowed, last + 1) == last + 1) ++last;
                    std::fprintf(stderr, "(changed through +%lld)\n", static_cast<long long>(last));
                    std::fprintf(stderr, "%s mutant %d: byte +%lld outside the write set changed\n%s",
                                 ggml_op_desc(node), i, static_cast<long long>(stray),
                                 describe_node(node, arena.base()).c_str());
                    std::_Exit(3);
                }
                ++computed;
            }
        }
        ggml_free(ctx);
    }
    return computed;
}

TEST(OpRulesOracle, NoAcceptedMutantOfAnyOpWritesOutsideItsResult) {
    ggml_backend_dev_t cpu = cpu_device();
    ASSERT_NE(cpu, nullptr);
    const std::map<ggml_op, Seed> all = seeds();
    for (int op = GGML_OP_NONE + 1; op < GGML_OP_COUNT; ++op) {
        const auto op_id = static_cast<ggml_op>(op);
        const bool viewing =
            op_id == GGML_OP_VIEW || op_id == GGML_OP_RESHAPE || op_id == GGML_OP_PERMUTE || op_id == GGML_OP_TRANSPOSE;
        if (viewing || !op_has_rule(op_id)) continue;
        const auto seed = all.find(op_id);
        if (seed == all.end()) {
            ADD_FAILURE() << ggml_op_name(op_id) << " has a rule but no seed in this generator";
            continue;
        }
        std::fflush(nullptr);
        const pid_t child = ::fork();
        ASSERT_GE(child, 0);
        if (child == 0) {
            ::alarm(120);  // a kernel that loops for ever on an accepted mutant is a finding too
            ggml_backend_t backend = ggml_backend_dev_init(cpu, nullptr);
            const int computed = run_op(op_id, seed->second, backend, cpu);
            // The seed itself must compute: a generator that computes nothing proves nothing.
            std::_Exit(computed > 0 ? 0 : 4);
        }
        int status = 0;
        ASSERT_EQ(::waitpid(child, &status, 0), child);
        if (WIFSIGNALED(status)) {
            ADD_FAILURE() << ggml_op_name(op_id) << ": a mutant that validation accepted killed the compute with "
                          << strsignal(WTERMSIG(status));
        } else if (WEXITSTATUS(status) == 3) {
            ADD_FAILURE() << ggml_op_name(op_id) << ": a mutant that validation accepted wrote outside its result";
        } else if (WEXITSTATUS(status) == 4) {
            ADD_FAILURE() << ggml_op_name(op_id) << ": not even the seed was accepted and computed";
        } else {
            EXPECT_EQ(WEXITSTATUS(status), 0) << ggml_op_name(op_id);
        }
    }
}

TEST(OpRulesOracle, OpsWithoutARuleAreExactlyTheRefusedOnes) {
    for (ggml_op op : {GGML_OP_WIN_PART, GGML_OP_WIN_UNPART, GGML_OP_GET_REL_POS, GGML_OP_ADD_REL_POS,
                       GGML_OP_IM2COL_BACK, GGML_OP_POOL_2D_BACK, GGML_OP_FLASH_ATTN_BACK, GGML_OP_MAP_CUSTOM1,
                       GGML_OP_MAP_CUSTOM2, GGML_OP_MAP_CUSTOM3, GGML_OP_CUSTOM}) {
        EXPECT_FALSE(op_has_rule(op)) << ggml_op_name(op);
    }
    EXPECT_TRUE(op_has_rule(GGML_OP_CONV_2D));
}

}  // namespace
}  // namespace ggml_remote::host
