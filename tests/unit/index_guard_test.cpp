// IndexGuard (host/index_guard.h): the indexes a kernel follows are checked in a
// private copy, and the kernel reads that copy, not the guest's bytes again; indexes
// the graph computes are checked between segments of the compute.
#include "host/worker/graph/index_guard.h"

#include <ggml-alloc.h>
#include <ggml-backend.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "ggml_test_support.h"

namespace ggml_remote::host {
namespace {

using test_support::metadata_context;
using ::testing::HasSubstr;

struct BackendFree {
    void operator()(ggml_backend *backend) const { ggml_backend_free(backend); }
};
struct BufferFree {
    void operator()(ggml_backend_buffer *buffer) const { ggml_backend_buffer_free(buffer); }
};

// A graph over a CPU buffer, and the CPU backend to compute it.
class IndexGuardTest : public ::testing::Test {
  protected:
    void SetUp() override {
        backend.reset(ggml_backend_dev_init(test_support::host_cpu_device(), nullptr));
        ASSERT_NE(backend, nullptr);
        ctx = metadata_context(32);
    }

    ggml_cgraph *allocate(ggml_tensor *output) {
        ggml_cgraph *graph = ggml_new_graph(ctx.get());
        ggml_build_forward_expand(graph, output);
        buffer.reset(ggml_backend_alloc_ctx_tensors(ctx.get(), backend.get()));
        EXPECT_NE(buffer, nullptr);
        return graph;
    }

    // A table of `rows` rows of 4 floats: row r holds r*10 + column.
    ggml_tensor *table(int64_t rows) {
        ggml_tensor *t = ggml_new_tensor_2d(ctx.get(), GGML_TYPE_F32, 4, rows);
        tables.push_back(t);
        return t;
    }
    void fill_tables() {
        for (ggml_tensor *t : tables) {
            std::vector<float> values(ggml_nelements(t));
            for (size_t k = 0; k < values.size(); ++k) values[k] = float((k / 4) * 10 + k % 4);
            ggml_backend_tensor_set(t, values.data(), 0, ggml_nbytes(t));
        }
    }
    static void set_ids(ggml_tensor *ids, const std::vector<int32_t> &values) {
        ggml_backend_tensor_set(ids, values.data(), 0, values.size() * sizeof(int32_t));
    }
    static std::vector<float> floats(const ggml_tensor *t) {
        std::vector<float> values(ggml_nelements(t));
        ggml_backend_tensor_get(t, values.data(), 0, ggml_nbytes(t));
        return values;
    }
    static IndexGuard::GuestWritable all_shared() {
        return [](const ggml_backend_buffer *) { return true; };
    }

    std::unique_ptr<ggml_backend, BackendFree> backend;
    test_support::GgmlContext ctx;
    std::unique_ptr<ggml_backend_buffer, BufferFree> buffer;
    std::vector<ggml_tensor *> tables;
};

TEST_F(IndexGuardTest, TheKernelReadsTheCheckedCopyNotTheGuestsBytesAgain) {
    ggml_tensor *ids = ggml_new_tensor_1d(ctx.get(), GGML_TYPE_I32, 2);
    ggml_tensor *rows = ggml_get_rows(ctx.get(), table(3), ids);
    ggml_cgraph *graph = allocate(rows);
    fill_tables();
    set_ids(ids, {2, 0});
    IndexGuard guard;
    ASSERT_TRUE(guard.plan(graph, all_shared()).ok());
    EXPECT_NE(rows->src[1], ids);  // the node reads a private tensor from now on
    ASSERT_TRUE(guard.check_at_start().ok());
    // The guest rewrites its ids between the check and the kernel, as over shm.
    set_ids(ids, {1 << 30, -1});
    Status refused;
    ASSERT_EQ(guard.compute(backend.get(), graph, &refused), GGML_STATUS_SUCCESS);
    EXPECT_EQ(floats(rows), (std::vector<float>{20, 21, 22, 23, 0, 1, 2, 3}));
    // The next compute checks what the guest wrote: refused, before any kernel.
    Status checked = guard.check_at_start();
    EXPECT_FALSE(checked.ok());
    EXPECT_THAT(checked.message(), HasSubstr("index 1073741824 (element 0 of src[1]) is not in [0, 3)"));
}

TEST_F(IndexGuardTest, EveryIndexOpIsCheckedAgainstTheBoundItsKernelUses) {
    ggml_tensor *ids = ggml_new_tensor_1d(ctx.get(), GGML_TYPE_I32, 1);
    ggml_tensor *grads = ggml_new_tensor_2d(ctx.get(), GGML_TYPE_F32, 4, 1);
    ggml_tensor *back = ggml_get_rows_back(ctx.get(), grads, ids, table(5));  // GET_ROWS_BACK: unchecked by ggml-cpu
    ggml_cgraph *graph = allocate(back);
    fill_tables();
    IndexGuard guard;
    ASSERT_TRUE(guard.plan(graph, all_shared()).ok());
    set_ids(ids, {5});
    EXPECT_THAT(guard.check_at_start().message(), HasSubstr("is not in [0, 5)"));
    set_ids(ids, {4});
    EXPECT_TRUE(guard.check_at_start().ok());
}

TEST_F(IndexGuardTest, StridedIdsAreGatheredDense) {
    ggml_tensor *all = ggml_new_tensor_2d(ctx.get(), GGML_TYPE_I32, 2, 2);
    ggml_tensor *column = ggml_view_2d(ctx.get(), all, 1, 2, all->nb[1], 0);  // elements 0 and 2 of `all`
    ggml_tensor *matrices = ggml_new_tensor_3d(ctx.get(), GGML_TYPE_F32, 4, 4, 2);
    tables.push_back(matrices);
    ggml_tensor *rows = ggml_get_rows(ctx.get(), matrices, column);  // one row of each matrix
    ggml_cgraph *graph = allocate(rows);
    fill_tables();
    set_ids(all, {3, 99, 1, -7});  // the elements between are no ids of the view
    IndexGuard guard;
    ASSERT_TRUE(guard.plan(graph, all_shared()).ok());
    ASSERT_TRUE(guard.check_at_start().ok());
    Status refused;
    ASSERT_EQ(guard.compute(backend.get(), graph, &refused), GGML_STATUS_SUCCESS);
    EXPECT_EQ(floats(rows), (std::vector<float>{30, 31, 32, 33, 50, 51, 52, 53}));
}

// ids that a node of the graph writes (here GET_ROWS of an I32 table, as TOP_K
// would) are checked after it and before their reader: the graph runs in two segments.
TEST_F(IndexGuardTest, IdsTheGraphComputesAreCheckedBetweenSegments) {
    ggml_tensor *choices = ggml_new_tensor_2d(ctx.get(), GGML_TYPE_I32, 1, 2);
    ggml_tensor *pick = ggml_new_tensor_1d(ctx.get(), GGML_TYPE_I32, 1);
    ggml_tensor *ids = ggml_reshape_1d(ctx.get(), ggml_get_rows(ctx.get(), choices, pick), 1);
    ggml_tensor *rows = ggml_get_rows(ctx.get(), table(3), ids);
    ggml_cgraph *graph = allocate(rows);
    fill_tables();
    set_ids(choices, {2, 7});
    IndexGuard guard;
    ASSERT_TRUE(guard.plan(graph, all_shared()).ok());
    EXPECT_EQ(guard.segments(), 2u);
    set_ids(pick, {0});
    ASSERT_TRUE(guard.check_at_start().ok());
    Status refused;
    ASSERT_EQ(guard.compute(backend.get(), graph, &refused), GGML_STATUS_SUCCESS);
    EXPECT_EQ(floats(rows), (std::vector<float>{20, 21, 22, 23}));
    set_ids(pick, {1});  // the graph now computes id 7, past the table
    ASSERT_TRUE(guard.check_at_start().ok());
    EXPECT_EQ(guard.compute(backend.get(), graph, &refused), GGML_STATUS_FAILED);
    EXPECT_THAT(refused.message(), HasSubstr("index 7 (element 0 of src[1]) is not in [0, 3)"));
}

// llama.cpp leaves a batch's unused branch out of the compute (no COMPUTE flag),
// with ids of -1 in it: ggml-cpu never runs those nodes, and they are not refused.
TEST_F(IndexGuardTest, NodesNotFlaggedToBeComputedAreNotChecked) {
    ggml_tensor *ids = ggml_new_tensor_1d(ctx.get(), GGML_TYPE_I32, 1);
    ggml_tensor *rows = ggml_get_rows(ctx.get(), table(3), ids);
    ggml_cgraph *graph = allocate(rows);
    fill_tables();
    set_ids(ids, {-1});
    rows->flags &= ~GGML_TENSOR_FLAG_COMPUTE;
    IndexGuard guard;
    ASSERT_TRUE(guard.plan(graph, all_shared()).ok());
    EXPECT_TRUE(guard.empty());
    Status refused;
    EXPECT_EQ(guard.compute(backend.get(), graph, &refused), GGML_STATUS_SUCCESS);
}

TEST_F(IndexGuardTest, SsmScanWithFewerIdsThanSequencesIsRefused) {
    ggml_tensor *s = ggml_new_tensor_4d(ctx.get(), GGML_TYPE_F32, 4, 2, 2, 4);
    ggml_tensor *x = ggml_new_tensor_4d(ctx.get(), GGML_TYPE_F32, 2, 2, 1, 2);  // 2 sequences
    ggml_tensor *dt = ggml_new_tensor_3d(ctx.get(), GGML_TYPE_F32, 2, 1, 2);
    ggml_tensor *a = ggml_new_tensor_2d(ctx.get(), GGML_TYPE_F32, 1, 2);
    ggml_tensor *b = ggml_new_tensor_4d(ctx.get(), GGML_TYPE_F32, 4, 1, 1, 2);
    ggml_tensor *c = ggml_new_tensor_4d(ctx.get(), GGML_TYPE_F32, 4, 1, 1, 2);
    ggml_tensor *ids = ggml_new_tensor_1d(ctx.get(), GGML_TYPE_I32, 2);
    ggml_tensor *scan = ggml_ssm_scan(ctx.get(), s, x, dt, a, b, c, ids, 1);
    scan->src[6] = ggml_new_tensor_1d(ctx.get(), GGML_TYPE_I32, 1);  // as a guest may describe it: one id
    ggml_cgraph *graph = allocate(scan);
    IndexGuard guard;
    Status planned = guard.plan(graph, all_shared());
    EXPECT_FALSE(planned.ok());
    EXPECT_THAT(planned.message(), HasSubstr("fewer sequence ids than sequences"));
}

TEST_F(IndexGuardTest, ArgsortCopiesOnlyValuesTheGuestCanWrite) {
    ggml_tensor *values = ggml_new_tensor_1d(ctx.get(), GGML_TYPE_F32, 8);
    ggml_tensor *order = ggml_argsort(ctx.get(), values, GGML_SORT_ORDER_ASC);
    ggml_cgraph *graph = allocate(order);
    IndexGuard private_memory, shared;
    ASSERT_TRUE(private_memory.plan(graph, [](const ggml_backend_buffer *) { return false; }).ok());
    EXPECT_TRUE(private_memory.empty());
    EXPECT_EQ(order->src[0], values);
    ASSERT_TRUE(shared.plan(graph, all_shared()).ok());
    EXPECT_FALSE(shared.empty());
    EXPECT_NE(order->src[0], values);
}

}  // namespace
}  // namespace ggml_remote::host
