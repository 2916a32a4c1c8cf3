// WeightStore and content digests: entries by content, per tenant, checked,
// evicted; a damaged entry is never used.
#include "host/worker/weights/weight_store.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "ggml_test_support.h"
#include "host/common/store_channel.h"
#include "host/services/store_owner.h"
#include "host/worker/weights/store_fill.h"
#include "protocol/content_digest.h"

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
        EXPECT_TRUE(the_owner().connect(tenant, &channel).ok());
        stores.push_back(std::make_unique<WeightStore>());
        EXPECT_TRUE(stores.back()->open(std::move(channel)).ok());
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
    EXPECT_FALSE(store.find(digest, bytes.size(), &entry) == StoreLookup::found);
    put(store, bytes);
    ASSERT_TRUE(store.find(digest, bytes.size(), &entry) == StoreLookup::found);
    EXPECT_EQ(read_entry(entry), bytes);
    EXPECT_EQ(entry.content_offset % kEntryHeaderSpan, 4096u + 100u);  // the tensor's place in a huge page
    EXPECT_FALSE(store.find(digest, bytes.size() - 1, &entry) == StoreLookup::found);  // another size is another tensor
    const std::vector<uint8_t> other = pattern_bytes(300000, 2);
    EXPECT_FALSE(store.find(content_digest(other.data(), other.size()), other.size(), &entry) == StoreLookup::found);
    EXPECT_EQ(store.counters().entries_written, 1u);
}

TEST_F(WeightStoreTest, BytesThatDoNotMatchTheirDigestAreNotKept) {
    WeightStore &store = open_store("uid 1000");
    const std::vector<uint8_t> wanted = pattern_bytes(200000, 3), sent = pattern_bytes(200000, 4);
    const ContentDigest digest = content_digest(wanted.data(), wanted.size());
    put(store, sent, &digest);  // a guest that names one content and sends another
    StoreEntry entry;
    EXPECT_FALSE(store.find(digest, wanted.size(), &entry) == StoreLookup::found);
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
    EXPECT_FALSE(bob.find(digest, bytes.size(), &entry) == StoreLookup::found);
    EXPECT_TRUE(alice.find(digest, bytes.size(), &entry) == StoreLookup::found);
}

TEST_F(WeightStoreTest, OneStoreForAllWhenShared) {
    options.shared_across_tenants = true;
    WeightStore &carol = open_store("uid 1002");
    WeightStore &dave = open_store("address 10.0.0.7");
    const std::vector<uint8_t> bytes = pattern_bytes(100000, 5);
    put(carol, bytes);
    StoreEntry entry;
    EXPECT_TRUE(dave.find(content_digest(bytes.data(), bytes.size()), bytes.size(), &entry) == StoreLookup::found);
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
    EXPECT_FALSE(store.find(digest, bytes.size(), &entry) == StoreLookup::found);
    EXPECT_NE(::access(entry_path("uid 1000", digest).c_str(), F_OK), 0) << "the damaged entry is removed";
    // A truncated one (a crash).
    put(store, bytes);
    (void)::chmod(entry_path("uid 1000", digest).c_str(), 0600);
    ASSERT_EQ(::truncate(entry_path("uid 1000", digest).c_str(), kEntryHeaderSpan + 4096 + 100 + 10), 0);
    EXPECT_FALSE(store.find(digest, bytes.size(), &entry) == StoreLookup::found);
    EXPECT_EQ(the_owner().counters().entries_damaged, 2u);
}

TEST_F(WeightStoreTest, DamagedBytesAreFoundWhenEveryUseIsVerified) {
    options.verify_on_use = true;
    WeightStore &store = open_store("uid 1000");
    const std::vector<uint8_t> bytes = pattern_bytes(100000, 8);
    const ContentDigest digest = content_digest(bytes.data(), bytes.size());
    put(store, bytes);
    StoreEntry entry;
    ASSERT_TRUE(store.find(digest, bytes.size(), &entry) == StoreLookup::found);
    const int fd = open_for_damage(entry_path("uid 1000", digest));
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::pwrite(fd, "X", 1, static_cast<off_t>(entry.content_offset + 5000)), 1);
    ::close(fd);
    EXPECT_FALSE(store.find(digest, bytes.size(), &entry) == StoreLookup::found);
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
    ASSERT_TRUE(store.find(digests[0], tensors[0].size(), &entry) == StoreLookup::found);  // now the most recently used
    put(store, tensors[2]);
    EXPECT_TRUE(store.find(digests[0], tensors[0].size(), &entry) == StoreLookup::found);
    EXPECT_FALSE(store.find(digests[1], tensors[1].size(), &entry) == StoreLookup::found)
        << "the least recently used one went";
    EXPECT_TRUE(store.find(digests[2], tensors[2].size(), &entry) == StoreLookup::found);
    EXPECT_GE(the_owner().counters().entries_evicted, 1u);
    EXPECT_LE(the_owner().bytes_held(), options.max_bytes);
}

// Issue 40, class 5: a tenant (or a worker a guest took over) that offers entry
// after entry evicts its own, and others' only beyond their share.
TEST_F(WeightStoreTest, OneTenantsOffersNeverEvictAnothersEntriesBelowItsShare) {
    options.max_bytes = 5 * 400000;  // room for four entries of 400 kB and their header pages
    WeightStore &quiet = open_store("uid 1000");
    WeightStore &greedy = open_store("uid 2000");
    std::vector<std::vector<uint8_t>> tensors;
    for (uint32_t i = 0; i < 8; ++i) tensors.push_back(pattern_bytes(400000, 40 + i));
    put(quiet, tensors[0]);
    put(quiet, tensors[1]);  // half the store: its share of two tenants
    for (uint32_t i = 2; i < 8; ++i) put(greedy, tensors[i]);
    StoreEntry entry;
    for (uint32_t i = 0; i < 2; ++i) {
        const ContentDigest digest = content_digest(tensors[i].data(), tensors[i].size());
        EXPECT_TRUE(quiet.find(digest, tensors[i].size(), &entry) == StoreLookup::found)
            << "the quiet tenant's entry " << i << " within its share stays";
    }
    const ContentDigest newest = content_digest(tensors[7].data(), tensors[7].size());
    EXPECT_TRUE(greedy.find(newest, tensors[7].size(), &entry) == StoreLookup::found)
        << "the greedy tenant evicts its own entries to make room";
    EXPECT_GE(the_owner().counters().entries_evicted, 4u);
    EXPECT_LE(the_owner().bytes_held(), options.max_bytes);
}

TEST_F(WeightStoreTest, ATenantBeyondItsShareIsEvictedForAnother) {
    options.max_bytes = 5 * 400000;
    WeightStore &first = open_store("uid 1000");
    WeightStore &second = open_store("uid 2000");
    std::vector<std::vector<uint8_t>> tensors;
    for (uint32_t i = 0; i < 6; ++i) tensors.push_back(pattern_bytes(400000, 60 + i));
    for (uint32_t i = 0; i < 4; ++i) put(first, tensors[i]);  // the whole store while alone
    put(second, tensors[4]);
    put(second, tensors[5]);
    StoreEntry entry;
    for (uint32_t i = 4; i < 6; ++i) {
        const ContentDigest digest = content_digest(tensors[i].data(), tensors[i].size());
        EXPECT_TRUE(second.find(digest, tensors[i].size(), &entry) == StoreLookup::found)
            << "room within its share, taken from the tenant beyond its own";
    }
    int kept = 0;
    for (uint32_t i = 0; i < 4; ++i) {
        const ContentDigest digest = content_digest(tensors[i].data(), tensors[i].size());
        if (first.find(digest, tensors[i].size(), &entry) == StoreLookup::found) ++kept;
    }
    EXPECT_EQ(kept, 2) << "the first tenant keeps its share";
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

// Issue 25's attacks on the store, from a worker's side of the channel: a worker
// taken over speaks the channel's protocol as it likes (store_channel.h).
class HostileWorker {
  public:
    explicit HostileWorker(StoreOwner &owner, const std::string &tenant = "uid 1000") {
        EXPECT_TRUE(owner.connect(tenant, &channel).ok());
    }
    store_channel::Reply ask(const store_channel::Request &request, UniqueFd *file = nullptr, const int *fds = nullptr,
                             size_t count = 0) {
        store_channel::Reply reply;
        std::vector<UniqueFd> received;
        EXPECT_TRUE(store_channel::send_message(channel.get(), &request, sizeof(request), fds, count));
        EXPECT_TRUE(store_channel::receive_message(channel.get(), &reply, sizeof(reply), &received, 1, 10000));
        if (file != nullptr && !received.empty()) *file = std::move(received.front());
        return reply;
    }
    static store_channel::Request request(store_channel::Kind kind, const ContentDigest &digest, uint64_t size) {
        store_channel::Request request;
        request.kind = static_cast<uint32_t>(kind);
        std::memcpy(request.digest, digest.bytes, sizeof(request.digest));
        request.size = size;
        return request;
    }
    // Starts a commit of `size` bytes named `digest`: the pipe it writes them into
    // and the one the answer comes on, or a refusal (*refused).
    bool start_commit(const ContentDigest &digest, uint64_t size, UniqueFd *data, UniqueFd *result,
                      store_channel::Reply *refused = nullptr) {
        int data_pipe[2], result_pipe[2];
        EXPECT_EQ(::pipe2(data_pipe, O_CLOEXEC), 0);
        EXPECT_EQ(::pipe2(result_pipe, O_CLOEXEC), 0);
        UniqueFd data_read(data_pipe[0]), result_write(result_pipe[1]);
        data->reset(data_pipe[1]);
        result->reset(result_pipe[0]);
        const int fds[2] = {data_read.get(), result_write.get()};
        const store_channel::Reply reply = ask(request(store_channel::Kind::commit, digest, size), nullptr, fds, 2);
        if (refused != nullptr) *refused = reply;
        return reply.code == 0;
    }
    UniqueFd channel;
};

// Class 3: a worker cannot put bytes under a digest they do not have: the owner
// hashes its own copy of what it received.
TEST_F(WeightStoreTest, AHostileWorkerCannotPlantBytesUnderAnotherDigest) {
    const std::vector<uint8_t> real = pattern_bytes(300000, 21), planted = pattern_bytes(300000, 22);
    const ContentDigest digest = content_digest(real.data(), real.size());
    HostileWorker mallory(the_owner(), "uid 666");
    UniqueFd data, result;
    ASSERT_TRUE(mallory.start_commit(digest, planted.size(), &data, &result));
    ASSERT_EQ(::write(data.get(), planted.data(), 65536), 65536);
    data.reset();  // and the rest never comes: dropped too
    uint8_t answer = 9;
    ASSERT_EQ(::read(result.get(), &answer, 1), 1);
    EXPECT_EQ(answer, store_channel::kNotNamed);
    ASSERT_TRUE(mallory.start_commit(digest, planted.size(), &data, &result));
    for (size_t at = 0; at < planted.size(); at += 65536) {
        const size_t n = std::min<size_t>(65536, planted.size() - at);
        ASSERT_EQ(::write(data.get(), planted.data() + at, n), static_cast<ssize_t>(n));
    }
    ASSERT_EQ(::read(result.get(), &answer, 1), 1);
    EXPECT_EQ(answer, store_channel::kNotNamed);
    StoreEntry entry;
    EXPECT_FALSE(open_store("uid 666").find(digest, real.size(), &entry) == StoreLookup::found);
    EXPECT_EQ(the_owner().bytes_held(), 0u);
}

// A lookup of a known digest with another size finds nothing, and removes nothing
// (on main it counted as damage: any guest of the tenant, or of all tenants with
// --weight-store-shared, could remove an entry by naming it with a wrong size).
TEST_F(WeightStoreTest, ALookupWithAnotherSizeRemovesNothing) {
    WeightStore &store = open_store("uid 1000");
    const std::vector<uint8_t> bytes = pattern_bytes(200000, 28);
    const ContentDigest digest = content_digest(bytes.data(), bytes.size());
    put(store, bytes);
    StoreEntry entry;
    EXPECT_FALSE(store.find(digest, bytes.size() + 4096, &entry) == StoreLookup::found);
    EXPECT_TRUE(store.find(digest, bytes.size(), &entry) == StoreLookup::found);
    EXPECT_EQ(the_owner().counters().entries_damaged, 0u);
}

// Class 3: what a worker gets of an entry is read-only, and its size never changes:
// not by the worker, not by eviction (an unlink), not by a new commit of the same
// content. A mapping of it stays valid (no SIGBUS).
TEST_F(WeightStoreTest, AnEntryAWorkerHoldsIsReadOnlyAndKeepsItsSize) {
    options.max_bytes = 1200000;
    WeightStore &store = open_store("uid 1000");
    const std::vector<uint8_t> bytes = pattern_bytes(400000, 23);
    const ContentDigest digest = content_digest(bytes.data(), bytes.size());
    put(store, bytes);
    StoreEntry entry;
    ASSERT_TRUE(store.find(digest, bytes.size(), &entry) == StoreLookup::found);
    EXPECT_EQ(::fcntl(entry.file.get(), F_GETFL) & O_ACCMODE, O_RDONLY);
    EXPECT_NE(::ftruncate(entry.file.get(), 4096), 0) << "a worker cannot truncate an entry";
    EXPECT_NE(::pwrite(entry.file.get(), "X", 1, static_cast<off_t>(entry.content_offset)), 1);
    EXPECT_NE(::fallocate(entry.file.get(), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                          static_cast<off_t>(entry.content_offset), 4096),
              0);
    struct stat st{};
    ASSERT_EQ(::fstat(entry.file.get(), &st), 0);
    EXPECT_EQ(st.st_mode & 0222, 0u) << "entries are made read-only";
    const size_t length = static_cast<size_t>(entry.content_offset + entry.size);
    void *mapped = ::mmap(nullptr, length, PROT_READ, MAP_PRIVATE, entry.file.get(), 0);
    ASSERT_NE(mapped, MAP_FAILED);
    // Evicted: two newer entries of the same size push it out of a store with room for two.
    put(store, pattern_bytes(400000, 24));
    put(store, pattern_bytes(400000, 25));
    EXPECT_NE(::access(entry_path("uid 1000", digest).c_str(), F_OK), 0) << "evicted";
    EXPECT_EQ(std::memcmp(static_cast<uint8_t *>(mapped) + entry.content_offset, bytes.data(), bytes.size()), 0);
    ASSERT_EQ(::fstat(entry.file.get(), &st), 0);
    EXPECT_EQ(static_cast<uint64_t>(st.st_size), entry.content_offset + entry.size);
    ::munmap(mapped, length);
}

// Class 3, and issue 40's class 5: no worker names its tenant; the listener fixes
// every one (a TLS guest's once it proved its key), and an identify is refused.
TEST_F(WeightStoreTest, AWorkerCannotNameItsTenant) {
    WeightStore &alice = open_store("tls alice");
    const std::vector<uint8_t> bytes = pattern_bytes(200000, 26);
    const ContentDigest digest = content_digest(bytes.data(), bytes.size());
    put(alice, bytes);
    HostileWorker bob(the_owner(), "tls bob");
    store_channel::Request identify = HostileWorker::request(store_channel::Kind::identify, digest, 0);
    identify.identity_size = 5;
    std::memcpy(identify.identity, "alice", 5);
    EXPECT_EQ(bob.ask(identify).code, static_cast<int32_t>(Code::bad_request));
    UniqueFd file;
    store_channel::Reply reply =
        bob.ask(HostileWorker::request(store_channel::Kind::find, digest, bytes.size()), &file);
    EXPECT_EQ(reply.found, 0u) << "bob does not see alice's entries, whatever he claims";
    EXPECT_FALSE(file.valid());
    HostileWorker local(the_owner(), "uid 1001");
    EXPECT_EQ(local.ask(identify).code, static_cast<int32_t>(Code::bad_request));
}

// Class 2: bytes in flight count against the limit: commits under way cannot take
// the store past it, whatever they promise.
TEST_F(WeightStoreTest, BytesInFlightCountAgainstTheLimit) {
    options.max_bytes = 16u << 20;
    const ContentDigest digest = content_digest("x", 1);
    std::vector<std::unique_ptr<HostileWorker>> workers;
    std::vector<UniqueFd> pipes;
    int accepted = 0;
    for (int i = 0; i < 8; ++i) {
        workers.push_back(std::make_unique<HostileWorker>(the_owner(), "uid " + std::to_string(2000 + i)));
        UniqueFd data, result;
        store_channel::Reply reply;
        if (workers.back()->start_commit(digest, 6u << 20, &data, &result, &reply)) ++accepted;
        EXPECT_LE(the_owner().bytes_held(), options.max_bytes);
        pipes.push_back(std::move(data));
        pipes.push_back(std::move(result));
    }
    EXPECT_EQ(accepted, 2) << "room for two entries of 6 MiB in 16 MiB";
    // A second commit on a channel that has one under way is refused too.
    UniqueFd data, result;
    EXPECT_FALSE(workers.front()->start_commit(content_digest("y", 1), 4096, &data, &result));
    EXPECT_FALSE(HostileWorker(the_owner()).start_commit(digest, 17u << 20, &data, &result)) << "larger than the store";
}

// Class 2: a worker that goes away mid-commit (its guest left) ends the owner's work
// for it at once, and its reservation with it.
TEST_F(WeightStoreTest, AWorkerThatLeavesEndsItsCommitAtOnce) {
    auto worker = std::make_unique<HostileWorker>(the_owner());
    UniqueFd data, result;
    ASSERT_TRUE(worker->start_commit(content_digest("z", 1), 64u << 20, &data, &result));
    EXPECT_GT(the_owner().bytes_held(), 64u << 20);
    const std::vector<uint8_t> some(1u << 20, 1);
    ASSERT_EQ(::write(data.get(), some.data(), some.size()), static_cast<ssize_t>(some.size()));
    const auto left = std::chrono::steady_clock::now();
    data.reset();
    result.reset();
    worker.reset();
    while (the_owner().bytes_held() != 0 && std::chrono::steady_clock::now() - left < std::chrono::seconds(5)) {
        ::usleep(10000);
    }
    EXPECT_EQ(the_owner().bytes_held(), 0u);
    EXPECT_LT(std::chrono::steady_clock::now() - left, std::chrono::seconds(1));
}

// Entries in flight: a lookup that misses claims the entry; another worker of the
// tenant hears "in flight" until the claimant's commit names it. Another tenant
// never hears it, even in a shared store: it never waits on another's worker.
TEST_F(WeightStoreTest, AClaimedEntryIsInFlightForTheTenantsOtherWorkersOnly) {
    options.shared_across_tenants = true;
    WeightStore &first = open_store("uid 1000");
    WeightStore &second = open_store("uid 1000");
    WeightStore &other = open_store("uid 1001");
    const std::vector<uint8_t> bytes = pattern_bytes(100000, 31);
    const ContentDigest digest = content_digest(bytes.data(), bytes.size());
    StoreEntry entry;
    EXPECT_EQ(first.find(digest, bytes.size(), &entry, store_channel::kClaim), StoreLookup::missing);
    EXPECT_EQ(first.find(digest, bytes.size(), &entry, store_channel::kClaim), StoreLookup::missing) << "its own";
    EXPECT_EQ(second.find(digest, bytes.size(), &entry, store_channel::kClaim), StoreLookup::in_flight);
    EXPECT_EQ(other.find(digest, bytes.size(), &entry, store_channel::kClaim), StoreLookup::missing);
    put(first, bytes);
    EXPECT_EQ(second.find(digest, bytes.size(), &entry, store_channel::kClaim), StoreLookup::found);
    EXPECT_EQ(other.find(digest, bytes.size(), &entry), StoreLookup::found);
}

TEST_F(WeightStoreTest, AClaimEndsWithItsWorker) {
    WeightStore &second = open_store("uid 1000");
    open_store("uid 1000");
    const ContentDigest digest = content_digest("claimed", 7);
    StoreEntry entry;
    EXPECT_EQ(stores.back()->find(digest, 4096, &entry, store_channel::kClaim), StoreLookup::missing);
    EXPECT_EQ(second.find(digest, 4096, &entry), StoreLookup::in_flight);
    stores.pop_back();  // its channel closes
    const auto left = std::chrono::steady_clock::now();
    while (second.find(digest, 4096, &entry) == StoreLookup::in_flight &&
           std::chrono::steady_clock::now() - left < std::chrono::seconds(5)) {
        ::usleep(10000);
    }
    EXPECT_EQ(second.find(digest, 4096, &entry), StoreLookup::missing);
}

// A worker whose commit finds the entry being written by another waits for it to
// be named, and counts it as its own (its bytes are swapped for the entry's).
TEST_F(WeightStoreTest, ACommitOfAnEntryInFlightWaitsForItsName) {
    const std::vector<uint8_t> bytes = pattern_bytes(300000, 32);
    const ContentDigest digest = content_digest(bytes.data(), bytes.size());
    HostileWorker writer(the_owner());
    UniqueFd data, result;
    ASSERT_TRUE(writer.start_commit(digest, bytes.size(), &data, &result));
    WeightStore &second = open_store("uid 1000");
    second.commit_copy(digest, bytes.size(), 0, bytes.data());
    const auto started = std::chrono::steady_clock::now();
    while (the_owner().counters().commits_refused == 0 &&
           std::chrono::steady_clock::now() - started < std::chrono::seconds(10)) {
        ::usleep(10000);
    }
    ASSERT_EQ(the_owner().counters().commits_refused, 1u) << "the second commit heard: in flight";
    ASSERT_EQ(::write(data.get(), bytes.data(), 65536), 65536);
    for (size_t at = 65536; at < bytes.size(); at += 65536) {
        const size_t n = std::min<size_t>(65536, bytes.size() - at);
        ASSERT_EQ(::write(data.get(), bytes.data() + at, n), static_cast<ssize_t>(n));
    }
    uint8_t answer = 0;
    ASSERT_EQ(::read(result.get(), &answer, 1), 1);
    ASSERT_EQ(answer, store_channel::kNamed);
    std::vector<ContentDigest> named;
    while (named.empty() && std::chrono::steady_clock::now() - started < std::chrono::seconds(10)) {
        named = second.take_named();
        ::usleep(10000);
    }
    ASSERT_EQ(named.size(), 1u);
    EXPECT_EQ(named[0], digest);
    EXPECT_EQ(the_owner().counters().entries_written, 1u) << "one entry, written once";
}

// A derived entry (a repacked image) is named by the worker's key, which the owner
// cannot check: it is the tenant's own even in a shared store, and is no plain
// entry; its header records its bytes' digest, which verify_on_use checks.
TEST_F(WeightStoreTest, ADerivedEntryIsTheTenantsOwnEvenInASharedStore) {
    options.shared_across_tenants = true;
    options.verify_on_use = true;
    WeightStore &alice = open_store("uid 1000");
    WeightStore &bob = open_store("uid 1001");
    const std::vector<uint8_t> image = pattern_bytes(50000, 33);
    const ContentDigest key = content_digest("a repacked image's key", 22);
    alice.commit_copy(key, image.size(), 0, image.data(), store_channel::kDerived);
    alice.wait_for_commits();
    StoreEntry entry;
    ASSERT_EQ(alice.find(key, image.size(), &entry, store_channel::kDerived), StoreLookup::found);
    EXPECT_EQ(read_entry(entry), image);
    EXPECT_EQ(entry.content_offset % 4096, 0u) << "an image starts on a page";
    EXPECT_EQ(bob.find(key, image.size(), &entry, store_channel::kDerived), StoreLookup::missing);
    EXPECT_EQ(alice.find(key, image.size(), &entry), StoreLookup::missing) << "not a plain entry";
    EXPECT_EQ(the_owner().counters().entries_damaged, 0u);

    const std::string path =
        options.directory + "/" + StoreOwner::tenant_directory_name("uid 1000") + "/r-" + key.hex();
    const int fd = open_for_damage(path);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::pwrite(fd, "X", 1, static_cast<off_t>(kEntryHeaderSpan + 100)), 1);
    ::close(fd);
    EXPECT_EQ(alice.find(key, image.size(), &entry, store_channel::kDerived), StoreLookup::missing);
    EXPECT_EQ(the_owner().counters().entries_damaged, 1u);
}

// Class 4: a full file system is a refusal, never a signal. The store lies on a
// small tmpfs of its own (a private mount namespace, in a child process, so that a
// SIGBUS is seen as one), nearly filled; a new entry from device memory (the path a
// Vulkan worker takes) must be refused, and the session's buffer keeps its bytes.
int fill_store_on_full_file_system(const std::string &directory) {
    WeightStoreOptions options;
    options.directory = directory + "/store";
    options.max_bytes = 64u << 20;  // more than the file system holds
    StoreOwner owner;
    if (!owner.open(options).ok()) return 10;
    // The filler: all but 1 MiB of the 8 MiB file system.
    const int filler = ::open((directory + "/filler").c_str(), O_CREAT | O_WRONLY, 0600);
    if (filler < 0 || ::posix_fallocate(filler, 0, 7u << 20) != 0) return 11;
    ::close(filler);
    UniqueFd channel;
    if (!owner.connect("uid 1000", &channel).ok()) return 12;
    StoreFill fill;
    if (!fill.open(std::move(channel)).ok()) return 13;
    constexpr size_t kSize = 4u << 20;
    ggml_backend_buffer_t buffer =
        ggml_backend_buft_alloc_buffer(ggml_backend_dev_buffer_type(test_support::host_cpu_device()), kSize);
    if (buffer == nullptr) return 14;
    const std::vector<uint8_t> bytes = pattern_bytes(kSize, 27);
    ggml_tensor range{};
    range.type = GGML_TYPE_I8;
    range.ne[0] = static_cast<int64_t>(kSize);
    range.ne[1] = range.ne[2] = range.ne[3] = 1;
    range.nb[0] = 1;
    range.nb[1] = range.nb[2] = range.nb[3] = kSize;
    range.buffer = buffer;
    range.data = ggml_backend_buffer_get_base(buffer);
    ggml_backend_tensor_set(&range, bytes.data(), 0, kSize);
    const StoreFill::Target target{&range, nullptr, 1, 0};  // device memory: no mapping of the worker's own
    if (!fill.offer(target, content_digest(bytes.data(), kSize)).ok()) return 15;
    fill.received(1, 0, kSize, kSize);
    if (!fill.finish_pending().ok()) return 16;
    std::vector<uint8_t> kept(kSize);
    ggml_backend_tensor_get(&range, kept.data(), 0, kSize);
    if (kept != bytes) return 17;
    if (fill.store().counters().entries_written != 0 || owner.counters().commits_refused != 1) return 18;
    ggml_backend_buffer_free(buffer);
    return 0;
}

TEST(WeightStoreFullDisk, AFullFileSystemIsARefusalNotASignal) {
    char name[] = "/tmp/ggml-remote-store-full.XXXXXX";
    ASSERT_NE(::mkdtemp(name), nullptr);
    const std::string directory = name;
    (void)test_support::host_cpu_device();  // the backends load before the fork
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        // Private, so that the mount reaches no other namespace ("/" is no mount point
        // in a chroot, whose namespace is private already: scripts/in-sysroot).
        const bool isolated = ::unshare(CLONE_NEWNS) == 0 &&
                              (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0 || errno == EINVAL);
        if (!isolated || ::mount("tmpfs", name, "tmpfs", 0, "size=8m") != 0) {
            ::_exit(77);
        }
        ::_exit(fill_store_on_full_file_system(directory));
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ::rmdir(name);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 77) GTEST_SKIP() << "cannot mount a small tmpfs here (not root)";
    ASSERT_FALSE(WIFSIGNALED(status)) << "the store's user died of signal " << WTERMSIG(status) << " ("
                                      << strsignal(WTERMSIG(status)) << ") on a full file system";
    EXPECT_EQ(WEXITSTATUS(status), 0) << "step " << WEXITSTATUS(status) << " of the full-disk check failed";
}

}  // namespace
}  // namespace ggml_remote::host
