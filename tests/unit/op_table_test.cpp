// The op table: every op of the ggml we build against is decided, either by a row
// (its rule) or by a line of the refused list with its reason. A ggml update that
// adds an op fails here until someone writes its row or refuses it on purpose.
#include "host/worker/graph/ops/op_table.h"

#include <ggml.h>
#include <gtest/gtest.h>

#include "host/worker/graph/op_validation.h"

namespace ggml_remote::host::ops {
namespace {

TEST(OpTable, EveryGgmlOpIsRuledOrRefusedWithAReason) {
    int ruled = 0, refused = 0;
    for (int id = 0; id < GGML_OP_COUNT; ++id) {
        const auto op = static_cast<ggml_op>(id);
        const OpEntry *entry = op_entry(op);
        const char *why = refusal_reason(op);
        if (entry != nullptr) ++ruled;
        if (why != nullptr) ++refused;
        EXPECT_TRUE(entry != nullptr || why != nullptr)
            << ggml_op_name(op) << " (op " << id << ") has neither a row in src/host/worker/graph/ops/ nor a "
            << "reason in the refused list of op_table.cpp";
        if (entry != nullptr) {
            EXPECT_EQ(entry->op, op) << "the row found for " << ggml_op_name(op);
        }
    }
    EXPECT_EQ(ruled + refused, GGML_OP_COUNT);
    std::printf("%d ops ruled, %d refused\n", ruled, refused);
}

TEST(OpTable, HasNoDuplicateRowsNoUnknownOpsAndOnlyKnownLayouts) { EXPECT_EQ(op_table_problems(), ""); }

TEST(OpTable, ARefusedOpIsRefusedByValidation) {
    EXPECT_EQ(op_entry(GGML_OP_CUSTOM), nullptr);
    EXPECT_NE(refusal_reason(GGML_OP_CUSTOM), nullptr);
    EXPECT_FALSE(op_has_rule(GGML_OP_CUSTOM));
}

TEST(OpTable, IdsOutsideTheEnumHaveNoRow) {
    // (An id that is no value of the enum at all cannot reach op_entry: the graph
    // decoder refuses it, and making one is undefined behaviour, which UBSan reports.)
    EXPECT_EQ(op_entry(GGML_OP_COUNT), nullptr);
}

// op_params ranges (geometry) guard a constructor's arithmetic, so only replayed
// rows have them; an index read names a source a node can have.
TEST(OpTable, GeometryBelongsToReplayedRowsAndIndexesToRealSources) {
    for (int id = 0; id < GGML_OP_COUNT; ++id) {
        const OpEntry *entry = op_entry(static_cast<ggml_op>(id));
        if (entry == nullptr) continue;
        if (entry->geometry != nullptr) {
            EXPECT_NE(entry->replay, nullptr) << ggml_op_name(entry->op);
        }
        if (entry->index.source >= 0) {
            EXPECT_LT(entry->index.source, GGML_MAX_SRC) << ggml_op_name(entry->op);
        }
    }
}

}  // namespace
}  // namespace ggml_remote::host::ops
