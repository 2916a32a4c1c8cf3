// The host's graph: the guest's nodes in the guest's order, with the use counts
// that let backends fuse ops, and tensors computed outside the graph as inputs.
#include "host/worker/graph/graph_builder.h"

#include <ggml-backend.h>
#include <gtest/gtest.h>

#include <mutex>

#include "ggml_test_support.h"

namespace ggml_remote::host {
namespace {

using protocol::ByteView;
using test_support::metadata_context;
using test_support::PlacementArena;

constexpr uint64_t kHandle = 7;
constexpr size_t kArenaSize = 1 << 16;

ggml_backend_buffer_t cpu_buffer() {
    static std::once_flag loaded;
    std::call_once(loaded, [] {
        unsetenv("GGML_BACKEND_PATH");
        ggml_backend_load_all();
    });
    ggml_backend_dev_t cpu = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
    return ggml_backend_buft_alloc_buffer(ggml_backend_dev_buffer_type(cpu), kArenaSize);
}

// x and w are inputs; `earlier` was computed before this graph (another split);
// the graph is RMS_NORM(earlier) then MUL by w.
struct NormThenMul {
    test_support::GgmlContext context = metadata_context();
    PlacementArena arena{kHandle, kArenaSize};
    ggml_tensor *x, *w, *earlier, *norm, *product;

    NormThenMul() {
        ggml_context *ctx = context.get();
        x = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 64);
        w = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 64);
        earlier = ggml_add(ctx, x, x);
        norm = ggml_rms_norm(ctx, earlier, 1e-5f);
        product = ggml_mul(ctx, norm, w);
        size_t offset = 0;
        for (ggml_tensor *t : {x, w, earlier, norm, product}) {
            arena.place(t, offset);
            offset += 256;
        }
        product->flags |= GGML_TENSOR_FLAG_OUTPUT;
    }

    Status build(std::initializer_list<ggml_tensor *> nodes, BuiltTensors *built, ggml_backend_buffer_t buffer) {
        protocol::TensorListEncoder encoder(arena.locator());
        for (ggml_tensor *node : nodes) encoder.add_node(node);
        EXPECT_FALSE(encoder.failed());
        std::vector<uint8_t> bytes = encoder.finish();
        protocol::TensorList list;
        Status status = protocol::decode_tensor_list(ByteView(bytes), {}, &list);
        if (!status) return status;
        auto lookup = [buffer](uint64_t handle, BufferView *view) {
            if (handle != kHandle) return error(Code::bad_request, "unknown buffer");
            view->buffer = buffer;
            view->size = kArenaSize;
            return Status::success();
        };
        return build_tensors(list, lookup, DataPolicy::required, built);
    }
};

TEST(GraphBuilder, KeepsTheGuestsNodesAndLeavesEarlierResultsAlone) {
    ggml_backend_buffer_t buffer = cpu_buffer();
    NormThenMul graph;
    BuiltTensors built;
    ASSERT_TRUE(graph.build({graph.norm, graph.product}, &built, buffer));
    ASSERT_NE(built.graph, nullptr);
    ASSERT_EQ(ggml_graph_n_nodes(built.graph), 2);
    EXPECT_EQ(ggml_graph_node(built.graph, 0)->op, GGML_OP_RMS_NORM);
    EXPECT_EQ(ggml_graph_node(built.graph, 1)->op, GGML_OP_MUL);
    EXPECT_EQ(ggml_graph_node(built.graph, 1)->flags, GGML_TENSOR_FLAG_OUTPUT);  // the guest's flags, no more
    // The ADD ran before this graph: an input here, not computed again, and still
    // what the guest said it is.
    const ggml_tensor *input = ggml_graph_node(built.graph, 0)->src[0];
    EXPECT_EQ(input->op, GGML_OP_ADD);
    for (int i = 0; i < ggml_graph_n_nodes(built.graph); ++i) EXPECT_NE(ggml_graph_node(built.graph, i), input);
    ggml_backend_buffer_free(buffer);
}

TEST(GraphBuilder, NodesOutOfDependencyOrderStayInTheGuestsOrder) {
    ggml_backend_buffer_t buffer = cpu_buffer();
    NormThenMul graph;
    BuiltTensors built;
    // The MUL's source RMS_NORM is listed after it: no use counts, the same order.
    ASSERT_TRUE(graph.build({graph.product, graph.norm}, &built, buffer));
    ASSERT_EQ(ggml_graph_n_nodes(built.graph), 2);
    EXPECT_EQ(ggml_graph_node(built.graph, 0)->op, GGML_OP_MUL);
    EXPECT_EQ(ggml_graph_node(built.graph, 1)->op, GGML_OP_RMS_NORM);
    ggml_backend_buffer_free(buffer);
}

}  // namespace
}  // namespace ggml_remote::host
