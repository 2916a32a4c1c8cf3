// Tensor lists on the wire: what the encoder writes, what the decoder accepts, and
// how many bytes a tensor's data may touch.
#include "protocol/tensor_codec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "ggml_test_support.h"

namespace ggml_remote::protocol {
namespace {

using test_support::edit_wire_tensor;
using test_support::GgmlContext;
using test_support::metadata_context;
using test_support::PlacementArena;
using test_support::set_list_header;
using test_support::wire_tensor_at;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr uint64_t kBuffer = 1;

Status decode(const std::vector<uint8_t> &bytes, TensorList *list, TensorListLimits limits = {}) {
    return decode_tensor_list(ByteView(bytes), limits, list);
}

Status decode(const std::vector<uint8_t> &bytes) {
    TensorList list;
    return decode(bytes, &list);
}

void set_node_index(std::vector<uint8_t> &bytes, size_t node, int32_t value) {
    TensorListHeader header;
    std::memcpy(&header, bytes.data(), sizeof(header));
    std::memcpy(bytes.data() + sizeof(header) + header.n_tensors * sizeof(WireTensor) + node * sizeof(int32_t), &value,
                sizeof(value));
}

std::string wire_name(const WireTensor &tensor) {
    return std::string(tensor.name, strnlen(tensor.name, sizeof(tensor.name)));
}

// Copies of a wire tensor's packed arrays, for matchers (packed fields cannot bind to references).
std::vector<int64_t> ne_of(const WireTensor &t) {
    std::vector<int64_t> values(GGML_MAX_DIMS);
    std::memcpy(values.data(), t.ne, sizeof(t.ne));
    return values;
}
std::vector<uint64_t> nb_of(const WireTensor &t) {
    std::vector<uint64_t> values(GGML_MAX_DIMS);
    std::memcpy(values.data(), t.nb, sizeof(t.nb));
    return values;
}
std::vector<int32_t> src_of(const WireTensor &t) {
    std::vector<int32_t> values(GGML_MAX_SRC);
    std::memcpy(values.data(), t.src, sizeof(t.src));
    return values;
}

// out = mul_mat(a, b) + c, with a, b, c and both results placed in buffer 1.
class MatmulAddGraph : public ::testing::Test {
  protected:
    void SetUp() override {
        a = ggml_new_tensor_2d(ctx.get(), GGML_TYPE_F32, 4, 3);  // 48 bytes
        b = ggml_new_tensor_2d(ctx.get(), GGML_TYPE_F32, 4, 2);  // 32 bytes
        c = ggml_new_tensor_2d(ctx.get(), GGML_TYPE_F32, 3, 2);  // 24 bytes
        ggml_set_name(a, "a");
        ggml_set_name(b, "b");
        ggml_set_name(c, "c");
        product = ggml_mul_mat(ctx.get(), a, b);  // 3 x 2
        ggml_set_name(product, "product");
        out = ggml_add(ctx.get(), product, c);
        ggml_set_name(out, "out");
        arena.place(a, 0);
        arena.place(b, 64);
        arena.place(c, 128);
        arena.place(product, 192);
        arena.place(out, 256);
    }

    std::vector<uint8_t> encode_graph(TensorListEncoder::Locator locator) {
        TensorListEncoder encoder(std::move(locator));
        encoder.add_node(product);
        encoder.add_node(out);
        EXPECT_FALSE(encoder.failed()) << encoder.error();
        return encoder.finish();
    }

    GgmlContext ctx = metadata_context();
    PlacementArena arena{kBuffer, 512};
    ggml_tensor *a = nullptr, *b = nullptr, *c = nullptr, *product = nullptr, *out = nullptr;
};

TEST_F(MatmulAddGraph, ListsSourcesBeforeTheirUsers) {
    TensorList list;
    ASSERT_TRUE(decode(encode_graph(arena.locator()), &list).ok());
    ASSERT_EQ(list.tensors.size(), 5u);
    EXPECT_EQ(wire_name(list.tensors[0]), "a");
    EXPECT_EQ(wire_name(list.tensors[1]), "b");
    EXPECT_EQ(wire_name(list.tensors[2]), "product");
    EXPECT_EQ(wire_name(list.tensors[3]), "c");
    EXPECT_EQ(wire_name(list.tensors[4]), "out");
}

TEST_F(MatmulAddGraph, SourcesAreIndexesIntoTheList) {
    TensorList list;
    ASSERT_TRUE(decode(encode_graph(arena.locator()), &list).ok());
    ASSERT_EQ(list.tensors.size(), 5u);
    EXPECT_THAT(src_of(list.tensors[0]), ::testing::Each(-1));
    EXPECT_EQ(list.tensors[2].src[0], 0);
    EXPECT_EQ(list.tensors[2].src[1], 1);
    EXPECT_EQ(list.tensors[2].src[2], -1);
    EXPECT_EQ(list.tensors[4].src[0], 2);
    EXPECT_EQ(list.tensors[4].src[1], 3);
    for (const WireTensor &tensor : list.tensors) EXPECT_EQ(tensor.view_src, -1);
}

TEST_F(MatmulAddGraph, NodesAreListedInCallOrder) {
    TensorList list;
    ASSERT_TRUE(decode(encode_graph(arena.locator()), &list).ok());
    EXPECT_THAT(list.nodes, ElementsAre(2, 4));
}

TEST_F(MatmulAddGraph, OpsTypesAndShapesSurviveTheRoundTrip) {
    TensorList list;
    ASSERT_TRUE(decode(encode_graph(arena.locator()), &list).ok());
    ASSERT_EQ(list.tensors.size(), 5u);
    EXPECT_EQ(list.tensors[0].op, GGML_OP_NONE);
    EXPECT_EQ(list.tensors[2].op, GGML_OP_MUL_MAT);
    EXPECT_EQ(list.tensors[4].op, GGML_OP_ADD);
    const ggml_tensor *originals[] = {a, b, product, c, out};
    for (size_t i = 0; i < 5; ++i) {
        EXPECT_EQ(list.tensors[i].type, GGML_TYPE_F32) << i;
        for (int d = 0; d < GGML_MAX_DIMS; ++d) {
            EXPECT_EQ(list.tensors[i].ne[d], originals[i]->ne[d]) << i << " ne[" << d << "]";
            EXPECT_EQ(list.tensors[i].nb[d], originals[i]->nb[d]) << i << " nb[" << d << "]";
        }
    }
    EXPECT_EQ(list.tensors[2].ne[0], 3);
    EXPECT_EQ(list.tensors[2].ne[1], 2);
}

TEST_F(MatmulAddGraph, LocatorSetsBufferHandleAndOffsets) {
    TensorList list;
    ASSERT_TRUE(decode(encode_graph(arena.locator()), &list).ok());
    ASSERT_EQ(list.tensors.size(), 5u);
    const uint64_t offsets[] = {0, 64, 192, 128, 256};
    for (size_t i = 0; i < 5; ++i) {
        EXPECT_EQ(list.tensors[i].buffer, kBuffer) << i;
        EXPECT_EQ(list.tensors[i].data_offset, offsets[i]) << i;
    }
}

TEST_F(MatmulAddGraph, TensorWithoutDataHasNoBufferEvenWithALocator) {
    out->data = nullptr;
    TensorList list;
    ASSERT_TRUE(decode(encode_graph(arena.locator()), &list).ok());
    EXPECT_EQ(list.tensors[4].buffer, 0u);
    EXPECT_EQ(list.tensors[4].data_offset, 0u);
    EXPECT_EQ(list.tensors[0].buffer, kBuffer);
}

TEST_F(MatmulAddGraph, TensorOutsideEveryRemoteBufferFailsTheEncoding) {
    float elsewhere[6] = {};
    c->data = elsewhere;
    TensorListEncoder encoder(arena.locator());
    encoder.add_node(out);
    EXPECT_TRUE(encoder.failed());
    EXPECT_THAT(encoder.error(), HasSubstr("'c'"));
    EXPECT_THAT(encoder.error(), HasSubstr("not in a buffer of this remote device"));
}

TEST_F(MatmulAddGraph, SignatureLeavesOutNamesAndData) {
    TensorList list;
    ASSERT_TRUE(decode(encode_graph(TensorListEncoder::Locator()), &list).ok());
    ASSERT_EQ(list.tensors.size(), 5u);
    for (const WireTensor &tensor : list.tensors) {
        EXPECT_EQ(wire_name(tensor), "");
        EXPECT_EQ(tensor.buffer, 0u);
        EXPECT_EQ(tensor.data_offset, 0u);
    }
    EXPECT_EQ(list.tensors[2].src[0], 0);
    EXPECT_THAT(list.nodes, ElementsAre(2, 4));
}

TEST_F(MatmulAddGraph, AddingATensorTwiceReturnsItsFirstIndex) {
    TensorListEncoder encoder(arena.locator());
    EXPECT_EQ(encoder.add(out), 4);
    EXPECT_EQ(encoder.add(product), 2);
    EXPECT_EQ(encoder.add(a), 0);
    EXPECT_EQ(encoder.add(nullptr), -1);
    TensorList list;
    ASSERT_TRUE(decode(encoder.finish(), &list).ok());
    EXPECT_EQ(list.tensors.size(), 5u);
    EXPECT_TRUE(list.nodes.empty());
}

TEST(TensorListEncoder, TensorReachedTwiceIsListedOnce) {
    GgmlContext ctx = metadata_context();
    ggml_tensor *a = ggml_new_tensor_1d(ctx.get(), GGML_TYPE_F32, 8);
    ggml_tensor *square = ggml_mul(ctx.get(), a, a);
    ggml_tensor *sum = ggml_add(ctx.get(), square, a);
    TensorListEncoder encoder{TensorListEncoder::Locator()};
    encoder.add_node(sum);
    TensorList list;
    ASSERT_TRUE(decode(encoder.finish(), &list).ok());
    ASSERT_EQ(list.tensors.size(), 3u);
    EXPECT_EQ(list.tensors[1].src[0], 0);
    EXPECT_EQ(list.tensors[1].src[1], 0);
    EXPECT_EQ(list.tensors[2].src[0], 1);
    EXPECT_EQ(list.tensors[2].src[1], 0);
}

TEST(TensorListEncoder, ViewRefersToItsSourceByIndexAndOffset) {
    GgmlContext ctx = metadata_context();
    PlacementArena arena(kBuffer, 256);
    ggml_tensor *base = ggml_new_tensor_2d(ctx.get(), GGML_TYPE_F32, 8, 4);
    arena.place(base, 32);
    // Rows 1..2 of the first 4 columns: a strided view starting one row in.
    ggml_tensor *view = ggml_view_2d(ctx.get(), base, 4, 2, base->nb[1], base->nb[1]);
    TensorListEncoder encoder(arena.locator());
    encoder.add_node(view);
    TensorList list;
    ASSERT_TRUE(decode(encoder.finish(), &list).ok());
    ASSERT_EQ(list.tensors.size(), 2u);
    const WireTensor &wire_view = list.tensors[1];
    EXPECT_EQ(wire_view.op, GGML_OP_VIEW);
    EXPECT_EQ(wire_view.view_src, 0);
    EXPECT_EQ(wire_view.src[0], 0);
    EXPECT_EQ(wire_view.view_offs, 32u);
    EXPECT_EQ(wire_view.data_offset, 32u + 32u);
    EXPECT_EQ(wire_view.ne[0], 4);
    EXPECT_EQ(wire_view.ne[1], 2);
    EXPECT_EQ(wire_view.nb[0], 4u);
    EXPECT_EQ(wire_view.nb[1], 32u);
}

// A buffer's init_tensor names the tensor alone: with a GPU host, ggml inits every
// node it places, and a node's sources may lie in the guest's own memory (the
// token table of llama.cpp's input layer, say), which the host cannot reach.
TEST(TensorListEncoder, StorageLeavesOutTheOpAndSourcesInGuestMemory) {
    GgmlContext ctx = metadata_context();
    PlacementArena arena(kBuffer, 256);
    std::vector<float> guest_table(64);
    ggml_tensor *table = ggml_new_tensor_2d(ctx.get(), GGML_TYPE_F32, 8, 8);
    table->data = guest_table.data();
    ggml_tensor *ids = ggml_new_tensor_1d(ctx.get(), GGML_TYPE_I32, 2);
    arena.place(ids, 0);
    ggml_tensor *rows = ggml_get_rows(ctx.get(), table, ids);
    arena.place(rows, 64);

    TensorListEncoder whole_graph(arena.locator());
    whole_graph.add(rows);
    EXPECT_TRUE(whole_graph.failed());

    TensorListEncoder encoder(arena.locator());
    EXPECT_EQ(encoder.add_storage(rows), 0);
    ASSERT_FALSE(encoder.failed()) << encoder.error();
    TensorList list;
    ASSERT_TRUE(decode(encoder.finish(), &list).ok());
    ASSERT_EQ(list.tensors.size(), 1u);
    const WireTensor &wire = list.tensors[0];
    EXPECT_EQ(wire.op, GGML_OP_NONE);
    EXPECT_EQ(wire.src[0], -1);
    EXPECT_EQ(wire.src[1], -1);
    EXPECT_EQ(wire.buffer, kBuffer);
    EXPECT_EQ(wire.data_offset, 64u);
}

TEST(TensorListEncoder, StorageOfAViewListsTheTensorItLiesInFirst) {
    GgmlContext ctx = metadata_context();
    PlacementArena arena(kBuffer, 256);
    ggml_tensor *base = ggml_new_tensor_2d(ctx.get(), GGML_TYPE_F32, 8, 4);
    arena.place(base, 32);
    ggml_tensor *row = ggml_view_1d(ctx.get(), base, 8, base->nb[1]);
    ggml_tensor *part = ggml_view_1d(ctx.get(), row, 4, 16);
    TensorListEncoder encoder(arena.locator());
    EXPECT_EQ(encoder.add_storage(part), 1);
    TensorList list;
    ASSERT_TRUE(decode(encoder.finish(), &list).ok());
    // ggml points a view of a view at the tensor that owns the bytes.
    ASSERT_EQ(list.tensors.size(), 2u);
    EXPECT_EQ(list.tensors[0].view_src, -1);
    EXPECT_EQ(list.tensors[1].view_src, 0);
    EXPECT_EQ(list.tensors[1].op, GGML_OP_NONE);
    EXPECT_EQ(list.tensors[1].src[0], -1);
    EXPECT_EQ(list.tensors[1].data_offset, 32u + 32u + 16u);
}

TEST(TensorListEncoder, PermuteKeepsSwappedStridesAndAxes) {
    GgmlContext ctx = metadata_context();
    ggml_tensor *base = ggml_new_tensor_3d(ctx.get(), GGML_TYPE_F32, 2, 3, 5);
    ggml_tensor *permuted = ggml_permute(ctx.get(), base, 1, 0, 2, 3);
    TensorListEncoder encoder{TensorListEncoder::Locator()};
    encoder.add_node(permuted);
    TensorList list;
    ASSERT_TRUE(decode(encoder.finish(), &list).ok());
    ASSERT_EQ(list.tensors.size(), 2u);
    const WireTensor &wire = list.tensors[1];
    EXPECT_EQ(wire.op, GGML_OP_PERMUTE);
    EXPECT_EQ(wire.view_src, 0);
    EXPECT_THAT(ne_of(wire), ElementsAre(3, 2, 5, 1));
    EXPECT_THAT(nb_of(wire), ElementsAre(8u, 4u, 24u, 120u));
    EXPECT_EQ(wire.op_params[0], 1);
    EXPECT_EQ(wire.op_params[1], 0);
    EXPECT_EQ(wire.op_params[2], 2);
    EXPECT_EQ(wire.op_params[3], 3);
}

TEST(TensorListEncoder, OpParamsAndFlagsArePreserved) {
    GgmlContext ctx = metadata_context();
    ggml_tensor *input = ggml_new_tensor_1d(ctx.get(), GGML_TYPE_F32, 8);
    ggml_set_input(input);
    ggml_tensor *scaled = ggml_scale(ctx.get(), input, 2.5f);
    ggml_set_output(scaled);
    TensorListEncoder encoder{TensorListEncoder::Locator()};
    encoder.add_node(scaled);
    TensorList list;
    ASSERT_TRUE(decode(encoder.finish(), &list).ok());
    ASSERT_EQ(list.tensors.size(), 2u);
    float scale = 0;
    std::memcpy(&scale, list.tensors[1].op_params, sizeof(scale));
    EXPECT_EQ(scale, 2.5f);
    EXPECT_EQ(list.tensors[1].op, GGML_OP_SCALE);
    EXPECT_EQ(list.tensors[0].flags, GGML_TENSOR_FLAG_INPUT);
    EXPECT_EQ(list.tensors[1].flags, GGML_TENSOR_FLAG_OUTPUT);
}

TEST(TensorListEncoder, NamesAreTerminatedAndLimitedToTheWireField) {
    GgmlContext ctx = metadata_context();
    PlacementArena arena(kBuffer, 64);
    ggml_tensor *tensor = ggml_new_tensor_1d(ctx.get(), GGML_TYPE_F32, 4);
    ggml_set_name(tensor, std::string(GGML_MAX_NAME + 10, 'n').c_str());
    TensorListEncoder encoder(arena.locator());
    encoder.add(tensor);
    const WireTensor wire = wire_tensor_at(encoder.finish(), 0);
    EXPECT_EQ(wire_name(wire), std::string(GGML_MAX_NAME - 1, 'n'));
}

// Signatures: the encoding without a locator, used to cache answers to op queries.
std::vector<uint8_t> signature_of_add(int64_t n, ggml_type type, const char *name, bool place_data) {
    GgmlContext ctx = metadata_context();
    ggml_tensor *x = ggml_new_tensor_2d(ctx.get(), type, n, 2);
    ggml_tensor *y = ggml_new_tensor_2d(ctx.get(), type, n, 2);
    ggml_set_name(x, name);
    std::vector<uint8_t> storage(1024);
    if (place_data) x->data = storage.data();
    ggml_tensor *sum = ggml_add(ctx.get(), x, y);
    ggml_set_name(sum, name);
    TensorListEncoder encoder{TensorListEncoder::Locator()};
    encoder.add(sum);
    return encoder.finish();
}

TEST(TensorListSignature, SameOpShapesGiveIdenticalBytes) {
    EXPECT_EQ(signature_of_add(16, GGML_TYPE_F32, "first", false), signature_of_add(16, GGML_TYPE_F32, "other", true));
}

TEST(TensorListSignature, DifferentShapeOrTypeGivesDifferentBytes) {
    const std::vector<uint8_t> reference = signature_of_add(16, GGML_TYPE_F32, "x", false);
    EXPECT_NE(reference, signature_of_add(32, GGML_TYPE_F32, "x", false));
    EXPECT_NE(reference, signature_of_add(16, GGML_TYPE_F16, "x", false));
}

TEST(TensorListSignature, DifferentOpParamsGiveDifferentBytes) {
    auto signature_of_scale = [](float factor) {
        GgmlContext ctx = metadata_context();
        ggml_tensor *x = ggml_new_tensor_1d(ctx.get(), GGML_TYPE_F32, 8);
        TensorListEncoder encoder{TensorListEncoder::Locator()};
        encoder.add(ggml_scale(ctx.get(), x, factor));
        return encoder.finish();
    };
    EXPECT_EQ(signature_of_scale(2.0f), signature_of_scale(2.0f));
    EXPECT_NE(signature_of_scale(2.0f), signature_of_scale(3.0f));
}

// The decoder's refusals. Each starts from a valid list and breaks one thing.
class TensorListDecoding : public ::testing::Test {
  protected:
    void SetUp() override {
        ggml_tensor *x = ggml_new_tensor_2d(ctx.get(), GGML_TYPE_F32, 4, 2);
        ggml_tensor *y = ggml_new_tensor_2d(ctx.get(), GGML_TYPE_F32, 4, 2);
        ggml_set_name(x, "x");
        ggml_set_name(y, "y");
        arena.place(x, 0);
        arena.place(y, 32);
        ggml_tensor *sum = ggml_add(ctx.get(), x, y);
        ggml_set_name(sum, "sum");
        arena.place(sum, 64);
        TensorListEncoder encoder(arena.locator());
        encoder.add_node(sum);
        bytes = encoder.finish();
        ASSERT_TRUE(decode(bytes).ok());
    }

    void expect_refused(const char *why) {
        TensorList list;
        Status status = decode(bytes, &list);
        EXPECT_EQ(status.code(), Code::bad_request) << "accepted a list with " << why;
    }

    GgmlContext ctx = metadata_context();
    PlacementArena arena{kBuffer, 128};
    std::vector<uint8_t> bytes;  // x (0), y (1), sum (2) = x + y; node: 2
};

TEST_F(TensorListDecoding, ValidListDecodesToItsTensorsAndNodes) {
    TensorList list;
    ASSERT_TRUE(decode(bytes, &list).ok());
    EXPECT_EQ(list.tensors.size(), 3u);
    EXPECT_THAT(list.nodes, ElementsAre(2));
}

TEST(TensorListDecodingEdges, EmptyListIsValid) {
    TensorListEncoder encoder{TensorListEncoder::Locator()};
    TensorList list;
    EXPECT_TRUE(decode(encoder.finish(), &list).ok());
    EXPECT_TRUE(list.tensors.empty());
    EXPECT_TRUE(list.nodes.empty());
}

TEST(TensorListDecodingEdges, TruncatedHeaderIsRefused) {
    const std::vector<uint8_t> bytes = {3, 0, 0};
    Status status = decode(bytes);
    EXPECT_EQ(status.code(), Code::bad_request);
    EXPECT_THAT(status.message(), HasSubstr("truncated"));
    EXPECT_EQ(decode(std::vector<uint8_t>()).code(), Code::bad_request);
}

TEST_F(TensorListDecoding, TruncatedBodyIsRefused) {
    bytes.pop_back();
    expect_refused("its last byte missing");
}

TEST_F(TensorListDecoding, TrailingBytesAreRefused) {
    bytes.push_back(0);
    Status status = decode(bytes);
    EXPECT_EQ(status.code(), Code::bad_request);
    EXPECT_THAT(status.message(), HasSubstr("expected"));
}

TEST_F(TensorListDecoding, HeaderCountsThatDisagreeWithTheSizeAreRefused) {
    set_list_header(bytes, 2, 1);
    expect_refused("one tensor fewer in the header than in the body");
    set_list_header(bytes, 3, 2);
    expect_refused("one node more in the header than in the body");
}

TEST_F(TensorListDecoding, HugeCountsAreRefusedBeforeAnyAllocation) {
    set_list_header(bytes, UINT32_MAX, UINT32_MAX);
    expect_refused("4 billion tensors claimed in a short message");
}

TEST_F(TensorListDecoding, TensorCountOverTheLimitIsRefused) {
    TensorListLimits limits;
    limits.max_tensors = 2;
    TensorList list;
    Status status = decode(bytes, &list, limits);
    EXPECT_EQ(status.code(), Code::bad_request);
    EXPECT_THAT(status.message(), HasSubstr("3 tensors exceed the limit of 2"));
    limits.max_tensors = 3;
    EXPECT_TRUE(decode(bytes, &list, limits).ok());
}

TEST_F(TensorListDecoding, NodeCountOverTheLimitIsRefused) {
    TensorListLimits limits;
    limits.max_nodes = 0;
    TensorList list;
    EXPECT_EQ(decode(bytes, &list, limits).code(), Code::bad_request);
}

TEST_F(TensorListDecoding, TypeOutOfRangeIsRefused) {
    edit_wire_tensor(bytes, 1, [](WireTensor &t) { t.type = 999; });
    Status status = decode(bytes);
    EXPECT_EQ(status.code(), Code::bad_request);
    EXPECT_THAT(status.message(), HasSubstr("invalid type 999"));
    EXPECT_THAT(status.message(), HasSubstr("'y'"));

    edit_wire_tensor(bytes, 1, [](WireTensor &t) { t.type = GGML_TYPE_COUNT; });
    expect_refused("type GGML_TYPE_COUNT");
    edit_wire_tensor(bytes, 1, [](WireTensor &t) { t.type = -1; });
    expect_refused("type -1");
}

TEST_F(TensorListDecoding, AGuestsTensorNameIsEscapedInTheRefusal) {
    // The message can reach the server log: a newline in the name must not start a line.
    edit_wire_tensor(bytes, 1, [](WireTensor &t) {
        std::snprintf(t.name, sizeof(t.name), "y\n2026-12-01 ggml-remote-server: forged\x1b[2K");
        t.type = 999;
    });
    Status status = decode(bytes);
    EXPECT_EQ(status.code(), Code::bad_request);
    EXPECT_EQ(status.message().find_first_of("\n\x1b"), std::string::npos) << status.message();
    EXPECT_THAT(status.message(), HasSubstr("'y\\x0a2026-12-01 ggml-remote-server: forged\\x1b[2K'"));
}

TEST_F(TensorListDecoding, RemovedTypeIsRefused) {
    int removed = -1;
    for (int type = 0; type < GGML_TYPE_COUNT && removed < 0; ++type) {
        if (ggml_blck_size(static_cast<ggml_type>(type)) == 0) removed = type;
    }
    ASSERT_GE(removed, 0) << "this ggml has no removed type ids below GGML_TYPE_COUNT";
    edit_wire_tensor(bytes, 0, [removed](WireTensor &t) { t.type = removed; });
    Status status = decode(bytes);
    EXPECT_EQ(status.code(), Code::bad_request);
    EXPECT_THAT(status.message(), HasSubstr("invalid type " + std::to_string(removed)));
}

TEST_F(TensorListDecoding, OpOutOfRangeIsRefused) {
    edit_wire_tensor(bytes, 2, [](WireTensor &t) { t.op = GGML_OP_COUNT; });
    Status status = decode(bytes);
    EXPECT_EQ(status.code(), Code::bad_request);
    EXPECT_THAT(status.message(), HasSubstr("invalid op"));
    edit_wire_tensor(bytes, 2, [](WireTensor &t) { t.op = -3; });
    expect_refused("op -3");
}

TEST_F(TensorListDecoding, OpsThatCarryFunctionPointersAreRefused) {
    for (int op : {GGML_OP_CUSTOM, GGML_OP_MAP_CUSTOM1, GGML_OP_MAP_CUSTOM2, GGML_OP_MAP_CUSTOM3}) {
        std::vector<uint8_t> edited = bytes;
        edit_wire_tensor(edited, 2, [op](WireTensor &t) { t.op = op; });
        TensorList list;
        Status status = decode(edited, &list);
        EXPECT_EQ(status.code(), Code::bad_request) << ggml_op_name(static_cast<ggml_op>(op));
        EXPECT_THAT(status.message(), HasSubstr("function pointers"));
    }
}

TEST_F(TensorListDecoding, NegativeExtentIsRefused) {
    edit_wire_tensor(bytes, 0, [](WireTensor &t) { t.ne[2] = -1; });
    Status status = decode(bytes);
    EXPECT_EQ(status.code(), Code::bad_request);
    EXPECT_THAT(status.message(), HasSubstr("negative ne[2]"));
}

// Found by the dispatcher fuzzer: ggml_new_tensor aborts the worker on such a shape.
TEST_F(TensorListDecoding, ElementCountThatOverflowsIsRefused) {
    edit_wire_tensor(bytes, 0, [](WireTensor &t) {
        t.type = GGML_TYPE_I8;
        t.ne[0] = int64_t(1) << 32;
        t.ne[1] = int64_t(1) << 31;
        t.ne[2] = t.ne[3] = 1;
        t.nb[0] = t.nb[1] = t.nb[2] = t.nb[3] = 0;  // zero strides: fits any buffer
    });
    Status status = decode(bytes);
    EXPECT_EQ(status.code(), Code::bad_request);
    EXPECT_THAT(status.message(), HasSubstr("element count overflows"));
}

TEST_F(TensorListDecoding, ElementCountThatOverflowsIsRefusedEvenWithAZeroExtent) {
    edit_wire_tensor(bytes, 0, [](WireTensor &t) {
        t.type = GGML_TYPE_I8;
        t.ne[0] = int64_t(1) << 62;
        t.ne[1] = 0;
        t.ne[2] = int64_t(1) << 56;
        t.ne[3] = 0;
        t.nb[0] = t.nb[1] = t.nb[2] = t.nb[3] = 0;
    });
    Status status = decode(bytes);
    EXPECT_EQ(status.code(), Code::bad_request);
    EXPECT_THAT(status.message(), HasSubstr("element count overflows"));
}

TEST_F(TensorListDecoding, ElementCountJustBelowTheOverflowIsAcceptedAsGgmlAcceptsIt) {
    edit_wire_tensor(bytes, 0, [](WireTensor &t) {
        t.type = GGML_TYPE_I8;
        t.ne[0] = t.ne[1] = int64_t(1) << 31;
        t.ne[2] = t.ne[3] = 1;
        t.nb[0] = t.nb[1] = t.nb[2] = t.nb[3] = 0;
    });
    EXPECT_TRUE(decode(bytes).ok());
}

TEST_F(TensorListDecoding, RowLengthThatIsNotAWholeNumberOfBlocksIsRefused) {
    edit_wire_tensor(bytes, 0, [](WireTensor &t) {
        t.type = GGML_TYPE_Q8_0;
        t.ne[0] = 33;
        t.ne[1] = 1;
        t.nb[0] = ggml_type_size(GGML_TYPE_Q8_0);
        t.nb[1] = t.nb[2] = t.nb[3] = 2 * t.nb[0];
    });
    Status status = decode(bytes);
    EXPECT_EQ(status.code(), Code::bad_request);
    EXPECT_THAT(status.message(), HasSubstr("ne[0]=33 is not a multiple of the q8_0 block size 32"));
}

TEST_F(TensorListDecoding, WholeBlocksOfAQuantizedTypeAreAccepted) {
    edit_wire_tensor(bytes, 0, [](WireTensor &t) {
        t.type = GGML_TYPE_Q8_0;
        t.ne[0] = 64;
        t.ne[1] = 1;
        t.nb[0] = ggml_type_size(GGML_TYPE_Q8_0);
        t.nb[1] = t.nb[2] = t.nb[3] = 2 * t.nb[0];
    });
    EXPECT_TRUE(decode(bytes).ok());
}

TEST_F(TensorListDecoding, SourceIndexPointingForwardIsRefused) {
    edit_wire_tensor(bytes, 1, [](WireTensor &t) { t.src[0] = 2; });
    Status status = decode(bytes);
    EXPECT_EQ(status.code(), Code::bad_request);
    EXPECT_THAT(status.message(), HasSubstr("does not name an earlier tensor"));
}

TEST_F(TensorListDecoding, SourceIndexPointingAtItselfIsRefused) {
    edit_wire_tensor(bytes, 2, [](WireTensor &t) { t.src[1] = 2; });
    expect_refused("a tensor that is its own source");
}

TEST_F(TensorListDecoding, SourceIndexBelowTheSelfMarkerIsRefused) {
    edit_wire_tensor(bytes, 2, [](WireTensor &t) { t.src[GGML_MAX_SRC - 1] = kSelf - 1; });
    expect_refused("src index -3");
}

TEST_F(TensorListDecoding, ViewSourcePointingForwardOrAtItselfIsRefused) {
    edit_wire_tensor(bytes, 0, [](WireTensor &t) { t.view_src = 1; });
    expect_refused("a view of a later tensor");
    edit_wire_tensor(bytes, 0, [](WireTensor &t) { t.view_src = 0; });
    expect_refused("a view of itself");
    edit_wire_tensor(bytes, 0, [](WireTensor &t) { t.view_src = -7; });
    expect_refused("view_src -7");
}

TEST_F(TensorListDecoding, NodeIndexOutOfRangeIsRefused) {
    set_node_index(bytes, 0, 3);
    Status status = decode(bytes);
    EXPECT_EQ(status.code(), Code::bad_request);
    EXPECT_THAT(status.message(), HasSubstr("node 0 names tensor 3 of 3"));
    set_node_index(bytes, 0, -1);
    expect_refused("node index -1");
}

TEST_F(TensorListDecoding, DataOffsetWithoutBufferIsRefused) {
    edit_wire_tensor(bytes, 1, [](WireTensor &t) {
        t.buffer = 0;
        t.data_offset = 32;
    });
    Status status = decode(bytes);
    EXPECT_EQ(status.code(), Code::bad_request);
    EXPECT_THAT(status.message(), HasSubstr("data offset without a buffer"));
}

TEST_F(TensorListDecoding, ShapeWhoseByteSpanOverflowsIsRefused) {
    edit_wire_tensor(bytes, 0, [](WireTensor &t) {
        t.ne[1] = int64_t(1) << 40;
        t.nb[1] = uint64_t(1) << 40;
    });
    Status status = decode(bytes);
    EXPECT_EQ(status.code(), Code::bad_request);
    EXPECT_THAT(status.message(), HasSubstr("overflow"));
}

TEST_F(TensorListDecoding, UnterminatedNameIsCutToTheField) {
    edit_wire_tensor(bytes, 0, [](WireTensor &t) { std::memset(t.name, 'z', sizeof(t.name)); });
    TensorList list;
    ASSERT_TRUE(decode(bytes, &list).ok());
    EXPECT_EQ(list.tensors[0].name[GGML_MAX_NAME - 1], '\0');
    EXPECT_EQ(wire_name(list.tensors[0]), std::string(GGML_MAX_NAME - 1, 'z'));
}

// tensor_byte_span: how far past its data pointer an op may read or write.
WireTensor wire_of(const ggml_tensor *tensor) {
    TensorListEncoder encoder{TensorListEncoder::Locator()};
    const int32_t index = encoder.add(tensor);
    return wire_tensor_at(encoder.finish(), static_cast<size_t>(index));
}

TEST(TensorByteSpan, ContiguousTensorSpansItsNbytes) {
    GgmlContext ctx = metadata_context();
    ggml_tensor *tensor = ggml_new_tensor_4d(ctx.get(), GGML_TYPE_F32, 4, 3, 2, 2);
    uint64_t span = 0;
    ASSERT_TRUE(tensor_byte_span(wire_of(tensor), &span));
    EXPECT_EQ(span, 4u * 3 * 2 * 2 * sizeof(float));
    EXPECT_EQ(span, ggml_nbytes(tensor));
}

TEST(TensorByteSpan, PermutationThatKeepsTheRowAxisSpansTheSourceBytes) {
    GgmlContext ctx = metadata_context();
    ggml_tensor *base = ggml_new_tensor_3d(ctx.get(), GGML_TYPE_F32, 5, 3, 2);
    ggml_tensor *permuted = ggml_permute(ctx.get(), base, 0, 2, 1, 3);
    uint64_t span = 0;
    ASSERT_TRUE(tensor_byte_span(wire_of(permuted), &span));
    EXPECT_EQ(span, 5u * 3 * 2 * sizeof(float));
    EXPECT_EQ(span, ggml_nbytes(permuted));
}

TEST(TensorByteSpan, PermutationThatMovesTheRowAxisSpansTheSourceBytes) {
    GgmlContext ctx = metadata_context();
    ggml_tensor *base = ggml_new_tensor_3d(ctx.get(), GGML_TYPE_F32, 5, 3, 2);
    ggml_tensor *permuted = ggml_permute(ctx.get(), base, 2, 0, 1, 3);  // ne 3,2,5  nb 20,60,4
    uint64_t span = 0;
    ASSERT_TRUE(tensor_byte_span(wire_of(permuted), &span));
    EXPECT_EQ(span, 5u * 3 * 2 * sizeof(float));
    EXPECT_EQ(span, ggml_nbytes(permuted));
}

TEST(TensorByteSpan, StridedViewEndsAtItsLastElement) {
    GgmlContext ctx = metadata_context();
    ggml_tensor *base = ggml_new_tensor_2d(ctx.get(), GGML_TYPE_F32, 10, 4);
    // 3 elements of each of the 4 rows: the last row's third element ends at 3*40 + 12.
    ggml_tensor *view = ggml_view_2d(ctx.get(), base, 3, 4, base->nb[1], 0);
    uint64_t span = 0;
    ASSERT_TRUE(tensor_byte_span(wire_of(view), &span));
    EXPECT_EQ(span, 3u * 40 + 12);
}

TEST(TensorByteSpan, QuantizedTensorSpansWholeBlocks) {
    GgmlContext ctx = metadata_context();
    ggml_tensor *tensor = ggml_new_tensor_2d(ctx.get(), GGML_TYPE_Q8_0, 64, 3);
    uint64_t span = 0;
    ASSERT_TRUE(tensor_byte_span(wire_of(tensor), &span));
    EXPECT_EQ(span, 3u * 2 * ggml_type_size(GGML_TYPE_Q8_0));  // 3 rows of 2 blocks of 34 bytes
    EXPECT_EQ(span, ggml_nbytes(tensor));
}

TEST(TensorByteSpan, ZeroSizedDimensionSpansNothing) {
    GgmlContext ctx = metadata_context();
    ggml_tensor *tensor = ggml_new_tensor_3d(ctx.get(), GGML_TYPE_F32, 4, 0, 3);
    uint64_t span = 12345;
    ASSERT_TRUE(tensor_byte_span(wire_of(tensor), &span));
    EXPECT_EQ(span, 0u);
}

TEST(TensorByteSpan, OverflowingShapeReportsFalse) {
    GgmlContext ctx = metadata_context();
    WireTensor wire = wire_of(ggml_new_tensor_1d(ctx.get(), GGML_TYPE_F32, 4));
    uint64_t span = 0;
    wire.ne[1] = int64_t(1) << 40;
    wire.nb[1] = uint64_t(1) << 40;
    EXPECT_FALSE(tensor_byte_span(wire, &span));

    wire.ne[1] = 1;
    wire.nb[1] = 16;
    wire.ne[3] = 2;
    wire.nb[3] = std::numeric_limits<uint64_t>::max();
    EXPECT_FALSE(tensor_byte_span(wire, &span));

    wire.ne[3] = 1;
    wire.ne[0] = std::numeric_limits<int64_t>::max();
    wire.nb[0] = 8;
    EXPECT_FALSE(tensor_byte_span(wire, &span));
}

}  // namespace
}  // namespace ggml_remote::protocol

namespace ggml_remote::protocol {
namespace {

TEST(TensorListEncoder, CastWhoseDestinationIsItselfEncodesAsSelfReference) {
    ggml_init_params params{};
    params.mem_size = 16 * ggml_tensor_overhead();
    params.no_alloc = true;
    ggml_context *ctx = ggml_init(params);
    ggml_tensor *a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 8);
    ggml_tensor *cast = ggml_cast(ctx, a, GGML_TYPE_F16);
    ASSERT_EQ(cast->src[1], cast);  // what ggml_cast builds

    TensorListEncoder encoder(nullptr);
    encoder.add_node(cast);
    TensorList list;
    Status status = decode_tensor_list(ByteView(encoder.finish()), TensorListLimits{}, &list);
    ggml_free(ctx);
    ASSERT_TRUE(status.ok()) << status.message();
    ASSERT_EQ(list.tensors.size(), 2u);
    EXPECT_EQ(list.tensors[1].src[0], 0);
    EXPECT_EQ(list.tensors[1].src[1], kSelf);
}

}  // namespace
}  // namespace ggml_remote::protocol
