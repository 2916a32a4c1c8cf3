// WeightStore and content digests: entries by content, per tenant, checked,
// evicted; a damaged entry is never used.
#include "ggml_test_support.h"
#include "host/store_owner.h"
#include "host/weight_store.h"
#include "protocol/content_digest.h"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <memory>
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
        options.lru_resolution_s = 0;
    }
    void TearDown() override {
        stores.clear();
        owner.reset();
        (void)!std::system(("rm -rf '" + options.directory + "'").c_str());
    }

    // The owner (once, with `options` as they are then).
    StoreOwner &the_owner() {
        if (!owner) {
            owner = std::make_unique<StoreOwner>();
            EXPECT_TRUE(owner->open(options).ok());
        }
        return *owner;
    }
    // A worker's side of the store, for `tenant`.
    WeightStore &open_store(const std::string &tenant) {
        UniqueFd channel;
        EXPECT_TRUE(the_owner().connect(tenant, false, &channel).ok());
        stores.push_back(std::make_unique<WeightStore>());
        EXPECT_TRUE(stores.back()->open(std::move(channel), options).ok());
        return *stores.back();
    }
    // Writes `bytes` as a new entry named `digest` (its own, unless told otherwise).
    void put(WeightStore &store, const std::vector<uint8_t> &bytes, const ContentDigest *named = nullptr) {
        const ContentDigest digest = named != nullptr ? *named : content_digest(bytes.data(), bytes.size());
        store.commit_copy(digest, bytes.size(), 4096 + 100, bytes.data());
        store.wait_for_commits();
    }
    std::vector<uint8_t> read_entry(const StoreEntry &entry) {
        std::vector<uint8_t> bytes(entry.size);
        EXPECT_EQ(::pread(entry.file.get(), bytes.data(), bytes.size(), static_cast<off_t>(entry.content_offset)),
                  static_cast<ssize_t>(bytes.size()));
        return bytes;
    }
    std::string entry_path(const std::string &tenant, const ContentDigest &digest) {
        return options.directory + "/" + StoreOwner::tenant_directory_name(tenant) + "/" + digest.hex();
    }
    // Opens an entry for writing as the test (bit rot, a crash): entries are read-only.
    int open_for_damage(const std::string &path) {
        (void)::chmod(path.c_str(), 0600);
        return ::open(path.c_str(), O_WRONLY);
    }

    WeightStoreOptions options;
    std::unique_ptr<StoreOwner> owner;
    std::vector<std::unique_ptr<WeightStore>> stores;
};

TEST_F(WeightStoreTest, FindsWhatWasPutAndNothingElse) {
    WeightStore &store = open_store("uid 1000");
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
    WeightStore &store = open_store("uid 1000");
    const std::vector<uint8_t> wanted = pattern_bytes(200000, 3), sent = pattern_bytes(200000, 4);
    const ContentDigest digest = content_digest(wanted.data(), wanted.size());
    put(store, sent, &digest);  // a guest that names one content and sends another
    StoreEntry entry;
    EXPECT_FALSE(store.find(digest, wanted.size(), &entry));
    EXPECT_EQ(store.counters().entries_refused, 1u);
    EXPECT_EQ(store.counters().entries_written, 0u);
    EXPECT_EQ(the_owner().bytes_held(), 0u) << "nothing kept, nothing reserved";
}

TEST_F(WeightStoreTest, ATenantSeesOnlyItsOwnEntriesUnlessTheStoreIsShared) {
    WeightStore &alice = open_store("uid 1000");
    WeightStore &bob = open_store("uid 1001");
    const std::vector<uint8_t> bytes = pattern_bytes(100000, 5);
    const ContentDigest digest = content_digest(bytes.data(), bytes.size());
    put(alice, bytes);
    StoreEntry entry;
    EXPECT_FALSE(bob.find(digest, bytes.size(), &entry));
    EXPECT_TRUE(alice.find(digest, bytes.size(), &entry));
}

TEST_F(WeightStoreTest, OneStoreForAllWhenShared) {
    options.shared_across_tenants = true;
    WeightStore &carol = open_store("uid 1002");
    WeightStore &dave = open_store("address 10.0.0.7");
    const std::vector<uint8_t> bytes = pattern_bytes(100000, 5);
    put(carol, bytes);
    StoreEntry entry;
    EXPECT_TRUE(dave.find(content_digest(bytes.data(), bytes.size()), bytes.size(), &entry));
}

TEST_F(WeightStoreTest, ADamagedEntryIsRemovedAndNotUsed) {
    WeightStore &store = open_store("uid 1000");
    const std::vector<uint8_t> bytes = pattern_bytes(100000, 6);
    const ContentDigest digest = content_digest(bytes.data(), bytes.size());
    StoreEntry entry;
    // A damaged header.
    put(store, bytes);
    {
        const int fd = open_for_damage(entry_path("uid 1000", digest));
        ASSERT_GE(fd, 0);
        ASSERT_EQ(::pwrite(fd, "X", 1, 40), 1);
        ::close(fd);
    }
    EXPECT_FALSE(store.find(digest, bytes.size(), &entry));
    EXPECT_NE(::access(entry_path("uid 1000", digest).c_str(), F_OK), 0) << "the damaged entry is removed";
    // A truncated one (a crash).
    put(store, bytes);
    (void)::chmod(entry_path("uid 1000", digest).c_str(), 0600);
    ASSERT_EQ(::truncate(entry_path("uid 1000", digest).c_str(), kEntryHeaderSpan + 4096 + 100 + 10), 0);
    EXPECT_FALSE(store.find(digest, bytes.size(), &entry));
    EXPECT_EQ(the_owner().counters().entries_damaged, 2u);
}

TEST_F(WeightStoreTest, DamagedBytesAreFoundWhenEveryUseIsVerified) {
    options.verify_on_use = true;
    WeightStore &store = open_store("uid 1000");
    const std::vector<uint8_t> bytes = pattern_bytes(100000, 8);
    const ContentDigest digest = content_digest(bytes.data(), bytes.size());
    put(store, bytes);
    StoreEntry entry;
    ASSERT_TRUE(store.find(digest, bytes.size(), &entry));
    const int fd = open_for_damage(entry_path("uid 1000", digest));
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::pwrite(fd, "X", 1, static_cast<off_t>(entry.content_offset + 5000)), 1);
    ::close(fd);
    EXPECT_FALSE(store.find(digest, bytes.size(), &entry));
}

TEST_F(WeightStoreTest, TheLeastRecentlyUsedEntriesGoFirst) {
    options.max_bytes = 3 * 400000;  // room for two entries of 400 kB and their header pages
    WeightStore &store = open_store("uid 1000");
    std::vector<std::vector<uint8_t>> tensors;
    std::vector<ContentDigest> digests;
    for (uint32_t i = 0; i < 3; ++i) {
        tensors.push_back(pattern_bytes(400000, 10 + i));
        digests.push_back(content_digest(tensors.back().data(), tensors.back().size()));
    }
    StoreEntry entry;
    put(store, tensors[0]);
    put(store, tensors[1]);
    ASSERT_TRUE(store.find(digests[0], tensors[0].size(), &entry));  // now the most recently used
    put(store, tensors[2]);
    EXPECT_TRUE(store.find(digests[0], tensors[0].size(), &entry));
    EXPECT_FALSE(store.find(digests[1], tensors[1].size(), &entry)) << "the least recently used one went";
    EXPECT_TRUE(store.find(digests[2], tensors[2].size(), &entry));
    EXPECT_GE(the_owner().counters().entries_evicted, 1u);
    EXPECT_LE(the_owner().bytes_held(), options.max_bytes);
}

TEST_F(WeightStoreTest, PrepareRemovesHalfWrittenEntriesOfDeadWriters) {
    (void)open_store("uid 1000");
    const std::string tenant = options.directory + "/" + StoreOwner::tenant_directory_name("uid 1000");
    ASSERT_EQ(::mkdir(tenant.c_str(), 0700) == 0 || errno == EEXIST, true);
    const std::string orphan = tenant + "/.new-999999999-0",
                      live = tenant + "/.new-" + std::to_string(::getppid()) + "-7";
    for (const std::string &path : {orphan, live}) ::close(::open(path.c_str(), O_CREAT | O_WRONLY, 0600));
    ASSERT_TRUE(StoreOwner::prepare(options).ok());
    EXPECT_NE(::access(orphan.c_str(), F_OK), 0);
    EXPECT_EQ(::access(live.c_str(), F_OK), 0);
}

}  // namespace
}  // namespace ggml_remote::host
