// ModelLibrary (--models DIR): published GGUF files, indexed by the digest a guest
// names its weights by; served to every tenant through the store's owner, never
// once a file changed since it was indexed.
#include "host/services/model_library.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "fifo_watchdog.h"
#include "ggml_test_support.h"
#include "host/services/store_owner.h"
#include "host/worker/weights/weight_store.h"
#include "protocol/commands.h"
#include "protocol/content_digest.h"

namespace ggml_remote::host {
namespace {

using protocol::content_digest;
using protocol::ContentDigest;
using test_support::pattern_bytes;
using test_support::write_gguf;

ContentDigest digest_of(const std::vector<uint8_t> &bytes) { return content_digest(bytes.data(), bytes.size()); }

std::vector<uint8_t> read_at(int fd, uint64_t offset, size_t size) {
    std::vector<uint8_t> bytes(size);
    EXPECT_EQ(::pread(fd, bytes.data(), size, static_cast<off_t>(offset)), static_cast<ssize_t>(size));
    return bytes;
}

class ModelLibraryTest : public ::testing::Test {
  protected:
    void SetUp() override {
        char name[] = "/tmp/ggml-remote-models-test.XXXXXX";
        ASSERT_NE(::mkdtemp(name), nullptr);
        directory = name;
        // Two weights and a tensor too small for a guest to name by digest.
        model = {pattern_bytes(300000, 1), pattern_bytes(protocol::kMinWeightLookupBytes, 2), pattern_bytes(4000, 3)};
        ASSERT_TRUE(write_gguf(directory + "/model.gguf", model));
    }
    void TearDown() override {
        stores.clear();
        owner.reset();
        library.reset();
        (void)!std::system(("rm -rf '" + directory + "'").c_str());
    }

    // The library, indexed (on this thread).
    ModelLibrary &indexed() {
        if (!library) {
            library = std::make_unique<ModelLibrary>();
            EXPECT_TRUE(library->open(directory).ok());
        }
        library->index_now();
        return *library;
    }
    // Whether the library serves `bytes`, and holds them where it says.
    bool serves(const std::vector<uint8_t> &bytes) {
        UniqueFd file;
        uint64_t offset = 0;
        if (!library->find(digest_of(bytes), bytes.size(), &file, &offset)) return false;
        EXPECT_EQ(read_at(file.get(), offset, bytes.size()), bytes);
        EXPECT_EQ(::fcntl(file.get(), F_GETFL) & O_ACCMODE, O_RDONLY);
        return true;
    }
    // A store's owner with the library and no store of its own (--models alone).
    StoreOwner &owner_with_library() {
        indexed();
        owner = std::make_unique<StoreOwner>();
        owner->use_library(std::move(library));
        return *owner;
    }
    WeightStore &open_store(const std::string &tenant) {
        UniqueFd channel;
        EXPECT_TRUE(owner->connect(tenant, &channel).ok());
        stores.push_back(std::make_unique<WeightStore>());
        EXPECT_TRUE(stores.back()->open(std::move(channel)).ok());
        return *stores.back();
    }

    std::string directory;
    std::vector<std::vector<uint8_t>> model;
    std::unique_ptr<ModelLibrary> library;
    std::unique_ptr<StoreOwner> owner;
    std::vector<std::unique_ptr<WeightStore>> stores;
};

TEST_F(ModelLibraryTest, ServesEachWeightOfAGgufFileByItsDigest) {
    ASSERT_TRUE(write_gguf(directory + "/other.gguf", {pattern_bytes(200000, 9)}));
    ASSERT_TRUE(write_gguf(directory + "/not-a-model.bin", {pattern_bytes(200000, 10)}));
    ModelLibrary &models = indexed();
    EXPECT_TRUE(serves(model[0]));
    EXPECT_TRUE(serves(model[1]));
    EXPECT_TRUE(serves(pattern_bytes(200000, 9)));
    EXPECT_FALSE(serves(model[2])) << "below the size a guest names by digest";
    EXPECT_FALSE(serves(pattern_bytes(200000, 10))) << "only *.gguf files are models";
    UniqueFd file;
    uint64_t offset = 0;
    EXPECT_FALSE(models.find(digest_of(model[0]), model[0].size() - 1, &file, &offset)) << "another size";
    const ModelLibraryFigures figures = models.figures();
    EXPECT_EQ(figures.files, 2u);
    EXPECT_EQ(figures.tensors, 3u);
    EXPECT_EQ(figures.bytes, model[0].size() + model[1].size() + 200000);
}

TEST_F(ModelLibraryTest, AFileThatIsNotGgufIsSkipped) {
    FILE *file = std::fopen((directory + "/broken.gguf").c_str(), "w");
    ASSERT_NE(file, nullptr);
    std::fputs("GGUF but not really", file);
    std::fclose(file);
    EXPECT_EQ(indexed().figures().files, 1u);
    EXPECT_TRUE(serves(model[0]));
}

// A file replaced by one that differs in one byte of one tensor: that tensor's old
// bytes are not served from the moment the change is seen, the new ones are once
// the file is indexed again, and so are the tensors that did not change.
TEST_F(ModelLibraryTest, AReplacedFileIsServedOnlyAsItIsNow) {
    indexed();
    std::vector<std::vector<uint8_t>> changed = model;
    changed[0][150000] ^= 1;
    ASSERT_TRUE(write_gguf(directory + "/.new", changed));
    ASSERT_EQ(::rename((directory + "/.new").c_str(), (directory + "/model.gguf").c_str()), 0);
    EXPECT_FALSE(serves(model[0]));
    EXPECT_FALSE(serves(model[1])) << "a changed file is dropped whole until it is indexed again";
    library->index_now();
    EXPECT_FALSE(serves(model[0]));
    EXPECT_TRUE(serves(changed[0]));
    EXPECT_TRUE(serves(model[1]));
}

TEST_F(ModelLibraryTest, AFileEditedInPlaceIsNotServed) {
    indexed();
    const std::string path = directory + "/model.gguf";
    const int fd = ::open(path.c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    const timespec later[2] = {{0, UTIME_OMIT}, {::time(nullptr) + 10, 0}};  // a write's new time
    ASSERT_EQ(::futimens(fd, later), 0);
    ::close(fd);
    EXPECT_FALSE(serves(model[0]));
}

TEST_F(ModelLibraryTest, ARemovedFileIsNotServed) {
    indexed();
    ASSERT_EQ(::unlink((directory + "/model.gguf").c_str()), 0);
    EXPECT_FALSE(serves(model[0]));
    library->index_now();
    EXPECT_EQ(library->figures().files, 0u);
}

// A FIFO named *.gguf: a blocking open would wait for a writer for good, and
// nothing after it would be indexed (found by fuzz_model_library too).
TEST_F(ModelLibraryTest, AFifoNamedGgufIsSkippedAndTheRestIndexed) {
    const std::string fifo = directory + "/fifo.gguf";
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    ASSERT_TRUE(write_gguf(directory + "/other.gguf", {pattern_bytes(200000, 9)}));
    EXPECT_TRUE(test_support::returns_without_a_writer(fifo, [this] { indexed(); }))
        << "the indexer waited for a writer to the FIFO";
    EXPECT_EQ(library->figures().files, 2u);
    EXPECT_TRUE(serves(model[0]));
    EXPECT_TRUE(serves(pattern_bytes(200000, 9)));
}

// The server's shutdown joins the indexer: it must never be blocked for good.
TEST_F(ModelLibraryTest, TheLibraryStopsPromptlyWithAFifoInTheDirectory) {
    const std::string fifo = directory + "/fifo.gguf";
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    library = std::make_unique<ModelLibrary>();
    ASSERT_TRUE(library->open(directory).ok());
    library->start_indexing();
    EXPECT_TRUE(test_support::returns_without_a_writer(fifo, [this] { library.reset(); }))
        << "the library's destructor waited for its indexer, blocked on the FIFO";
}

TEST_F(ModelLibraryTest, ADirectoryNamedGgufIsSkipped) {
    ASSERT_EQ(::mkdir((directory + "/folder.gguf").c_str(), 0700), 0);
    EXPECT_EQ(indexed().figures().files, 1u);
    EXPECT_TRUE(serves(model[0]));
}

// A link may lead out of DIR, to a file the operator never published (found by
// fuzz_model_library too: the file it led to was served to every tenant).
TEST_F(ModelLibraryTest, ALinkOutOfTheDirectoryIsNotFollowed) {
    char elsewhere[] = "/tmp/ggml-remote-models-elsewhere.XXXXXX";
    ASSERT_NE(::mkdtemp(elsewhere), nullptr);
    const std::string outside = std::string(elsewhere) + "/private.gguf";
    ASSERT_TRUE(write_gguf(outside, {pattern_bytes(200000, 11)}));
    ASSERT_EQ(::symlink(outside.c_str(), (directory + "/linked.gguf").c_str()), 0);
    EXPECT_EQ(indexed().figures().files, 1u);
    EXPECT_FALSE(serves(pattern_bytes(200000, 11)));
    (void)!std::system(("rm -rf '" + std::string(elsewhere) + "'").c_str());
}

// A file cut short while it is indexed (another process truncates it, again and
// again): the indexer reads it, so the listener lives; a mapping would fault
// (SIGBUS) on a page past the new end. In a child, which such a fault kills.
TEST_F(ModelLibraryTest, AFileCutShortWhileItIsIndexedDoesNotKillTheListener) {
    const std::string path = directory + "/shrinking.gguf";
    std::vector<std::vector<uint8_t>> large;
    for (uint32_t seed = 20; seed < 24; ++seed) large.push_back(pattern_bytes(size_t(4) << 20, seed));
    ASSERT_TRUE(write_gguf(path, large));
    struct stat st{};
    ASSERT_EQ(::stat(path.c_str(), &st), 0);
    const off_t whole = st.st_size;
    EXPECT_EXIT(
        {
            ModelLibrary models;
            if (!models.open(directory).ok()) std::_Exit(1);
            std::atomic<bool> done{false};
            std::thread truncating([&] {
                while (!done) {
                    (void)!::truncate(path.c_str(), whole / 2);
                    (void)!::truncate(path.c_str(), whole);
                }
            });
            for (int round = 0; round < 50; ++round) models.index_now();
            done = true;
            truncating.join();
            std::_Exit(0);
        },
        ::testing::ExitedWithCode(0), "");
}

TEST_F(ModelLibraryTest, EveryTenantFindsTheLibrarysWeightsWithoutAStore) {
    StoreOwner &models_only = owner_with_library();
    EXPECT_FALSE(models_only.enabled());
    EXPECT_TRUE(models_only.serves_workers());
    for (const std::string tenant : {"uid 1000", "address 10.0.0.7"}) {
        WeightStore &store = open_store(tenant);
        StoreEntry entry;
        ASSERT_TRUE(store.find(digest_of(model[0]), model[0].size(), &entry) == StoreLookup::found) << tenant;
        EXPECT_EQ(read_at(entry.file.get(), entry.content_offset, model[0].size()), model[0]);
        EXPECT_FALSE(store.find(digest_of(pattern_bytes(300000, 4)), 300000, &entry) == StoreLookup::found) << tenant;
    }
}

TEST_F(ModelLibraryTest, WithoutAStoreNothingIsCommitted) {
    owner_with_library();
    WeightStore &store = open_store("uid 1000");
    const std::vector<uint8_t> bytes = pattern_bytes(300000, 4);
    store.commit_copy(digest_of(bytes), bytes.size(), 0, bytes.data());
    store.wait_for_commits();
    EXPECT_EQ(store.counters().entries_written, 0u);
    EXPECT_EQ(store.counters().entries_refused, 1u);
    StoreEntry entry;
    EXPECT_FALSE(store.find(digest_of(bytes), bytes.size(), &entry) == StoreLookup::found);
    EXPECT_TRUE(store.find(digest_of(model[0]), model[0].size(), &entry) == StoreLookup::found)
        << "the channel still serves finds";
}

TEST_F(ModelLibraryTest, ATenantsOwnStoreAndTheLibraryBothServe) {
    WeightStoreOptions options;
    options.directory = directory + "/store";
    indexed();
    owner = std::make_unique<StoreOwner>();
    ASSERT_TRUE(owner->open(options).ok());
    owner->use_library(std::move(library));
    WeightStore &store = open_store("uid 1000");
    const std::vector<uint8_t> own = pattern_bytes(300000, 4);
    store.commit_copy(digest_of(own), own.size(), 0, own.data());
    store.wait_for_commits();
    StoreEntry entry;
    EXPECT_TRUE(store.find(digest_of(own), own.size(), &entry) == StoreLookup::found);
    EXPECT_TRUE(store.find(digest_of(model[0]), model[0].size(), &entry) == StoreLookup::found);
    EXPECT_FALSE(open_store("uid 1001").find(digest_of(own), own.size(), &entry) == StoreLookup::found)
        << "the store stays per tenant";
}

}  // namespace
}  // namespace ggml_remote::host
