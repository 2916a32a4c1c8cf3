// WeightStore and content digests: entries by content, per tenant, checked,
// evicted; a damaged entry is never used.
#include "ggml_test_support.h"
#include "host/weight_store.h"
#include "protocol/content_digest.h"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace ggml_remote::host {
namespace {

using protocol::content_digest;
using protocol::ContentDigest;

using test_support::pattern_bytes;

TEST(ContentDigest, IsTheSameOnAnyNumberOfThreads) {
    for (size_t size : {size_t(0), size_t(1), protocol::kDigestBlockSize, 3 * protocol::kDigestBlockSize + 17}) {
        const std::vector<uint8_t> bytes = pattern_bytes(size, 7);
        const ContentDigest one = content_digest(bytes.data(), size, 1);
        EXPECT_EQ(content_digest(bytes.data(), size, 3), one) << size;
        EXPECT_EQ(content_digest(bytes.data(), size, 16), one) << size;
    }
}

TEST(ContentDigest, ChangesWithAnyByteAndWithTheSize) {
    std::vector<uint8_t> bytes = pattern_bytes(2 * protocol::kDigestBlockSize + 5, 1);
    const ContentDigest before = content_digest(bytes.data(), bytes.size(), 2);
    EXPECT_NE(content_digest(bytes.data(), bytes.size() - 1, 2), before);
    bytes[protocol::kDigestBlockSize + 3] ^= 1;
    EXPECT_NE(content_digest(bytes.data(), bytes.size(), 2), before);
    EXPECT_EQ(before.hex().size(), 32u);
}

class WeightStoreTest : public ::testing::Test {
  protected:
    void SetUp() override {
        char name[] = "/tmp/ggml-remote-store-test.XXXXXX";
        ASSERT_NE(::mkdtemp(name), nullptr);
        options.directory = name;
        ASSERT_TRUE(WeightStore::prepare(options).ok());
    }
    void TearDown() override { (void)!std::system(("rm -rf '" + options.directory + "'").c_str()); }

    // Writes `bytes` as a new entry named `digest` (its own, unless told otherwise).
    void put(WeightStore &store, const std::vector<uint8_t> &bytes, const ContentDigest *named = nullptr) {
        const ContentDigest digest = named != nullptr ? *named : content_digest(bytes.data(), bytes.size());
        NewEntry entry;
        ASSERT_TRUE(store.create(digest, bytes.size(), 4096 + 100, &entry).ok());
        ASSERT_EQ(::pwrite(entry.file.get(), bytes.data(), bytes.size(), static_cast<off_t>(entry.content_offset)),
                  static_cast<ssize_t>(bytes.size()));
        store.commit(std::move(entry));
        store.wait_for_commits();
    }
    std::vector<uint8_t> read_entry(const StoreEntry &entry) {
        std::vector<uint8_t> bytes(entry.size);
        EXPECT_EQ(::pread(entry.file.get(), bytes.data(), bytes.size(), static_cast<off_t>(entry.content_offset)),
                  static_cast<ssize_t>(bytes.size()));
        return bytes;
    }
    std::string entry_path(const std::string &tenant, const ContentDigest &digest) {
        return options.directory + "/" + WeightStore::tenant_directory_name(tenant) + "/" + digest.hex();
    }

    WeightStoreOptions options;
};

TEST_F(WeightStoreTest, FindsWhatWasPutAndNothingElse) {
    WeightStore store;
    ASSERT_TRUE(store.open(options, "uid 1000").ok());
    const std::vector<uint8_t> bytes = pattern_bytes(300000, 1);
    const ContentDigest digest = content_digest(bytes.data(), bytes.size());
    StoreEntry entry;
    EXPECT_FALSE(store.find(digest, bytes.size(), &entry));
    put(store, bytes);
    ASSERT_TRUE(store.find(digest, bytes.size(), &entry));
    EXPECT_EQ(read_entry(entry), bytes);
    EXPECT_EQ(entry.content_offset % kEntryHeaderSpan, 4096u + 100u);  // the tensor's place in a huge page
    EXPECT_FALSE(store.find(digest, bytes.size() - 1, &entry));  // another size is another tensor
    const std::vector<uint8_t> other = pattern_bytes(300000, 2);
    EXPECT_FALSE(store.find(content_digest(other.data(), other.size()), other.size(), &entry));
    EXPECT_EQ(store.counters().entries_written, 1u);
}

TEST_F(WeightStoreTest, BytesThatDoNotMatchTheirDigestAreNotKept) {
    WeightStore store;
    ASSERT_TRUE(store.open(options, "uid 1000").ok());
    const std::vector<uint8_t> wanted = pattern_bytes(200000, 3), sent = pattern_bytes(200000, 4);
    const ContentDigest digest = content_digest(wanted.data(), wanted.size());
    put(store, sent, &digest);  // a guest that names one content and sends another
    StoreEntry entry;
    EXPECT_FALSE(store.find(digest, wanted.size(), &entry));
    EXPECT_EQ(store.counters().entries_refused, 1u);
    EXPECT_EQ(store.counters().entries_written, 0u);
}

TEST_F(WeightStoreTest, ATenantSeesOnlyItsOwnEntriesUnlessTheStoreIsShared) {
    WeightStore alice, bob;
    ASSERT_TRUE(alice.open(options, "uid 1000").ok());
    ASSERT_TRUE(bob.open(options, "uid 1001").ok());
    const std::vector<uint8_t> bytes = pattern_bytes(100000, 5);
    const ContentDigest digest = content_digest(bytes.data(), bytes.size());
    put(alice, bytes);
    StoreEntry entry;
    EXPECT_FALSE(bob.find(digest, bytes.size(), &entry));
    EXPECT_TRUE(alice.find(digest, bytes.size(), &entry));

    WeightStoreOptions shared = options;
    shared.shared_across_tenants = true;
    WeightStore carol, dave;
    ASSERT_TRUE(carol.open(shared, "uid 1002").ok());
    ASSERT_TRUE(dave.open(shared, "address 10.0.0.7").ok());
    put(carol, bytes);
    EXPECT_TRUE(dave.find(digest, bytes.size(), &entry));
}

TEST_F(WeightStoreTest, ADamagedEntryIsRemovedAndNotUsed) {
    WeightStore store;
    ASSERT_TRUE(store.open(options, "uid 1000").ok());
    const std::vector<uint8_t> bytes = pattern_bytes(100000, 6);
    const ContentDigest digest = content_digest(bytes.data(), bytes.size());
    StoreEntry entry;
    // A damaged header.
    put(store, bytes);
    {
        const int fd = ::open(entry_path("uid 1000", digest).c_str(), O_WRONLY);
        ASSERT_GE(fd, 0);
        ASSERT_EQ(::pwrite(fd, "X", 1, 40), 1);
        ::close(fd);
    }
    EXPECT_FALSE(store.find(digest, bytes.size(), &entry));
    EXPECT_NE(::access(entry_path("uid 1000", digest).c_str(), F_OK), 0) << "the damaged entry is removed";
    // A truncated one (a full disk, a crash).
    put(store, bytes);
    ASSERT_EQ(::truncate(entry_path("uid 1000", digest).c_str(), kEntryHeaderSpan + 4096 + 100 + 10), 0);
    EXPECT_FALSE(store.find(digest, bytes.size(), &entry));
    EXPECT_EQ(store.counters().entries_damaged, 2u);
}

TEST_F(WeightStoreTest, DamagedBytesAreFoundWhenEveryUseIsVerified) {
    options.verify_on_use = true;
    WeightStore store;
    ASSERT_TRUE(store.open(options, "uid 1000").ok());
    const std::vector<uint8_t> bytes = pattern_bytes(100000, 8);
    const ContentDigest digest = content_digest(bytes.data(), bytes.size());
    put(store, bytes);
    StoreEntry entry;
    ASSERT_TRUE(store.find(digest, bytes.size(), &entry));
    const int fd = ::open(entry_path("uid 1000", digest).c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::pwrite(fd, "X", 1, static_cast<off_t>(entry.content_offset + 5000)), 1);
    ::close(fd);
    EXPECT_FALSE(store.find(digest, bytes.size(), &entry));
}

TEST_F(WeightStoreTest, TheLeastRecentlyUsedEntriesGoFirst) {
    options.max_bytes = 3 * 400000;  // room for about two entries of 400 kB and their headers
    options.eviction_interval_ms = 0;
    options.lru_resolution_s = 0;
    WeightStore store;
    ASSERT_TRUE(store.open(options, "uid 1000").ok());
    std::vector<std::vector<uint8_t>> tensors;
    std::vector<ContentDigest> digests;
    for (uint32_t i = 0; i < 3; ++i) {
        tensors.push_back(pattern_bytes(400000, 10 + i));
        digests.push_back(content_digest(tensors.back().data(), tensors.back().size()));
    }
    StoreEntry entry;
    put(store, tensors[0]);
    ::usleep(20000);
    put(store, tensors[1]);
    ::usleep(20000);
    ASSERT_TRUE(store.find(digests[0], tensors[0].size(), &entry));  // now the most recently used
    ::usleep(20000);
    put(store, tensors[2]);
    EXPECT_TRUE(store.find(digests[0], tensors[0].size(), &entry));
    EXPECT_FALSE(store.find(digests[1], tensors[1].size(), &entry)) << "the least recently used one went";
    EXPECT_TRUE(store.find(digests[2], tensors[2].size(), &entry));
    EXPECT_GE(store.counters().entries_evicted, 1u);
}

TEST_F(WeightStoreTest, PrepareRemovesHalfWrittenEntriesOfDeadWorkers) {
    WeightStore store;
    ASSERT_TRUE(store.open(options, "uid 1000").ok());
    const std::string tenant = options.directory + "/" + WeightStore::tenant_directory_name("uid 1000");
    const std::string orphan = tenant + "/.new-999999999-0", live = tenant + "/.new-" + std::to_string(::getpid()) + "-7";
    for (const std::string &path : {orphan, live}) ::close(::open(path.c_str(), O_CREAT | O_WRONLY, 0600));
    ASSERT_TRUE(WeightStore::prepare(options).ok());
    EXPECT_NE(::access(orphan.c_str(), F_OK), 0);
    EXPECT_EQ(::access(live.c_str(), F_OK), 0);
}

}  // namespace
}  // namespace ggml_remote::host
