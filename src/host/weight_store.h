// WeightStore: the server's store of weight tensors by content (--weight-store DIR).
//
// A guest names each large weight tensor by its digest (protocol/content_digest.h)
// before sending it. An entry is one file per tensor: a header page, then the
// bytes at an offset that has the same place within a 2 MiB page as the tensor
// has in its buffer, so that a worker can map the entry's pages into the buffer
// instead of copying them (and every session that maps them shares one copy).
//
//   DIR/<tenant>/<digest hex>     entries
//   DIR/<tenant>/.new-<pid>-<n>   entries being written, renamed once checked
//
// Tenants: a guest sees only the entries of guests with the same account (its
// user on a unix socket, its TLS identity, its address on plain TCP), unless the
// server shares one store among all (--weight-store-shared). An entry is named
// only after the server hashed the bytes itself: a guest cannot put bytes under
// another content's name. The store holds at most `max_bytes` of entries; the
// least recently used go first. See docs/SECURITY.md, "Weight store".
#pragma once

#include "protocol/content_digest.h"
#include "protocol/status.h"
#include "transport/unique_fd.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace ggml_remote::host {

struct WeightStoreOptions {
    std::string directory;  // empty: no store
    uint64_t max_bytes = 0;  // 0: a quarter of the directory's file system
    bool shared_across_tenants = false;
    // Hash every entry again before a worker uses it (bit rot on disk); off, an
    // entry's header and size are checked, and its bytes were checked when written.
    bool verify_on_use = false;
    // A model's load commits an entry per tensor: the store is scanned for eviction
    // at most this often, so it may exceed its limit by what was written meanwhile.
    int eviction_interval_ms = 500;
    // An entry's last use is recorded to this many seconds.
    int lru_resolution_s = 60;
};

// Where an entry's bytes start: a file offset whose remainder modulo 2 MiB is the
// tensor's `phase` (its offset in its buffer modulo 2 MiB).
constexpr uint64_t kEntryHeaderSpan = uint64_t(2) << 20;

struct StoreEntry {
    UniqueFd file;
    uint64_t content_offset = 0;
    uint64_t size = 0;
};

// An entry being written: the caller fills [content_offset, +size) of `file`, then
// hands it to WeightStore::commit.
struct NewEntry {
    UniqueFd file;
    // Where the store's thread copies the bytes from, when not null: the worker's
    // own memory, which must stay mapped until the commit is done. The store's
    // thread then also creates the file (`file` is not open yet).
    const uint8_t *source = nullptr;
    uint64_t phase = 0;
    std::string temporary_name;
    protocol::ContentDigest digest;
    uint64_t content_offset = 0;
    uint64_t size = 0;
};

struct WeightStoreCounters {
    uint64_t entries_written = 0;
    uint64_t entries_refused = 0;  // bytes that did not match the digest the guest named
    uint64_t entries_damaged = 0;  // found damaged, removed
    uint64_t entries_evicted = 0;
};

class WeightStore {
  public:
    WeightStore() = default;
    ~WeightStore();
    WeightStore(const WeightStore &) = delete;
    WeightStore &operator=(const WeightStore &) = delete;

    // Makes the store's directory if need be (the listener, at start-up), and removes
    // entries a crashed worker left half written.
    static Status prepare(const WeightStoreOptions &options);
    // Opens `tenant`'s part of the store (`tenant`: an account, see above).
    Status open(const WeightStoreOptions &options, const std::string &tenant);
    bool enabled() const { return directory_.valid(); }

    // The entry for `digest`, when there is an undamaged one of `size` bytes. A use
    // makes it the most recently used.
    bool find(const protocol::ContentDigest &digest, uint64_t size, StoreEntry *entry);
    // A new, empty entry of `size` bytes whose content offset has remainder `phase`.
    Status create(const protocol::ContentDigest &digest, uint64_t size, uint64_t phase, NewEntry *entry);
    // Checks the entry's bytes against its digest on the store's thread; names it when
    // they match, removes it otherwise; then evicts down to the size limit.
    void commit(NewEntry entry);
    // The same for `size` bytes at `source` in this process's memory (see NewEntry).
    void commit_copy(const protocol::ContentDigest &digest, uint64_t size, uint64_t phase, const uint8_t *source);
    // Removes an entry that will not be committed.
    void abandon(NewEntry entry);
    // Waits until every commit so far is done (tests, session end, a buffer freed).
    void wait_for_commits();
    // The guest is uploading: commits wait until it has paused (see wait_for_quiet).
    void note_activity();
    // Whether commits are queued or running.
    bool commits_pending() const;
    // The digests named since the last call.
    std::vector<protocol::ContentDigest> take_named();

    WeightStoreCounters counters() const;
    static std::string tenant_directory_name(const std::string &tenant);

  private:
    void commit_now(NewEntry &entry);
    void evict_to_limit();
    void run_commits();
    void wait_for_quiet();

    UniqueFd root_;       // DIR
    UniqueFd directory_;  // DIR/<tenant>
    WeightStoreOptions options_;
    std::atomic<uint64_t> next_temporary_{0};
    std::atomic<int64_t> last_activity_ns_{0};  // steady clock
    std::atomic<bool> hurry_{false};             // someone waits for the commits

    mutable std::mutex mutex_;
    std::condition_variable changed_;
    std::deque<NewEntry> queue_;
    size_t open_files_queued_ = 0;
    std::vector<protocol::ContentDigest> named_;
    bool busy_ = false;
    bool stopping_ = false;
    std::thread committer_;
    std::chrono::steady_clock::time_point last_eviction_{};
    WeightStoreCounters counters_;
};

}  // namespace ggml_remote::host
