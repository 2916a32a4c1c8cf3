// The fuzzers' write-set oracle must be able to fail: a byte changed outside the
// graph's results is reported, one inside them is not.
#include "write_set_oracle.h"

#include <ggml-backend.h>
#include <ggml.h>
#include <gtest/gtest.h>

#include <cstring>

namespace ggml_remote::fuzz {
namespace {

class WriteSetOracleTest : public ::testing::Test {
  protected:
    void SetUp() override {
        if (ggml_backend_dev_count() == 0) ggml_backend_load_all();
        ggml_backend_dev_t cpu = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
        ASSERT_NE(cpu, nullptr);
        buffer = ggml_backend_buft_alloc_buffer(ggml_backend_dev_buffer_type(cpu), 4096);
        ggml_init_params params{16 * ggml_tensor_overhead() + ggml_graph_overhead(), nullptr, true};
        ctx = ggml_init(params);
        a = place(ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 8), 0);
        b = place(ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 8), 64);
        sum = place(ggml_add(ctx, a, b), 128);
        graph = ggml_new_graph(ctx);
        ggml_build_forward_expand(graph, sum);
    }
    void TearDown() override {
        ggml_free(ctx);
        ggml_backend_buffer_free(buffer);
    }
    ggml_tensor *place(ggml_tensor *t, size_t offset) {
        t->buffer = buffer;
        t->data = static_cast<char *>(ggml_backend_buffer_get_base(buffer)) + offset;
        return t;
    }
    char *base() { return static_cast<char *>(ggml_backend_buffer_get_base(buffer)); }

    ggml_backend_buffer_t buffer = nullptr;
    ggml_context *ctx = nullptr;
    ggml_tensor *a = nullptr, *b = nullptr, *sum = nullptr;
    ggml_cgraph *graph = nullptr;
    WriteSetOracle oracle;
};

TEST_F(WriteSetOracleTest, AWriteIntoTheResultIsAllowed) {
    oracle.before(graph);
    base()[128 + 31] ^= 0x5A;  // the last byte of `sum`
    EXPECT_EQ(oracle.after(graph), "");
}

TEST_F(WriteSetOracleTest, AWriteJustPastTheResultIsReported) {
    oracle.before(graph);
    base()[128 + 32] ^= 0x5A;
    EXPECT_NE(oracle.after(graph).find("byte 160"), std::string::npos) << oracle.after(graph);
}

TEST_F(WriteSetOracleTest, AWriteIntoASourceIsReported) {
    oracle.before(graph);
    base()[70] ^= 0x5A;  // inside b, which ADD only reads
    EXPECT_NE(oracle.after(graph), "");
}

}  // namespace
}  // namespace ggml_remote::fuzz
