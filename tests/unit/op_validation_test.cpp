// validate_node: nodes made by ggml's own constructors pass; the same nodes with a
// source taken away, a shape or type changed, or op_params out of range are refused
// with a reason that names the op and the node.
#include "host/worker/graph/op_validation.h"

#include <ggml-backend.h>
#include <ggml.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "ggml_test_support.h"

namespace ggml_remote::host {
namespace {

using test_support::GgmlContext;
using test_support::metadata_context;
using ::testing::HasSubstr;

::testing::AssertionResult Accepted(const ggml_tensor *node) {
    const Status status = validate_node(node);
    if (status.ok()) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "refused: " << status.message();
}

// Refused as a bad request whose message contains `why`.
::testing::AssertionResult Refused(const ggml_tensor *node, const std::string &why) {
    const Status status = validate_node(node);
    if (status.ok()) return ::testing::AssertionFailure() << "accepted";
    if (status.code() != Code::bad_request) {
        return ::testing::AssertionFailure() << "code " << static_cast<int>(status.code()) << ": " << status.message();
    }
    if (status.message().find(why) == std::string::npos) {
        return ::testing::AssertionFailure() << "message '" << status.message() << "' does not contain '" << why << "'";
    }
    return ::testing::AssertionSuccess();
}

// Gives a tensor another shape with contiguous strides, as a guest can claim.
void reshape(ggml_tensor *t, int64_t ne0, int64_t ne1 = 1, int64_t ne2 = 1, int64_t ne3 = 1) {
    const int64_t ne[GGML_MAX_DIMS] = {ne0, ne1, ne2, ne3};
    for (int d = 0; d < GGML_MAX_DIMS; ++d) t->ne[d] = ne[d];
    t->nb[0] = ggml_type_size(t->type);
    t->nb[1] = t->nb[0] * (t->ne[0] / ggml_blck_size(t->type));
    for (int d = 2; d < GGML_MAX_DIMS; ++d) t->nb[d] = t->nb[d - 1] * t->ne[d - 1];
}

void retype(ggml_tensor *t, ggml_type type) {
    t->type = type;
    reshape(t, t->ne[0], t->ne[1], t->ne[2], t->ne[3]);
}

class OpValidation : public ::testing::Test {
  protected:
    ggml_tensor *tensor(ggml_type type, int64_t ne0, int64_t ne1 = 1, int64_t ne2 = 1, int64_t ne3 = 1) {
        return ggml_new_tensor_4d(ctx.get(), type, ne0, ne1, ne2, ne3);
    }
    ggml_tensor *f32(int64_t ne0, int64_t ne1 = 1, int64_t ne2 = 1, int64_t ne3 = 1) {
        return tensor(GGML_TYPE_F32, ne0, ne1, ne2, ne3);
    }
    ggml_tensor *i32(int64_t ne0, int64_t ne1 = 1, int64_t ne2 = 1, int64_t ne3 = 1) {
        return tensor(GGML_TYPE_I32, ne0, ne1, ne2, ne3);
    }

    GgmlContext ctx = metadata_context(1024);
};

// Arity and op ids.

TEST_F(OpValidation, EveryOpThatNeedsASourceIsRefusedWithout) {
    for (int op = GGML_OP_NONE + 1; op < GGML_OP_COUNT; ++op) {
        if (op == GGML_OP_ARANGE) continue;  // a generator: no sources
        ggml_tensor *node = f32(4);
        node->op = static_cast<ggml_op>(op);
        EXPECT_FALSE(validate_node(node).ok()) << ggml_op_name(node->op) << " without sources";
    }
}

TEST_F(OpValidation, MissingSourceIsNamedWithTheOpAndTheNode) {
    ggml_tensor *sum = ggml_add(ctx.get(), f32(8), f32(8));
    ggml_set_name(sum, "sum");
    ASSERT_TRUE(Accepted(sum));
    sum->src[1] = nullptr;
    const Status status = validate_node(sum);
    EXPECT_EQ(status.code(), Code::bad_request);
    EXPECT_EQ(status.message(), "ADD node 'sum': src[1] is missing (ADD needs 2 sources)");
}

TEST_F(OpValidation, FlashAttentionNeedsQueryKeyAndValue) {
    ggml_tensor *q = f32(64, 4, 8), *k = tensor(GGML_TYPE_F16, 64, 32, 8), *v = tensor(GGML_TYPE_F16, 64, 32, 8);
    ggml_tensor *node = ggml_flash_attn_ext(ctx.get(), q, k, v, nullptr, 0.125f, 0.0f, 0.0f);
    ASSERT_TRUE(Accepted(node));
    node->src[2] = nullptr;
    EXPECT_TRUE(Refused(node, "src[2] is missing"));
}

TEST_F(OpValidation, LeavesAndGeneratorsNeedNoSources) {
    EXPECT_TRUE(Accepted(f32(4)));
    EXPECT_TRUE(Accepted(ggml_arange(ctx.get(), 0.0f, 4.0f, 1.0f)));
}

TEST_F(OpValidation, OpIdsOutsideTheEnumAreRefused) {
    ggml_tensor *node = f32(4);
    node->op = GGML_OP_COUNT;
    EXPECT_TRUE(Refused(node, "unknown op"));
    node->op = static_cast<ggml_op>(-1);
    EXPECT_TRUE(Refused(node, "unknown op"));
}

TEST_F(OpValidation, OpsThatCarryFunctionPointersAreRefused) {
    for (ggml_op op : {GGML_OP_MAP_CUSTOM1, GGML_OP_MAP_CUSTOM2, GGML_OP_MAP_CUSTOM3, GGML_OP_CUSTOM}) {
        ggml_tensor *node = f32(4);
        node->op = op;
        for (int i = 0; i < 3; ++i) node->src[i] = f32(4);
        EXPECT_TRUE(Refused(node, "not accepted from a guest")) << ggml_op_name(op);
    }
}

TEST_F(OpValidation, ElementCountsThatOverflowAreRefused) {
    ggml_tensor *a = f32(8);
    ggml_tensor *node = ggml_scale(ctx.get(), a, 2.0f);
    ASSERT_TRUE(Accepted(node));
    a->ne[1] = a->ne[2] = int64_t(1) << 40;  // 8 * 2^80 elements
    EXPECT_TRUE(Refused(node, "src[0]'s element count overflows"));
}

TEST_F(OpValidation, TensorsWhoseStridesOverlapToClaimMoreElementsThanBytesAreRefused) {
    ggml_tensor *input = f32(1024);
    ggml_tensor *node = ggml_mul_mat(ctx.get(), tensor(GGML_TYPE_F16, 1024, 8), input);
    ASSERT_TRUE(Accepted(node));
    input->ne[1] = int64_t(1) << 40;  // 2^50 elements over the 4 KiB of one row
    input->nb[1] = input->nb[2] = input->nb[3] = 0;
    node->ne[1] = int64_t(1) << 40;
    EXPECT_TRUE(Refused(node, "claims more elements than the"));
}

TEST_F(OpValidation, PermutedAndStridedViewsAreNotOverlaps) {
    ggml_tensor *a = f32(8, 6, 4);
    EXPECT_TRUE(Accepted(ggml_cont(ctx.get(), ggml_permute(ctx.get(), a, 2, 0, 1, 3))));
    EXPECT_TRUE(Accepted(ggml_cont(ctx.get(), ggml_view_2d(ctx.get(), a, 4, 6, a->nb[1], 16))));
    EXPECT_TRUE(Accepted(ggml_scale(ctx.get(), ggml_view_1d(ctx.get(), tensor(GGML_TYPE_Q8_0, 64, 3), 64, 0), 2.0f)));
}

TEST_F(OpValidation, TypesOutsideTheEnumOrRemovedAreRefused) {
    ggml_tensor *a = f32(8);
    ggml_tensor *node = ggml_scale(ctx.get(), a, 2.0f);
    a->type = GGML_TYPE_COUNT;
    EXPECT_TRUE(Refused(node, "src[0] type " + std::to_string(GGML_TYPE_COUNT) + " does not exist"));
    a->type = static_cast<ggml_type>(4);  // Q4_2, removed: block size 0
    EXPECT_TRUE(Refused(node, "src[0] type 4 does not exist"));
}

// Element-wise binary ops.

TEST_F(OpValidation, BinaryOpsAcceptABroadcastSecondSource) {
    for (auto make : {ggml_add, ggml_sub, ggml_mul, ggml_div}) {
        EXPECT_TRUE(Accepted(make(ctx.get(), f32(8, 3, 2), f32(8, 1, 2))));
        EXPECT_TRUE(Accepted(make(ctx.get(), f32(8, 3, 2), f32(1))));
    }
}

TEST_F(OpValidation, BinaryOpsRefuseASecondSourceThatCannotBroadcast) {
    for (auto make : {ggml_add, ggml_sub, ggml_mul, ggml_div}) {
        ggml_tensor *b = f32(8);
        ggml_tensor *node = make(ctx.get(), f32(8, 3), b);
        reshape(b, 3);
        EXPECT_TRUE(Refused(node, "src[1] [3, 1, 1, 1] cannot be broadcast to src[0] [8, 3, 1, 1]"))
            << ggml_op_name(node->op);
    }
}

TEST_F(OpValidation, BinaryOpsRefuseAResultOfAnotherShape) {
    ggml_tensor *node = ggml_add(ctx.get(), f32(8, 3), f32(8));
    reshape(node, 8, 4);
    EXPECT_TRUE(Refused(node, "result [8, 4, 1, 1] differs from src[0] [8, 3, 1, 1]"));
}

// Found by the dispatcher fuzzer: ggml-cpu's binary kernels assert dense rows and
// abort on type combinations they do not have.
TEST_F(OpValidation, BinaryOpsRefuseResultsAndFirstSourcesWithSparseRows) {
    ggml_tensor *node = ggml_mul(ctx.get(), f32(8, 3), f32(8));
    ASSERT_TRUE(Accepted(node));
    node->nb[0] = 8;
    EXPECT_TRUE(Refused(node, "the result's rows are not dense"));
    node = ggml_mul(ctx.get(), ggml_transpose(ctx.get(), f32(3, 8)), f32(8));
    EXPECT_TRUE(Refused(node, "src[0] rows are not dense"));
}

TEST_F(OpValidation, BinaryOpsAcceptTheTypeCombinationsOfTheCpuKernels) {
    EXPECT_TRUE(Accepted(ggml_add(ctx.get(), tensor(GGML_TYPE_F16, 8, 2), f32(8))));
    EXPECT_TRUE(Accepted(ggml_add_cast(ctx.get(), tensor(GGML_TYPE_BF16, 8, 2), f32(8), GGML_TYPE_F32)));
    EXPECT_TRUE(Accepted(ggml_add(ctx.get(), tensor(GGML_TYPE_F16, 8, 2), tensor(GGML_TYPE_F16, 8))));
    EXPECT_TRUE(Accepted(ggml_add_cast(ctx.get(), tensor(GGML_TYPE_Q8_0, 32, 2), f32(32, 2), GGML_TYPE_F32)));
    EXPECT_TRUE(Refused(ggml_add(ctx.get(), f32(8, 2), tensor(GGML_TYPE_F16, 8)), "types f32, f16 into f32"));
    EXPECT_TRUE(Refused(ggml_mul(ctx.get(), i32(8, 2), i32(8)), "types i32, i32 into i32"));
    EXPECT_TRUE(Refused(ggml_mul(ctx.get(), tensor(GGML_TYPE_Q8_0, 32, 2), f32(32, 2)), "types q8_0, f32 into q8_0"));
    EXPECT_TRUE(Refused(ggml_add_cast(ctx.get(), tensor(GGML_TYPE_Q8_0, 32, 2), f32(32), GGML_TYPE_F32),
                        "a quantized src[0] needs a dense src[1] of its shape"));
}

TEST_F(OpValidation, AddIdNeedsI32IdsThatFitItsSources) {
    ggml_tensor *ids = i32(2, 5);
    ggml_tensor *node = ggml_add_id(ctx.get(), f32(16, 2, 5), f32(16, 4), ids);
    ASSERT_TRUE(Accepted(node));
    retype(ids, GGML_TYPE_F32);
    EXPECT_TRUE(Refused(node, "src[2] type f32 should be i32"));
    retype(ids, GGML_TYPE_I32);
    reshape(ids, 3, 5);
    EXPECT_TRUE(Refused(node, "do not fit"));
}

TEST_F(OpValidation, Add1NeedsAScalar) {
    ggml_tensor *b = f32(1);
    ggml_tensor *a = f32(8);
    ggml_tensor *node = ggml_dup_tensor(ctx.get(), a);  // as ggml_add1 (deprecated) makes it
    node->op = GGML_OP_ADD1;
    node->src[0] = a;
    node->src[1] = b;
    ASSERT_TRUE(Accepted(node));
    reshape(b, 2);
    EXPECT_TRUE(Refused(node, "is not a scalar"));
}

TEST_F(OpValidation, SetMustWriteInsideItsResult) {
    ggml_tensor *a = f32(16), *b = f32(4);
    ggml_tensor *node = ggml_set_1d(ctx.get(), a, b, 12 * sizeof(float));  // the last 4 elements
    ASSERT_TRUE(Accepted(node));
    node->op_params[3] = 13 * sizeof(float);
    EXPECT_TRUE(Refused(node, "would end past the result's 64 bytes"));
    node->op_params[3] = -4;
    EXPECT_TRUE(Refused(node, "negative stride or offset"));
}

TEST_F(OpValidation, AccNeedsF32AndAWriteInsideItsResult) {
    ggml_tensor *a = f32(4, 4), *b = f32(2, 2);
    ggml_tensor *node = ggml_acc(ctx.get(), a, b, a->nb[1], a->nb[2], a->nb[3], 2 * sizeof(float));
    ASSERT_TRUE(Accepted(node));
    node->op_params[0] = 64;  // rows 64 bytes apart: the second row lands past the end
    EXPECT_TRUE(Refused(node, "would end past"));
    node->op_params[0] = static_cast<int32_t>(a->nb[1]);
    retype(b, GGML_TYPE_F16);
    EXPECT_TRUE(Refused(node, "src[1] type f16 should be f32"));
}

// Reductions and reshaping ops.

TEST_F(OpValidation, RowReductionsHaveOneColumnPerRow) {
    for (auto make : {ggml_sum_rows, ggml_mean}) {
        ggml_tensor *node = make(ctx.get(), f32(8, 3, 2));
        ASSERT_TRUE(Accepted(node));
        reshape(node, 2, 3, 2);
        EXPECT_TRUE(Refused(node, "should be [1, 3, 2, 1]"));
    }
    ggml_tensor *sum = ggml_sum(ctx.get(), f32(8, 3));
    ASSERT_TRUE(Accepted(sum));
    reshape(sum, 2);
    EXPECT_TRUE(Refused(sum, "should be a scalar"));
}

TEST_F(OpValidation, ArgmaxGivesOneI32PerRow) {
    ggml_tensor *node = ggml_argmax(ctx.get(), f32(8, 3));
    ASSERT_TRUE(Accepted(node));
    retype(node, GGML_TYPE_F32);
    EXPECT_TRUE(Refused(node, "result type f32 should be i32"));
}

TEST_F(OpValidation, CountEqualComparesSameShapes) {
    ggml_tensor *b = i32(8);
    ggml_tensor *node = ggml_count_equal(ctx.get(), i32(8), b);
    ASSERT_TRUE(Accepted(node));
    reshape(b, 4);
    EXPECT_TRUE(Refused(node, "differs from"));
}

TEST_F(OpValidation, RepeatNeedsAMultipleOfItsSource) {
    ggml_tensor *node = ggml_repeat(ctx.get(), f32(4, 1), f32(8, 3));
    ASSERT_TRUE(Accepted(node));
    reshape(node, 6, 3);
    EXPECT_TRUE(Refused(node, "cannot be repeated"));
    ggml_tensor *back = ggml_repeat_back(ctx.get(), f32(8, 3), f32(4, 1));
    ASSERT_TRUE(Accepted(back));
    reshape(back, 3);
    EXPECT_TRUE(Refused(back, "cannot be repeated"));
}

TEST_F(OpValidation, ConcatJoinsAlongAnExistingDimension) {
    ggml_tensor *b = f32(8, 2);
    ggml_tensor *node = ggml_concat(ctx.get(), f32(8, 3), b, 1);
    ASSERT_TRUE(Accepted(node));
    node->op_params[0] = 4;
    EXPECT_TRUE(Refused(node, "dimension 4 does not exist"));
    node->op_params[0] = 1;
    reshape(b, 4, 2);
    EXPECT_TRUE(Refused(node, "differ outside dimension 1"));
    reshape(b, 8, 2);
    reshape(node, 8, 6);
    EXPECT_TRUE(Refused(node, "should be [8, 5, 1, 1]"));
}

TEST_F(OpValidation, CopiesKeepTheElementCount) {
    ggml_tensor *dst = tensor(GGML_TYPE_F16, 4, 6);
    ggml_tensor *cpy = ggml_cpy(ctx.get(), f32(8, 3), dst);
    ASSERT_TRUE(Accepted(cpy));
    reshape(dst, 4, 5);
    EXPECT_TRUE(Refused(cpy, "src[1] has 20"));
    for (ggml_tensor *node :
         {ggml_dup(ctx.get(), f32(8, 3)), ggml_cont(ctx.get(), ggml_transpose(ctx.get(), f32(8, 3))),
          ggml_cont_2d(ctx.get(), f32(8, 3), 4, 6)}) {
        ASSERT_TRUE(Accepted(node)) << ggml_op_name(node->op);
        reshape(node, 5, 5);
        EXPECT_TRUE(Refused(node, "result has 25 elements, src[0] has 24")) << ggml_op_name(node->op);
    }
}

TEST_F(OpValidation, CastIsACopyWithoutASeparateDestination) {
    ggml_tensor *node = ggml_cast(ctx.get(), f32(8, 3), GGML_TYPE_F16);
    node->src[1] = nullptr;  // ggml points src[1] at the node itself, which a tensor list cannot say
    EXPECT_TRUE(Accepted(node));
}

TEST_F(OpValidation, ViewsNeedOnlyTheirSource) {
    ggml_tensor *a = f32(8, 3);
    for (ggml_tensor *node : {ggml_reshape_2d(ctx.get(), a, 4, 6), ggml_view_1d(ctx.get(), a, 4, 0),
                              ggml_permute(ctx.get(), a, 1, 0, 2, 3), ggml_transpose(ctx.get(), a)}) {
        ASSERT_TRUE(Accepted(node)) << ggml_op_name(node->op);
        node->src[0] = nullptr;
        EXPECT_TRUE(Refused(node, "src[0] is missing")) << ggml_op_name(node->op);
    }
}

// Matrix products.

TEST_F(OpValidation, MulMatAcceptsBroadcastOverDimsTwoAndThree) {
    EXPECT_TRUE(Accepted(ggml_mul_mat(ctx.get(), tensor(GGML_TYPE_Q8_0, 64, 16, 2, 1), f32(64, 5, 4, 3))));
}

TEST_F(OpValidation, MulMatRefusesDifferentRowLengths) {
    ggml_tensor *b = f32(64, 5);
    ggml_tensor *node = ggml_mul_mat(ctx.get(), f32(64, 16), b);
    reshape(b, 32, 5);
    EXPECT_TRUE(Refused(node, "differ in ne[0]"));
}

TEST_F(OpValidation, MulMatRefusesSourcesThatDoNotBroadcast) {
    ggml_tensor *a = f32(64, 16, 2);
    ggml_tensor *node = ggml_mul_mat(ctx.get(), a, f32(64, 5, 4));
    ASSERT_TRUE(Accepted(node));
    reshape(a, 64, 16, 3);
    EXPECT_TRUE(Refused(node, "cannot be broadcast"));
    reshape(a, 64, 16, 0);  // ggml itself would divide by zero here
    EXPECT_TRUE(Refused(node, "cannot be broadcast"));
}

TEST_F(OpValidation, MulMatRefusesAResultOfTheWrongShapeOrType) {
    ggml_tensor *node = ggml_mul_mat(ctx.get(), f32(64, 16), f32(64, 5));
    reshape(node, 16, 6);
    EXPECT_TRUE(Refused(node, "result [16, 6, 1, 1] should be [16, 5, 1, 1]"));
    reshape(node, 16, 5);
    retype(node, GGML_TYPE_F16);
    EXPECT_TRUE(Refused(node, "result type f16 should be f32"));
}

TEST_F(OpValidation, MulMatRefusesATransposedFirstSource) {
    ggml_tensor *node = ggml_mul_mat(ctx.get(), f32(64, 64), f32(64, 5));
    node->src[0] = ggml_transpose(ctx.get(), node->src[0]);
    EXPECT_TRUE(Refused(node, "src[0] rows are not dense"));  // what ggml-cpu asserts first
}

// Found by the dispatcher fuzzer: ggml-cpu's matrix product asserts these.
TEST_F(OpValidation, MulMatRefusesAPermutedResult) {
    ggml_tensor *node = ggml_mul_mat(ctx.get(), f32(64, 16, 1, 2), f32(64, 5, 3, 2));
    ASSERT_TRUE(Accepted(node));
    std::swap(node->nb[2], node->nb[3]);
    EXPECT_TRUE(Refused(node, "the result is transposed or permuted"));
}

TEST_F(OpValidation, MulMatNeedsADotProductAndAnF32OrMatchingSecondSource) {
    EXPECT_TRUE(Accepted(ggml_mul_mat(ctx.get(), tensor(GGML_TYPE_F16, 64, 16), tensor(GGML_TYPE_F16, 64, 5))));
    EXPECT_TRUE(Refused(ggml_mul_mat(ctx.get(), i32(64, 16), f32(64, 5)), "src[0] type i32 has no dot product"));
    EXPECT_TRUE(
        Refused(ggml_mul_mat(ctx.get(), f32(64, 16), tensor(GGML_TYPE_F16, 64, 5)), "src[1] type f16 should be f32"));
    EXPECT_TRUE(Refused(ggml_mul_mat(ctx.get(), tensor(GGML_TYPE_Q8_0, 64, 16), tensor(GGML_TYPE_Q8_0, 64, 5)),
                        "src[1] type q8_0 should be f32"));
}

TEST_F(OpValidation, MulMatIdChecksTheExpertIds) {
    ggml_tensor *ids = i32(2, 7);
    ggml_tensor *node = ggml_mul_mat_id(ctx.get(), tensor(GGML_TYPE_Q4_0, 64, 32, 4), f32(64, 1, 7), ids);
    ASSERT_TRUE(Accepted(node));
    reshape(ids, 2, 6);
    EXPECT_TRUE(Refused(node, "ids [2, 6, 1, 1] do not fit"));
    reshape(ids, 2, 7);
    retype(ids, GGML_TYPE_I64);
    EXPECT_TRUE(Refused(node, "src[2] type i64 should be i32"));
    retype(ids, GGML_TYPE_I32);
    reshape(node, 32, 2, 6);
    EXPECT_TRUE(Refused(node, "should be [32, 2, 7, 1]"));
}

TEST_F(OpValidation, OutProdNeedsMatchingRows) {
    ggml_tensor *b = f32(6, 4);
    ggml_tensor *node = ggml_out_prod(ctx.get(), f32(8, 4), b);
    ASSERT_TRUE(Accepted(node));
    reshape(b, 6, 5);
    EXPECT_TRUE(Refused(node, "do not fit"));
}

// Rows.

TEST_F(OpValidation, GetRowsNeedsI32RowIdsAndItsResultShape) {
    ggml_tensor *rows = i32(5);
    ggml_tensor *node = ggml_get_rows(ctx.get(), tensor(GGML_TYPE_Q4_K, 256, 100), rows);
    ASSERT_TRUE(Accepted(node));
    retype(rows, GGML_TYPE_F32);
    EXPECT_TRUE(Refused(node, "src[1] type f32 should be i32"));
    retype(rows, GGML_TYPE_I32);
    reshape(node, 256, 6);
    EXPECT_TRUE(Refused(node, "should be [256, 5, 1, 1]"));
    reshape(node, 256, 5);
    retype(node, GGML_TYPE_F16);
    EXPECT_TRUE(Refused(node, "result type f16 should be f32"));
    retype(node, GGML_TYPE_F32);
    reshape(rows, 5, 2);
    EXPECT_TRUE(Refused(node, "row ids [5, 2, 1, 1] do not fit"));
}

TEST_F(OpValidation, GetRowsOfI32GivesI32) { EXPECT_TRUE(Accepted(ggml_get_rows(ctx.get(), i32(4, 10), i32(3)))); }

TEST_F(OpValidation, GetRowsBackReadsOneGradientRowPerId) {
    ggml_tensor *rows = i32(2);
    ggml_tensor *node = ggml_get_rows_back(ctx.get(), f32(256, 4), rows, f32(256, 10));
    ASSERT_TRUE(Accepted(node));
    reshape(rows, 5);
    EXPECT_TRUE(Refused(node, "row ids [5, 1, 1, 1] do not fit"));
}

TEST_F(OpValidation, SetRowsTakesI32OrI64RowIds) {
    ggml_tensor *destination = tensor(GGML_TYPE_Q8_0, 64, 100), *values = f32(64, 5);
    EXPECT_TRUE(Accepted(ggml_set_rows(ctx.get(), destination, values, tensor(GGML_TYPE_I64, 5))));
    ggml_tensor *rows = i32(5);
    ggml_tensor *node = ggml_set_rows(ctx.get(), destination, values, rows);
    ASSERT_TRUE(Accepted(node));
    retype(rows, GGML_TYPE_F32);
    EXPECT_TRUE(Refused(node, "src[1] type f32 should be i64 or i32"));
    retype(rows, GGML_TYPE_I32);
    reshape(rows, 4);
    EXPECT_TRUE(Refused(node, "row ids [4, 1, 1, 1] do not fit"));
    reshape(rows, 5);
    reshape(values, 32, 5);
    EXPECT_TRUE(Refused(node, "does not fit src[0] [32, 5, 1, 1]"));
}

TEST_F(OpValidation, DiagNeedsARow) {
    ggml_tensor *a = f32(8);
    ggml_tensor *node = ggml_diag(ctx.get(), a);
    ASSERT_TRUE(Accepted(node));
    reshape(node, 8, 4);
    EXPECT_TRUE(Refused(node, "should be [8, 8, 1, 1]"));
}

// Attention.

TEST_F(OpValidation, SoftMaxChecksItsMaskAndSinks) {
    ggml_tensor *kq = f32(32, 4, 8), *mask = tensor(GGML_TYPE_F16, 32, 8);
    ggml_tensor *node = ggml_soft_max_ext(ctx.get(), kq, mask, 0.125f, 0.0f);
    ASSERT_TRUE(Accepted(node));
    ggml_tensor *sinks = f32(8);
    ggml_soft_max_add_sinks(node, sinks);
    ASSERT_TRUE(Accepted(node));
    reshape(sinks, 4);
    EXPECT_TRUE(Refused(node, "sinks [4, 1, 1, 1] do not fit"));
    reshape(sinks, 8);
    reshape(mask, 32, 2);  // fewer mask rows than rows to mask
    EXPECT_TRUE(Refused(node, "mask [32, 2, 1, 1] does not fit"));
    reshape(mask, 32, 8);
    retype(mask, GGML_TYPE_I32);
    EXPECT_TRUE(Refused(node, "src[1] type i32 should be f16 or f32"));
}

TEST_F(OpValidation, SoftMaxWithAlibiNeedsAMask) {
    ggml_tensor *node = ggml_soft_max_ext(ctx.get(), f32(32, 4, 8), tensor(GGML_TYPE_F16, 32, 4), 1.0f, 8.0f);
    ASSERT_TRUE(Accepted(node));
    node->src[1] = nullptr;
    EXPECT_TRUE(Refused(node, "needs a mask"));
}

TEST_F(OpValidation, RopeNeedsOneI32PositionPerRowOfDimTwo) {
    ggml_tensor *positions = i32(7);
    ggml_tensor *node = ggml_rope_ext(ctx.get(), f32(64, 8, 7), positions, nullptr, 64, GGML_ROPE_TYPE_NEOX, 4096,
                                      10000.0f, 1.0f, 0.0f, 1.0f, 32.0f, 1.0f);
    ASSERT_TRUE(Accepted(node));
    reshape(positions, 6);
    EXPECT_TRUE(Refused(node, "positions [6, 1, 1, 1] do not fit"));
    reshape(positions, 7);
    retype(positions, GGML_TYPE_F32);
    EXPECT_TRUE(Refused(node, "src[1] type f32 should be i32"));
}

TEST_F(OpValidation, RopeDimensionsMustFitTheRows) {
    ggml_tensor *node = ggml_rope(ctx.get(), f32(64, 8, 7), i32(7), 32, GGML_ROPE_TYPE_NORMAL);
    ASSERT_TRUE(Accepted(node));
    for (int32_t n_dims : {66, 33, -2}) {
        node->op_params[1] = n_dims;
        EXPECT_TRUE(Refused(node, "n_dims " + std::to_string(n_dims))) << n_dims;
    }
}

TEST_F(OpValidation, RopeFrequencyFactorsCoverHalfTheDimensions) {
    ggml_tensor *factors = f32(32);
    ggml_tensor *node = ggml_rope_ext(ctx.get(), f32(64, 8, 7), i32(7), factors, 64, GGML_ROPE_TYPE_NEOX, 4096,
                                      10000.0f, 1.0f, 0.0f, 1.0f, 32.0f, 1.0f);
    ASSERT_TRUE(Accepted(node));
    reshape(factors, 16);
    EXPECT_TRUE(Refused(node, "fewer than ne[0] / 2"));
}

// ggml-cpu reads ne[0] / 2 factors whatever n_dims is: 16 factors for 32 of 64
// dimensions pass ggml's own assert, and the kernel reads 16 floats past them,
// which must still be the guest's buffer.
TEST_F(OpValidation, RopeFrequencyFactorsCoverWhatTheKernelReads) {
    if (ggml_backend_dev_count() == 0) ggml_backend_load_all();
    ggml_backend_dev_t cpu = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
    ASSERT_NE(cpu, nullptr);
    ggml_tensor *factors = f32(16);
    ggml_tensor *node = ggml_rope_ext(ctx.get(), f32(64, 8, 7), i32(7), factors, 32, GGML_ROPE_TYPE_NEOX, 4096,
                                      10000.0f, 1.0f, 0.0f, 1.0f, 32.0f, 1.0f);
    ggml_backend_buffer_t exact = ggml_backend_buft_alloc_buffer(ggml_backend_dev_buffer_type(cpu), 16 * 4);
    ggml_backend_buffer_t roomy = ggml_backend_buft_alloc_buffer(ggml_backend_dev_buffer_type(cpu), 32 * 4);
    factors->buffer = exact;
    factors->data = ggml_backend_buffer_get_base(exact);
    EXPECT_TRUE(Refused(node, "fewer than ne[0] / 2"));
    factors->buffer = roomy;
    factors->data = ggml_backend_buffer_get_base(roomy);
    EXPECT_TRUE(Accepted(node));
    ggml_backend_buffer_free(exact);
    ggml_backend_buffer_free(roomy);
}

// ggml-cpu divides by the sum of the M-RoPE sections; its assert sees only that one
// of the first three is positive.
TEST_F(OpValidation, MultiRopeSectionsMustAddUpToSomethingThatFits) {
    int sections[GGML_MROPE_SECTIONS] = {16, 8, 8, 0};
    ggml_tensor *node = ggml_rope_multi(ctx.get(), f32(64, 8, 7), i32(4 * 7), nullptr, 64, sections,
                                        GGML_ROPE_TYPE_MROPE, 4096, 10000.0f, 1.0f, 0.0f, 1.0f, 32.0f, 1.0f);
    ASSERT_TRUE(Accepted(node));
    node->op_params[12] = -16;
    node->op_params[13] = 0;
    EXPECT_TRUE(Refused(node, "negative rope section"));
    node->op_params[11] = 0;
    node->op_params[12] = 0;
    EXPECT_TRUE(Refused(node, "sections adding up to 0"));
    node->op_params[11] = 1000;
    EXPECT_TRUE(Refused(node, "sections adding up to 1000"));
}

// Found by the session fuzzer: with n_dims = 0, ggml-cpu's loop over the pairs
// left unrotated steps from 0 to -2 and back, for ever.
TEST_F(OpValidation, RopeOfNoDimensionsIsRefused) {
    ggml_tensor *node = ggml_rope(ctx.get(), f32(16, 2, 17), i32(17), 16, GGML_ROPE_TYPE_NORMAL);
    ASSERT_TRUE(Accepted(node));
    node->op_params[1] = 0;
    EXPECT_TRUE(Refused(node, "n_dims 0"));
}

TEST_F(OpValidation, RopeModesOutsideGgmlsSwitchAreRefused) {
    ggml_tensor *node = ggml_rope(ctx.get(), f32(64, 8, 7), i32(7), 64, GGML_ROPE_TYPE_NEOX);
    ASSERT_TRUE(Accepted(node));
    node->op_params[2] = 4;  // ggml-cpu: GGML_ABORT("rope type not supported")
    EXPECT_TRUE(Refused(node, "mode 4"));
}

// The ops checked by replaying ggml's constructor: a node ggml made passes; the same
// node with a result of another shape, a stride ggml never chose, or arguments that
// fail ggml's own asserts is refused, and the worker does not abort.
TEST_F(OpValidation, ReplayedConvolutionAcceptsWhatGgmlMakes) {
    ggml_tensor *node = ggml_conv_2d_direct(ctx.get(), f32(3, 3, 4, 8), f32(16, 16, 4, 1), 1, 1, 1, 1, 1, 1);
    EXPECT_TRUE(Accepted(node));
    node->ne[1] = 1;  // a result row the kernel would still write 16 of
    EXPECT_TRUE(Refused(node, "should be"));
}

TEST_F(OpValidation, ReplayedConvolutionRefusesStridesOfSizeOneDimensions) {
    ggml_tensor *node = ggml_conv_2d_direct(ctx.get(), f32(3, 3, 4, 8), f32(16, 16, 4, 1), 1, 1, 1, 1, 1, 1);
    node->nb[3] = 1 << 20;  // ne[3] is 1: a stride no span check sees
    EXPECT_TRUE(Refused(node, "strides differ"));
}

TEST_F(OpValidation, ReplayedConstructorAssertsBecomeRefusals) {
    ggml_tensor *node = ggml_conv_2d_direct(ctx.get(), f32(3, 3, 4, 8), f32(16, 16, 4, 1), 1, 1, 1, 1, 1, 1);
    node->src[1] = f32(16, 16, 5, 1);  // channels differ: GGML_ASSERT(a->ne[2] == b->ne[2])
    EXPECT_TRUE(Refused(node, "ggml refuses these arguments"));
}

TEST_F(OpValidation, ReplayedConvolutionRefusesAZeroStride) {
    ggml_tensor *node = ggml_conv_2d_direct(ctx.get(), f32(3, 3, 4, 8), f32(16, 16, 4, 1), 1, 1, 1, 1, 1, 1);
    node->op_params[0] = 0;  // ggml divides by it
    EXPECT_TRUE(Refused(node, "op_params[0] = 0 out of range"));
}

TEST_F(OpValidation, ReplayedOpRefusesExtraOpParams) {
    ggml_tensor *node = ggml_pad(ctx.get(), f32(8, 8), 1, 1, 0, 0);
    ASSERT_TRUE(Accepted(node));
    node->op_params[12] = 7;
    EXPECT_TRUE(Refused(node, "op_params hold values"));
}

TEST_F(OpValidation, ReplayedOpNeedsContiguousSourcesWhereTheKernelReadsThemDensely) {
    ggml_tensor *node =
        ggml_im2col(ctx.get(), f32(3, 3, 4, 8), f32(16, 16, 4, 1), 1, 1, 1, 1, 1, 1, true, GGML_TYPE_F32);
    ASSERT_TRUE(Accepted(node));
    node->src[1]->nb[2] *= 2;
    EXPECT_TRUE(Refused(node, "not contiguous"));
}

TEST_F(OpValidation, OpsWithoutARuleAreRefused) {
    ggml_tensor *node = ggml_win_part(ctx.get(), f32(8, 8, 8), 4);
    EXPECT_TRUE(Refused(node, "not accepted from a guest"));
}

TEST_F(OpValidation, MultiRopeTakesFourPositionsPerToken) {
    int sections[GGML_MROPE_SECTIONS] = {16, 8, 8, 0};
    ggml_tensor *positions = i32(4 * 7);
    ggml_tensor *node = ggml_rope_multi(ctx.get(), f32(64, 8, 7), positions, nullptr, 64, sections,
                                        GGML_ROPE_TYPE_MROPE, 4096, 10000.0f, 1.0f, 0.0f, 1.0f, 32.0f, 1.0f);
    ASSERT_TRUE(Accepted(node));
    reshape(positions, 7);
    EXPECT_TRUE(Refused(node, "4 per row of dim 2"));
}

class FlashAttention : public OpValidation {
  protected:
    // 4 queries of 8 heads over 32 cached keys of 2 heads (grouped-query attention).
    ggml_tensor *q = f32(64, 4, 8), *k = tensor(GGML_TYPE_F16, 64, 32, 2), *v = tensor(GGML_TYPE_F16, 64, 32, 2);
    ggml_tensor *mask = tensor(GGML_TYPE_F16, 32, 4);
    ggml_tensor *node = ggml_flash_attn_ext(ctx.get(), q, k, v, mask, 0.125f, 0.0f, 0.0f);
};

TEST_F(FlashAttention, AcceptsGroupedQueryAttentionWithAMask) { EXPECT_TRUE(Accepted(node)); }

TEST_F(FlashAttention, RefusesKeysOfAnotherHeadSize) {
    reshape(k, 128, 32, 2);
    EXPECT_TRUE(Refused(node, "differ in head size"));
}

TEST_F(FlashAttention, RefusesHeadsThatCannotBeShared) {
    reshape(v, 64, 32, 3);
    EXPECT_TRUE(Refused(node, "cannot be shared"));
}

TEST_F(FlashAttention, RefusesValuesOfAnotherLength) {
    reshape(v, 64, 16, 2);
    EXPECT_TRUE(Refused(node, "differ in length"));
}

TEST_F(FlashAttention, RefusesAMaskShorterThanTheKeys) {
    reshape(mask, 16, 4);
    EXPECT_TRUE(Refused(node, "mask [16, 4, 1, 1] does not fit"));
    reshape(mask, 32, 2);
    EXPECT_TRUE(Refused(node, "mask [32, 2, 1, 1] does not fit"));
}

TEST_F(FlashAttention, RefusesAResultOfTheWrongShape) {
    reshape(node, 64, 4, 8);
    EXPECT_TRUE(Refused(node, "should be [64, 8, 4, 1]"));
}

// Found by the dispatcher fuzzer: ggml-cpu aborts on an accumulator precision other
// than these two.
TEST_F(FlashAttention, AcceptsTheDefaultAndF32AccumulatorsOnly) {
    ASSERT_TRUE(ggml_prec_set_acc(node, GGML_PREC_F32));
    EXPECT_TRUE(Accepted(node));
    ASSERT_TRUE(ggml_prec_set_acc(node, GGML_PREC_F16));
    EXPECT_TRUE(Refused(node, "accumulator precision 20 is not supported"));
    node->op_params[3] = -2;
    EXPECT_TRUE(Refused(node, "accumulator precision -2 is not supported"));
}

// Found by the dispatcher fuzzer: ggml-cpu's kernel asserts these.
TEST_F(FlashAttention, RefusesSparseRowsAPermutedResultAndIntegerKeys) {
    q->nb[0] = 8;
    EXPECT_TRUE(Refused(node, "src[0] rows are not dense"));
    q->nb[0] = 4;
    ASSERT_TRUE(Accepted(node));
    std::swap(node->nb[2], node->nb[3]);
    EXPECT_TRUE(Refused(node, "the result is not contiguous"));  // ggml-cpu copies rows of nb[1] bytes
    std::swap(node->nb[2], node->nb[3]);
    retype(k, GGML_TYPE_I16);
    EXPECT_TRUE(Refused(node, "k and v cannot be of type i16"));
}

TEST_F(FlashAttention, ChecksItsSinks) {
    ggml_tensor *sinks = f32(8);
    ggml_flash_attn_ext_add_sinks(node, sinks);
    ASSERT_TRUE(Accepted(node));
    reshape(sinks, 2);
    EXPECT_TRUE(Refused(node, "sinks [2, 1, 1, 1] do not fit"));
}

// Normalisation and activations.

TEST_F(OpValidation, NormsKeepTheirSourceShape) {
    for (ggml_tensor *node : {ggml_norm(ctx.get(), f32(8, 3), 1e-5f), ggml_rms_norm(ctx.get(), f32(8, 3), 1e-5f),
                              ggml_l2_norm(ctx.get(), f32(8, 3), 1e-5f), ggml_scale(ctx.get(), f32(8, 3), 0.5f)}) {
        ASSERT_TRUE(Accepted(node)) << ggml_op_name(node->op);
        reshape(node, 8, 4);
        EXPECT_TRUE(Refused(node, "differs from src[0]")) << ggml_op_name(node->op);
    }
}

TEST_F(OpValidation, UnaryOpsNeedAKnownOpAndTheSourceShape) {
    ggml_tensor *node = ggml_silu(ctx.get(), f32(8, 3));
    ASSERT_TRUE(Accepted(node));
    node->op_params[0] = GGML_UNARY_OP_COUNT;
    EXPECT_TRUE(Refused(node, "unary op " + std::to_string(GGML_UNARY_OP_COUNT) + " does not exist"));
    node->op_params[0] = GGML_UNARY_OP_GELU;
    reshape(node, 8, 4);
    EXPECT_TRUE(Refused(node, "differs from src[0]"));
}

TEST_F(OpValidation, GatedUnitsHalveTheirSourceOrPairTwoSources) {
    ggml_tensor *fused = ggml_swiglu(ctx.get(), f32(16, 3));
    ASSERT_TRUE(Accepted(fused));
    reshape(fused, 16, 3);
    EXPECT_TRUE(Refused(fused, "should be [8, 3, 1, 1]"));

    ggml_tensor *up = f32(16, 3);
    ggml_tensor *split = ggml_swiglu_split(ctx.get(), f32(16, 3), up);
    ASSERT_TRUE(Accepted(split));
    reshape(up, 8, 3);
    EXPECT_TRUE(Refused(split, "differs from"));
    reshape(up, 16, 3);
    split->op_params[0] = GGML_GLU_OP_COUNT;
    EXPECT_TRUE(Refused(split, "does not exist"));
}

TEST_F(OpValidation, SortingGivesI32Indexes) {
    ggml_tensor *sorted = ggml_argsort(ctx.get(), f32(32, 2), GGML_SORT_ORDER_DESC);
    ASSERT_TRUE(Accepted(sorted));
    retype(sorted, GGML_TYPE_F32);
    EXPECT_TRUE(Refused(sorted, "should be i32"));
    ggml_tensor *top = ggml_top_k(ctx.get(), f32(32, 2), 4);
    ASSERT_TRUE(Accepted(top));
    reshape(top, 33, 2);
    EXPECT_TRUE(Refused(top, "does not fit"));
}

}  // namespace
}  // namespace ggml_remote::host
