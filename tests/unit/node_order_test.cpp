// NodeOrder: a host's answer to GraphOptimize is checked before it reorders anything.
#include "guest/node_order.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "ggml_test_support.h"

namespace ggml_remote::guest {
namespace {

using namespace protocol;
using test_support::GgmlContext;
using test_support::metadata_context;
using ::testing::ElementsAre;

GraphOptimize::Reply reply_of(uint32_t n_nodes, uint32_t n_alloc_deps) {
    GraphOptimize::Reply reply{};
    reply.has_optimizer = 1;
    reply.n_nodes = n_nodes;
    reply.n_alloc_deps = n_alloc_deps;
    return reply;
}

std::vector<uint8_t> tail_of(const std::vector<int32_t> &values) {
    std::vector<uint8_t> tail;
    for (int32_t value : values) append_pod(tail, value);
    return tail;
}

TEST(NodeOrder, APermutationWithDependenciesIsRead) {
    const std::vector<uint8_t> tail = tail_of({2, 0, 1, /* deps */ 4, 1});
    NodeOrder order;
    ASSERT_TRUE(parse_node_order(reply_of(3, 1), ByteView(tail), 3, 5, &order).ok());
    EXPECT_THAT(order.nodes, ElementsAre(2, 0, 1));
    ASSERT_EQ(order.alloc_deps.size(), 1u);
    EXPECT_EQ(order.alloc_deps[0].first, 4);
    EXPECT_EQ(order.alloc_deps[0].second, 1);
}

TEST(NodeOrder, ANodeTwiceOrOutOfRangeIsRefused) {
    NodeOrder order;
    for (const std::vector<int32_t> &nodes : {std::vector<int32_t>{0, 0, 1}, {0, 1, 3}, {0, -1, 2}}) {
        const std::vector<uint8_t> tail = tail_of(nodes);
        EXPECT_EQ(parse_node_order(reply_of(3, 0), ByteView(tail), 3, 3, &order).code(), Code::bad_request);
    }
    EXPECT_TRUE(order.nodes.empty()) << "nothing of a refused answer is kept";
}

TEST(NodeOrder, ACountOrSizeThatDisagreesIsRefused) {
    NodeOrder order;
    const std::vector<uint8_t> tail = tail_of({1, 0});
    EXPECT_EQ(parse_node_order(reply_of(2, 0), ByteView(tail), 3, 3, &order).code(), Code::bad_request);
    EXPECT_EQ(parse_node_order(reply_of(2, 1), ByteView(tail), 2, 3, &order).code(), Code::bad_request);
    EXPECT_EQ(parse_node_order(reply_of(1, 0), ByteView(tail), 1, 3, &order).code(), Code::bad_request);
}

TEST(NodeOrder, ADependencyOnATensorNotSentIsRefused) {
    NodeOrder order;
    for (const std::vector<int32_t> &values : {std::vector<int32_t>{0, 1, 5, 0}, {0, 1, 0, -2}}) {
        const std::vector<uint8_t> tail = tail_of(values);
        EXPECT_EQ(parse_node_order(reply_of(2, 1), ByteView(tail), 2, 5, &order).code(), Code::bad_request);
    }
}

TEST(NodeOrder, ApplyingItReordersTheGraphsNodes) {
    GgmlContext ctx = metadata_context();
    ggml_tensor *x = ggml_new_tensor_1d(ctx.get(), GGML_TYPE_F32, 4);
    ggml_tensor *a = ggml_add(ctx.get(), x, x), *b = ggml_mul(ctx.get(), x, x), *c = ggml_sqr(ctx.get(), x);
    ggml_cgraph *graph = ggml_new_graph(ctx.get());
    for (ggml_tensor *node : {a, b, c}) ggml_build_forward_expand(graph, node);
    NodeOrder order;
    order.nodes = {2, 0, 1};
    apply_node_order(graph, order);
    EXPECT_EQ(ggml_graph_node(graph, 0), c);
    EXPECT_EQ(ggml_graph_node(graph, 1), a);
    EXPECT_EQ(ggml_graph_node(graph, 2), b);
}

TEST(NodeOrderCache, RemembersByEncodingAndStartsOverWhenFull) {
    NodeOrderCache cache;
    NodeOrder order;
    order.nodes = {1, 0};
    cache.remember("graph", order);
    ASSERT_NE(cache.find("graph"), nullptr);
    EXPECT_THAT(cache.find("graph")->nodes, ElementsAre(1, 0));
    EXPECT_EQ(cache.find("other"), nullptr);
    for (int i = 0; i < 100; ++i) cache.remember("shape " + std::to_string(i), order);
    EXPECT_EQ(cache.find("graph"), nullptr) << "bounded: the oldest answers went";
}

}  // namespace
}  // namespace ggml_remote::guest
