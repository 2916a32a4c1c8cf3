// WeightStore: a session worker's side of the server's store of weight tensors by
// content (--weight-store DIR).
//
// A guest names each large weight tensor by its digest (protocol/content_digest.h)
// before sending it. An entry is one file per tensor: a header page, then the
// bytes at an offset that has the same place within a 2 MiB page as the tensor
// has in its buffer, so that a worker can map the entry's pages into the buffer
// instead of copying them (and every session that maps them shares one copy).
//
// The worker never touches DIR: the store's owner (store_owner.h, in the listener)
// writes, hashes, names and evicts entries, and enforces the tenants. The worker
// asks it over its channel (store_channel.h): for a read-only descriptor of an
// entry, or to take the bytes of a new one. See docs/SECURITY.md, "Weight store".
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "host/common/store_channel.h"
#include "host/common/store_layout.h"
#include "protocol/content_digest.h"
#include "protocol/status.h"
#include "transport/unique_fd.h"

namespace ggml_remote::host {

struct StoreEntry {
    UniqueFd file;
    uint64_t content_offset = 0;
    uint64_t size = 0;
};

// What a lookup found: the entry, nothing, or an entry another worker of the
// tenant is writing (it may be found soon).
enum class StoreLookup { missing, found, in_flight };

struct WeightStoreCounters {
    uint64_t entries_written = 0;  // named by the owner
    uint64_t entries_refused = 0;  // not named: the bytes did not match, no room, ...
};

// Fills `size` bytes at `into` with the bytes at `at` of a new entry.
using EntryFill = std::function<void(uint64_t at, uint8_t *into, size_t size)>;

class WeightStore {
  public:
    WeightStore() = default;
    ~WeightStore();
    WeightStore(const WeightStore &) = delete;
    WeightStore &operator=(const WeightStore &) = delete;

    // Uses the store through `channel`, for the tenant the listener named.
    Status open(UniqueFd channel);
    bool enabled() const { return usable_.load(std::memory_order_relaxed); }

    // The entry for `digest`, when there is an undamaged one of `size` bytes: a
    // read-only descriptor of a file whose size never changes. `flags`:
    // store_channel's kDerived (a repacked image's key) and kClaim.
    StoreLookup find(const protocol::ContentDigest &digest, uint64_t size, StoreEntry *entry, uint32_t flags = 0);
    // Queues a new entry of `size` bytes at `source` in this process's memory, which
    // must stay mapped until the commit is done (forget_buffer, wait_for_commits).
    // The store's thread streams them to the owner, which checks and names them.
    // When another worker is writing the same entry, the thread waits for it to be
    // named instead (and names it here as if this one had).
    void commit_copy(const protocol::ContentDigest &digest, uint64_t size, uint64_t phase, const uint8_t *source,
                     uint32_t flags = 0);
    // The same at once, on this thread, for bytes `fill` reads (device memory); waits
    // for the queued commits first. Whether the owner named the entry.
    bool commit_now(const protocol::ContentDigest &digest, uint64_t size, uint64_t phase, const EntryFill &fill);
    // Does every commit so far on this thread (tests, a buffer freed); waits for
    // none of other workers' entries.
    void wait_for_commits();
    // Drops the queued commits and stops the one under way.
    void cancel_commits();
    // The session ends: the commits so far (of bytes the guest sent) are done at once,
    // on this thread, without waiting for a pause; what is left after `limit` is dropped.
    void finish_commits(std::chrono::milliseconds limit);
    // When other workers wait for entries this one has queued: commits them now,
    // on this thread (the store's own runs only on idle cores).
    // `after_each` runs after each commit (its pages may be swapped in at once).
    void serve_waiters(const std::function<void()> &after_each);
    // The guest is uploading: commits wait until it has paused (see wait_for_quiet),
    // unless another worker waits for one of them.
    void note_activity();
    // Whether commits are queued or running.
    bool commits_pending() const;
    // The digests named since the last call.
    std::vector<protocol::ContentDigest> take_named();

    WeightStoreCounters counters() const;

  private:
    struct Queued {
        protocol::ContentDigest digest;
        uint64_t size = 0;
        uint64_t phase = 0;
        const uint8_t *source = nullptr;
        uint32_t flags = 0;
        // Another worker writes the entry: until when this one waits for it.
        std::chrono::steady_clock::time_point others_until{};
    };
    enum class Transfer { named, not_named, in_flight };
    // One request and its reply on the channel (the owner answers at once).
    bool request(const store_channel::Request &request, store_channel::Reply *reply, UniqueFd *file,
                 const int *fds = nullptr, size_t count = 0);
    // Hands the owner a new entry whose bytes `send(write_end)` writes into a pipe.
    Transfer transfer(const protocol::ContentDigest &digest, uint64_t size, uint64_t phase, uint32_t flags,
                      const std::function<bool(int)> &send);
    Transfer send_queued(const Queued &entry);
    // One queued entry: sent, or (another worker writes it) looked for; `may_wait`:
    // queued again to look for later.
    void commit_one(Queued entry, bool may_wait);
    // Does the queued commits on this thread, after the one under way, until
    // `until`; looks for others' entries only with `keep_polls` (else drops them).
    void drain(std::chrono::steady_clock::time_point until, bool keep_polls,
               const std::function<void()> &after_each = nullptr);
    // Whether other workers wait for one of this worker's entries.
    bool others_wait();
    bool send_from_memory(int pipe, const uint8_t *source, uint64_t size);
    bool send_filled(int pipe, uint64_t size, const EntryFill &fill);
    void counted(const protocol::ContentDigest &digest, bool named);
    void run_commits();
    void wait_for_quiet();

    UniqueFd channel_;
    std::mutex channel_mutex_;
    std::atomic<bool> usable_{false};           // the channel works (the owner answered so far)
    std::atomic<int64_t> last_activity_ns_{0};  // steady clock
    std::atomic<bool> draining_{false};         // a session's thread does the commits
    std::atomic<bool> cancelled_{false};

    mutable std::mutex mutex_;
    std::condition_variable changed_;
    std::deque<Queued> queue_;
    std::vector<protocol::ContentDigest> named_;
    bool busy_ = false;
    bool stopping_ = false;
    std::thread committer_;
    WeightStoreCounters counters_;
};

}  // namespace ggml_remote::host
