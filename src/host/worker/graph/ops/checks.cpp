#include "host/worker/graph/ops/checks.h"

#include <cstring>

#include "protocol/printable.h"

namespace ggml_remote::host::ops {

std::string shape_of(const ggml_tensor *t) {
    return "[" + std::to_string(t->ne[0]) + ", " + std::to_string(t->ne[1]) + ", " + std::to_string(t->ne[2]) + ", " +
           std::to_string(t->ne[3]) + "]";
}

std::string src_label(int i) { return "src[" + std::to_string(i) + "]"; }

std::string described(const char *what, const ggml_tensor *t) { return std::string(what) + " " + shape_of(t); }

std::string node_label(const ggml_tensor *node) {
    return std::string(ggml_op_name(node->op)) + " node '" + printable(node->name) + "': ";
}

bool element_count(const ggml_tensor *t, int64_t *count) {
    int64_t n = 1;
    for (int d = 0; d < GGML_MAX_DIMS; ++d) {
        if (__builtin_mul_overflow(n, t->ne[d], &n)) return false;
    }
    *count = n;
    return true;
}

int64_t elements(const ggml_tensor *t) {
    int64_t n = 0;
    return element_count(t, &n) ? n : -1;
}

bool divides(int64_t divisor, int64_t value) { return divisor > 0 && value % divisor == 0; }

bool is_float(ggml_type type) { return type == GGML_TYPE_F32 || type == GGML_TYPE_F16 || type == GGML_TYPE_BF16; }

bool rows_are_dense(const ggml_tensor *t) { return t->nb[0] == ggml_type_size(t->type); }

bool result_in_order(const ggml_tensor *node) {
    return rows_are_dense(node) && node->nb[0] <= node->nb[1] && node->nb[1] <= node->nb[2] &&
           node->nb[2] <= node->nb[3];
}

int32_t param(const ggml_tensor *node, int i) { return node->op_params[i]; }

float float_param(const ggml_tensor *node, int i) {
    float value = 0.0f;
    std::memcpy(&value, &node->op_params[i], sizeof(value));
    return value;
}

namespace {

bool has_shape(const ggml_tensor *t, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3) {
    return t->ne[0] == ne0 && t->ne[1] == ne1 && t->ne[2] == ne2 && t->ne[3] == ne3;
}

std::string shape_text(int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3) {
    return "[" + std::to_string(ne0) + ", " + std::to_string(ne1) + ", " + std::to_string(ne2) + ", " +
           std::to_string(ne3) + "]";
}

}  // namespace

Why result_shape(const ggml_tensor *node, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3) {
    if (has_shape(node, ne0, ne1, ne2, ne3)) return {};
    return described("result", node) + " should be " + shape_text(ne0, ne1, ne2, ne3);
}

Why result_type(const ggml_tensor *node, ggml_type type) {
    if (node->type == type) return {};
    return std::string("result type ") + ggml_type_name(node->type) + " should be " + ggml_type_name(type);
}

Why source_type(const ggml_tensor *node, int i, ggml_type type, ggml_type other) {
    const ggml_type actual = node->src[i]->type;
    if (actual == type || actual == other) return {};
    std::string expected = ggml_type_name(type);
    if (other != GGML_TYPE_COUNT) expected += " or " + std::string(ggml_type_name(other));
    return src_label(i) + " type " + ggml_type_name(actual) + " should be " + expected;
}

Why same_shape_as_source(const ggml_tensor *node, int i) {
    if (ggml_are_same_shape(node, node->src[i])) return {};
    return described("result", node) + " differs from " + described(src_label(i).c_str(), node->src[i]);
}

Why sources_same_shape(const ggml_tensor *node, int i, int j) {
    if (ggml_are_same_shape(node->src[i], node->src[j])) return {};
    return described(src_label(i).c_str(), node->src[i]) + " differs from " +
           described(src_label(j).c_str(), node->src[j]);
}

Why same_element_count(const ggml_tensor *node, int i) {
    if (elements(node) == elements(node->src[i])) return {};
    return "result has " + std::to_string(elements(node)) + " elements, " + src_label(i) + " has " +
           std::to_string(elements(node->src[i]));
}

Why first(std::initializer_list<Why> reasons) {
    for (const Why &why : reasons) {
        if (!why.empty()) return why;
    }
    return {};
}

Why both_contiguous(const ggml_tensor *node) {
    if (!ggml_is_contiguous(node)) return "the result is not contiguous";
    if (!ggml_is_contiguous(node->src[0])) return "src[0] is not contiguous";
    return {};
}

Why check_same_shape_pair(const ggml_tensor *node) {
    return first({sources_same_shape(node, 0, 1), same_shape_as_source(node)});
}

Why params_in_range(const ggml_tensor *node, std::initializer_list<int> positive,
                    std::initializer_list<int> non_negative) {
    constexpr int32_t kLimit = 1 << 16;
    const int32_t *p = node->op_params;
    auto out_of_range = [&](int i) {
        return "op_params[" + std::to_string(i) + "] = " + std::to_string(p[i]) + " out of range";
    };
    for (int i : positive) {
        if (p[i] < 1 || p[i] > kLimit) return out_of_range(i);
    }
    for (int i : non_negative) {
        if (p[i] < 0 || p[i] > kLimit) return out_of_range(i);
    }
    return {};
}

}  // namespace ggml_remote::host::ops
