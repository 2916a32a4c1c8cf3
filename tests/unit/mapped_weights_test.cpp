// The guest's memory-mapped weights: which memory is a read-only file mapping,
// which buffers are the CPU's mapped weights, and which ops a remote device may
// take over on them (only the token-embedding lookup, only from a read-only file).
#include "guest/mapped_weights.h"

#include <ggml-backend.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "ggml_test_support.h"
#include "guest/file_mapping.h"

namespace ggml_remote::guest {
namespace {

using test_support::metadata_context;

ggml_backend_dev_t cpu_device() {
    static std::once_flag loaded;
    std::call_once(loaded, [] {
        unsetenv("GGML_BACKEND_PATH");  // never the remote plugin itself
        ggml_backend_load_all();
    });
    return ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
}

// A scratch file of `pages` pages, mapped read-only or writable.
class MappedScratchFile {
  public:
    MappedScratchFile(size_t pages, bool writable) : size_(pages * static_cast<size_t>(::sysconf(_SC_PAGESIZE))) {
        char path[] = "/tmp/ggml-remote-mapped-XXXXXX";
        fd_ = ::mkstemp(path);
        path_ = path;
        std::vector<uint8_t> bytes(size_, 0x5a);
        EXPECT_EQ(::write(fd_, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
        data_ = ::mmap(nullptr, size_, writable ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED, fd_, 0);
        EXPECT_NE(data_, MAP_FAILED);
    }
    ~MappedScratchFile() {
        ::munmap(data_, size_);
        ::close(fd_);
        ::unlink(path_.c_str());
    }
    uint8_t *data() const { return static_cast<uint8_t *>(data_); }
    size_t size() const { return size_; }

  private:
    size_t size_;
    int fd_ = -1;
    std::string path_;
    void *data_ = nullptr;
};

TEST(FileMapping, FindsAReadOnlyMappingAndWhereInTheFile) {
    MappedScratchFile file(4, false);
    MappedFile found;
    ASSERT_TRUE(find_mapped_file(file.data() + 4096 + 100, 1000, &found));
    EXPECT_EQ(found.offset, 4096u + 100u);
    EXPECT_FALSE(found.writable);
    EXPECT_NE(found.inode, 0u);
    MappedFile again;
    ASSERT_TRUE(find_mapped_file(file.data() + 4096 + 100, 1000, &again));
    EXPECT_TRUE(found.same_file_at(again));
}

TEST(FileMapping, TellsAWritableMapping) {
    MappedScratchFile file(2, true);
    MappedFile found;
    ASSERT_TRUE(find_mapped_file(file.data(), file.size(), &found));
    EXPECT_TRUE(found.writable);
}

TEST(FileMapping, RefusesAnonymousMemoryAndRangesPastTheMapping) {
    std::vector<uint8_t> heap(1 << 20);
    MappedFile found;
    EXPECT_FALSE(find_mapped_file(heap.data(), heap.size(), &found));
    MappedScratchFile file(2, false);
    EXPECT_FALSE(find_mapped_file(file.data(), file.size() + 4096, &found));
}

// A weight tensor of 8 rows of 64 floats at the start of a CPU_Mapped buffer over
// `memory`, `buffer_share` times the tensor's size.
struct MappedWeight {
    test_support::GgmlContext context = metadata_context();
    ggml_backend_buffer_t buffer = nullptr;
    ggml_tensor *weight = nullptr;

    explicit MappedWeight(void *memory, size_t buffer_share = 1) {
        buffer = ggml_backend_dev_buffer_from_host_ptr(cpu_device(), memory, buffer_share * 8 * 64 * sizeof(float), 0);
        weight = ggml_new_tensor_2d(context.get(), GGML_TYPE_F32, 64, 8);
        weight->buffer = buffer;
        weight->data = memory;
    }
    ~MappedWeight() { ggml_backend_buffer_free(buffer); }
};

TEST(MappedWeights, RecognisesOnlyTheCpuMappedBufferType) {
    MappedScratchFile file(1, false);
    MappedWeight mapped(file.data());
    ASSERT_NE(mapped.buffer, nullptr);
    EXPECT_TRUE(MappedWeights::is_mapped_weights_type(ggml_backend_buffer_get_type(mapped.buffer)));
    EXPECT_FALSE(MappedWeights::is_mapped_weights_type(ggml_backend_dev_buffer_type(cpu_device())));
    EXPECT_FALSE(MappedWeights::is_mapped_weights_type(nullptr));
}

TEST(MappedWeights, TakesOnlyTheLookupFromAReadOnlyFile) {
    MappedScratchFile file(1, false);
    MappedWeight mapped(file.data());
    MappedWeights weights(nullptr);
    ggml_context *ctx = mapped.context.get();
    ggml_tensor *ids = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, 4);
    ggml_tensor *x = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 64, 4);

    EXPECT_EQ(weights.classify(ggml_get_rows(ctx, mapped.weight, ids)), MappedWeights::Use::allowed);
    // Any other use would have the device compute on the guest's memory, which the
    // scheduler would not copy now that the device says it reads the buffer type.
    EXPECT_EQ(weights.classify(ggml_mul_mat(ctx, mapped.weight, x)), MappedWeights::Use::refused);
    EXPECT_EQ(weights.classify(ggml_add(ctx, x, ggml_view_2d(ctx, mapped.weight, 64, 4, mapped.weight->nb[1], 0))),
              MappedWeights::Use::refused);
    // Views of the weights count as the weights.
    ggml_tensor *half = ggml_view_2d(ctx, mapped.weight, 64, 4, mapped.weight->nb[1], 4 * mapped.weight->nb[1]);
    EXPECT_EQ(weights.classify(ggml_get_rows(ctx, half, ids)), MappedWeights::Use::allowed);
    EXPECT_EQ(weights.classify(ggml_mul_mat(ctx, x, x)), MappedWeights::Use::none);
}

TEST(MappedWeights, LeavesTheLookupToAGuestCpuThatHoldsLayersToo) {
    // The buffer holds the table and as much again (a CPU layer): the rows would
    // only come back to the guest.
    MappedScratchFile file(1, false);
    MappedWeight mapped(file.data(), 2);
    MappedWeights weights(nullptr);
    ggml_tensor *ids = ggml_new_tensor_1d(mapped.context.get(), GGML_TYPE_I32, 4);
    EXPECT_EQ(weights.classify(ggml_get_rows(mapped.context.get(), mapped.weight, ids)), MappedWeights::Use::refused);
}

TEST(MappedWeights, RefusesTheLookupFromMemoryThatCanChange) {
    MappedScratchFile writable(1, true);
    alignas(64) static float heap[8 * 64];
    for (void *memory : {static_cast<void *>(writable.data()), static_cast<void *>(heap)}) {
        MappedWeight mapped(memory);
        MappedWeights weights(nullptr);
        ggml_tensor *ids = ggml_new_tensor_1d(mapped.context.get(), GGML_TYPE_I32, 4);
        EXPECT_EQ(weights.classify(ggml_get_rows(mapped.context.get(), mapped.weight, ids)),
                  MappedWeights::Use::refused);
    }
}

}  // namespace
}  // namespace ggml_remote::guest
