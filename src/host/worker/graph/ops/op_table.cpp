#include "host/worker/graph/ops/op_table.h"

#include <array>
#include <cstring>

#include "host/worker/graph/ops/families.h"

namespace ggml_remote::host::ops {
namespace {

constexpr const OpFamily *kFamilies[] = {
    &kViewOps,     &kElementwiseOps,     &kNormOps, &kReduceOps,   &kShapeOps,       &kRowOps,
    &kMatrixOps,   &kAttentionOps,       &kRopeOps, &kTrainingOps, &kConvolutionOps, &kRecurrentOps,
    &kGenerateOps, &kHyperConnectionOps,
};

struct RefusedOp {
    ggml_op op;
    const char *why;
};

// The ops refused on purpose. A guest's node of one of these, like that of an op
// listed nowhere, is refused by validate_node, and supports_op says no to it.
constexpr RefusedOp kRefused[] = {
    {GGML_OP_MAP_CUSTOM1, "its function pointer would be the guest's address"},
    {GGML_OP_MAP_CUSTOM2, "its function pointer would be the guest's address"},
    {GGML_OP_MAP_CUSTOM3, "its function pointer would be the guest's address"},
    {GGML_OP_CUSTOM, "its function pointer would be the guest's address"},
    {GGML_OP_WIN_PART, "no application we serve sends it"},
    {GGML_OP_WIN_UNPART, "no application we serve sends it"},
    {GGML_OP_GET_REL_POS, "no application we serve sends it"},
    {GGML_OP_ADD_REL_POS, "no application we serve sends it"},
    {GGML_OP_IM2COL_BACK, "no application we serve sends it"},
    {GGML_OP_POOL_2D_BACK, "no application we serve sends it"},
    {GGML_OP_FLASH_ATTN_BACK, "no application we serve sends it"},
};

bool layout_is_valid(const char *layout) {
    if (layout == nullptr || *layout == '\0') return false;
    for (const char *c = layout; *c != '\0'; ++c) {
        if (std::strchr("src", *c) == nullptr) return false;
    }
    return true;
}

// The rows by op, built once from the families. An op with two rows is left out
// (refused) and reported by op_table_problems.
struct OpTable {
    std::array<const OpEntry *, GGML_OP_COUNT> by_op{};
    std::string problems;

    OpTable() {
        std::array<int, GGML_OP_COUNT> rows{};
        for (const OpFamily *family : kFamilies) {
            for (size_t i = 0; i < family->count; ++i) add(family->entries[i], &rows);
        }
        for (int op = 0; op < GGML_OP_COUNT; ++op) {
            if (rows[op] > 1) {
                problems += std::string(ggml_op_name(ggml_op(op))) + " has " + std::to_string(rows[op]) + " rows\n";
                by_op[op] = nullptr;
            }
        }
    }

    void add(const OpEntry &entry, std::array<int, GGML_OP_COUNT> *rows) {
        const int id = static_cast<int>(entry.op);
        if (id < 0 || id >= GGML_OP_COUNT) {
            problems += "a row for op " + std::to_string(int(entry.op)) + ", which does not exist\n";
            return;
        }
        if (!layout_is_valid(entry.layout)) {
            problems += std::string(ggml_op_name(entry.op)) + " has a layout other than letters s, r, c\n";
            return;
        }
        ++(*rows)[entry.op];
        by_op[entry.op] = &entry;
    }
};

const OpTable &table() {
    static const OpTable built;
    return built;
}

}  // namespace

const OpEntry *op_entry(ggml_op op) {
    const int id = static_cast<int>(op);  // a guest's op id may be outside the enum
    if (id < 0 || id >= GGML_OP_COUNT) return nullptr;
    return table().by_op[id];
}

const char *refusal_reason(ggml_op op) {
    if (op_entry(op) != nullptr) return nullptr;
    for (const RefusedOp &refused : kRefused) {
        if (refused.op == op) return refused.why;
    }
    return nullptr;
}

std::string op_table_problems() {
    std::string problems = table().problems;
    for (const RefusedOp &refused : kRefused) {
        if (op_entry(refused.op) != nullptr) {
            problems += std::string(ggml_op_name(refused.op)) + " is both refused and has a row\n";
        }
    }
    return problems;
}

}  // namespace ggml_remote::host::ops
