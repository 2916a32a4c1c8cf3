// LastGraph: whether a backend's next graph is the one it sent last, so that it
// is replayed instead of encoded (guest/last_graph.h).
#include "guest/last_graph.h"

#include <ggml.h>
#include <gtest/gtest.h>

#include <memory>

#include "ggml_test_support.h"
#include "protocol/tensor_codec.h"

namespace ggml_remote::guest {
namespace {

using test_support::GgmlContext;
using test_support::metadata_context;
using test_support::PlacementArena;

// c = a + b, recorded as the backend records a graph it sent.
class LastGraphTest : public ::testing::Test {
  protected:
    void SetUp() override {
        a = ggml_new_tensor_1d(ctx.get(), GGML_TYPE_F32, 8);
        b = ggml_new_tensor_1d(ctx.get(), GGML_TYPE_F32, 8);
        c = ggml_add(ctx.get(), a, b);
        arena.place(a, 0);
        arena.place(b, 32);
        arena.place(c, 64);
        graph = ggml_new_graph(ctx.get());
        ggml_build_forward_expand(graph, c);
        protocol::TensorListEncoder encoder(arena.locator());
        for (int i = 0; i < ggml_graph_n_nodes(graph); ++i) encoder.add_node(ggml_graph_node(graph, i));
        ASSERT_FALSE(encoder.failed()) << encoder.error();
        last.record(graph, encoder.order(), RemoteSession::GraphTicket{3, 7});
    }

    GgmlContext ctx = metadata_context(16, 2);
    PlacementArena arena{1, 256};
    ggml_tensor *a = nullptr, *b = nullptr, *c = nullptr;
    ggml_cgraph *graph = nullptr;
    LastGraph last;
};

TEST_F(LastGraphTest, TheSameGraphIsRecognisedWithItsTicket) {
    EXPECT_TRUE(last.same_as(graph));
    EXPECT_EQ(last.ticket().slot, 3u);
    EXPECT_EQ(last.ticket().stamp, 7u);
}

TEST_F(LastGraphTest, NothingRecordedOrForgottenIsNeverTheSame) {
    EXPECT_FALSE(LastGraph().same_as(graph));
    last.forget();
    EXPECT_FALSE(last.same_as(graph));
}

TEST_F(LastGraphTest, ChangedShapeOfASourceIsAnotherGraph) {
    a->ne[0] = 4;
    EXPECT_FALSE(last.same_as(graph));
}

TEST_F(LastGraphTest, ChangedOpIsAnotherGraph) {
    c->op = GGML_OP_SUB;
    EXPECT_FALSE(last.same_as(graph));
}

TEST_F(LastGraphTest, ChangedSourceIsAnotherGraph) {
    c->src[1] = a;
    EXPECT_FALSE(last.same_as(graph));
}

TEST_F(LastGraphTest, MovedDataIsAnotherGraph) {
    arena.place(b, 96);
    EXPECT_FALSE(last.same_as(graph));
}

TEST_F(LastGraphTest, AnotherNodeListIsAnotherGraph) {
    ggml_cgraph *longer = ggml_new_graph(ctx.get());
    ggml_build_forward_expand(longer, ggml_mul(ctx.get(), c, a));
    EXPECT_FALSE(last.same_as(longer)) << "one node more";
}

// Two sub-graphs in turn, as ggml's meta backend hands them to each server.
TEST_F(LastGraphTest, RecentGraphsKeepSeveralGraphsEachWithItsTicket) {
    ggml_tensor *d = ggml_mul(ctx.get(), a, b);
    arena.place(d, 96);
    ggml_cgraph *other = ggml_new_graph(ctx.get());
    ggml_build_forward_expand(other, d);
    protocol::TensorListEncoder encoder(arena.locator());
    encoder.add_node(d);
    ASSERT_FALSE(encoder.failed()) << encoder.error();
    std::vector<const ggml_tensor *> order_c;
    {
        protocol::TensorListEncoder first(arena.locator());
        first.add_node(c);
        order_c = first.order();
    }
    RecentGraphs recent;
    recent.record(graph, order_c, RemoteSession::GraphTicket{1, 11});
    recent.record(other, encoder.order(), RemoteSession::GraphTicket{2, 22});
    for (int token = 0; token < 3; ++token) {
        const LastGraph *sum = recent.find(graph);
        const LastGraph *product = recent.find(other);
        ASSERT_NE(sum, nullptr);
        ASSERT_NE(product, nullptr);
        EXPECT_EQ(sum->ticket().stamp, 11u);
        EXPECT_EQ(product->ticket().stamp, 22u);
    }
    d->op_params[0] = 1;  // a changed node is another graph
    EXPECT_EQ(recent.find(other), nullptr);
    recent.forget(graph);
    EXPECT_EQ(recent.find(graph), nullptr);
    recent.record(graph, order_c, RemoteSession::GraphTicket{1, 33});
    EXPECT_EQ(recent.find(graph)->ticket().stamp, 33u) << "recorded again in its place";
    recent.forget_all();
    EXPECT_EQ(recent.find(graph), nullptr);
}

}  // namespace
}  // namespace ggml_remote::guest
