// StoreOwner: the only writer of the weight store (--weight-store DIR).
//
// It runs in the listener, on threads of its own; session workers have no access
// to DIR at all (their Landlock rules leave it out). Each worker gets one end of a
// socket pair at spawn, the owner serves the other (store_channel.h) for the
// tenant the listener knows from accept: the peer's account on a unix or TCP
// socket, the region of an ivshmem guest. A TLS guest's tenant is its identity:
// its worker gets its channel only once the listener saw the guest's proof that it
// holds that identity's key (worker_contract.h, KeyRequest).
//
//   DIR/<tenant>/<digest hex>     entries (mode 0400; never written once named)
//   DIR/<tenant>/r-<key hex>      derived entries: repacked images (store_channel.h),
//                                 always in the worker's own tenant's directory
//   DIR/<tenant>/.new-<pid>-<n>   entries being written by the owner
//
// A worker gets read-only descriptors of entries. The owner never changes an
// entry's size: it is written whole before it is named, and removed (evicted, found
// damaged) by unlink only, so a worker's mapping of an entry stays valid.
//
// A new entry: the worker names digest, size and phase; the owner reserves the
// space (counted against the limit with what other commits have in flight, then
// posix_fallocate, so a full disk is a refusal), takes exactly `size` bytes from a
// pipe the worker passed, hashes its own copy and names it only if the digest
// matches. One commit at a time per worker; a worker that goes away or stalls ends
// its commit.
//
// Entries in flight: a worker that finds nothing may claim the entry (it will send
// the bytes). Until its commit ends, or the claim lapses, another worker of the
// same tenant that looks the entry up hears "in flight" and may wait for it rather
// than receive a copy of its own; the claimant's worker asks whether anyone waits,
// and commits at once if so. Claims never cross tenants, even in a shared store: a
// tenant never waits on another's worker.
//
// With --models DIR, a find that the tenant's entries do not answer is answered
// from the model library (model_library.h) where it holds the bytes; with
// --models alone (no DIR of entries) the owner serves finds and refuses commits.
#pragma once

#include <atomic>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "host/common/services_channel.h"
#include "host/common/store_channel.h"
#include "host/common/store_layout.h"
#include "host/services/model_library.h"

namespace ggml_remote::host {

struct StoreOwnerCounters {
    uint64_t entries_written = 0;
    uint64_t entries_refused = 0;  // bytes that did not match their digest, or never came
    uint64_t entries_damaged = 0;  // found damaged, removed
    uint64_t entries_evicted = 0;
    uint64_t commits_refused = 0;  // no room (the limit, a full disk) or one already in flight
};

class StoreOwner {
  public:
    StoreOwner();
    ~StoreOwner();
    StoreOwner(const StoreOwner &) = delete;
    StoreOwner &operator=(const StoreOwner &) = delete;

    // Makes the store's directory if need be (mode 0700, the server's own), and
    // removes entries left half written; once, when the server starts.
    static Status prepare(const WeightStoreOptions &options);
    // Opens the store (making its directory if need be) and counts what it holds.
    Status open(const WeightStoreOptions &options);
    bool enabled() const { return root_.valid(); }
    // Answers finds from `library` too (--models), with or without a store; before
    // the first serve().
    void use_library(std::unique_ptr<ModelLibrary> library) { library_ = std::move(library); }
    // Whether workers get a channel: there is a store, a library, or both.
    bool serves_workers() const { return enabled() || library_ != nullptr; }

    // Serves a worker on `channel` for `tenant`, which the listener fixed (a TLS
    // guest's identity once it proved its key: no worker names its own).
    void serve(UniqueFd channel, const std::string &tenant);
    // A socket pair whose one end is served as above: the other, the worker's.
    Status connect(const std::string &tenant, UniqueFd *worker_end);
    // The same for the tenant whose directory is named `directory`
    // (store_tenant_directory): how the services process is asked.
    Status connect_tenant_directory(const std::string &directory, UniqueFd *worker_end);

    StoreOwnerCounters counters() const;
    // Bytes of named entries and of those being written (reserved).
    uint64_t bytes_held() const;
    uint64_t max_bytes() const { return options_.max_bytes; }

    // DIR/<this> holds `tenant`'s entries ("" : the shared part).
    static std::string tenant_directory_name(const std::string &tenant);

  private:
    struct Channel;
    struct Commit;
    // How a commit ends: its entry named; dropped once its bytes came (they did not
    // match, or never came whole); refused before any came (no room on the disk).
    enum class CommitEnd { named, dropped, refused };
    struct Stored {
        uint64_t bytes = 0;
        int64_t used_ns = 0;
    };
    struct Claim {
        const Channel *by = nullptr;
        std::string tenant;  // the claimant's own tenant (its private directory's name)
        int64_t until_ns = 0;
        bool waited = false;  // another worker heard "in flight"
    };
    // Where an entry is: its tenant's directory and its name.
    struct EntryName {
        std::string tenant, name;
        bool derived = false;
        std::string key() const { return tenant + "/" + name; }
    };

    void serve_tenant_directory(UniqueFd channel, const std::string &directory);
    void serve_channel(Channel *channel);
    void answer(Channel *channel, const store_channel::Request &request, std::vector<UniqueFd> &fds);
    EntryName entry_name(const Channel &channel, const store_channel::Request &request) const;
    Status find(const Channel &channel, const store_channel::Request &request, store_channel::Reply *reply,
                UniqueFd *file);
    // Nothing named: whether another worker of the tenant writes it (in flight), or
    // this one claims it.
    void answer_miss(const Channel &channel, const EntryName &entry, const store_channel::Request &request,
                     store_channel::Reply *reply);
    std::map<std::string, Claim>::iterator live_claim_locked(const std::string &key);
    void claim_locked(const Channel &channel, const std::string &key);
    void erase_claim_locked(std::map<std::string, Claim>::iterator claim);
    void release_claim(const Channel &channel, const std::string &key);
    bool named_already(const std::string &key) const;
    uint32_t waiters_of(const Channel &channel);
    void drop_claims_of(const Channel &channel);
    void find_in_library(const store_channel::Request &request, store_channel::Reply *reply, UniqueFd *file);
    Status start_commit(Channel *channel, const store_channel::Request &request, std::vector<UniqueFd> &fds,
                        store_channel::Reply *reply);
    Status create_entry(Commit *commit);
    void run_commit(std::unique_ptr<Commit> commit);
    bool take_bytes(Commit &commit);
    // The bytes taken match the digest named; for a derived entry, records theirs.
    bool check_or_record_digest(Commit &commit);
    void finish_commit(Commit &commit, CommitEnd end);
    Status reserve(const std::string &key, uint64_t bytes, bool *in_flight);
    // The same for `channel`'s commit, which claims the entry meanwhile.
    Status reserve_for(const Channel &channel, const std::string &key, uint64_t bytes, bool *in_flight);
    // Evicts the least recently used entries that `tenant` may evict until
    // `room_for` bytes fit: its own, and others' only while their tenant holds
    // more than its share (the limit divided among the tenants that hold entries).
    // A tenant within its share loses nothing to another's offers.
    void evict_locked(uint64_t room_for, const std::string &tenant);
    bool evictable_locked(const std::string &key, const std::string &tenant, uint64_t share) const;
    uint64_t share_locked(const std::string &tenant) const;
    // Counts `bytes` more (or fewer) held by the entry `key`, in all and for its tenant.
    void count_stored_locked(const std::string &key, int64_t bytes);
    Status open_tenant(const std::string &tenant, UniqueFd *directory);
    void scan();
    void forget_ended_channels();
    void remove_entry(const std::string &key);

    UniqueFd root_;
    WeightStoreOptions options_;
    std::unique_ptr<ModelLibrary> library_;  // --models, or none
    std::atomic<bool> stopping_{false};
    std::atomic<uint64_t> next_temporary_{0};

    mutable std::mutex mutex_;
    std::map<std::string, Stored> stored_;       // "<tenant dir>/<name>"
    std::map<std::string, uint64_t> in_flight_;  // the same keys: reserved bytes
    std::map<std::string, Claim> claims_;        // the same keys
    struct ClaimCounts {
        uint32_t held = 0;
        uint32_t waited = 0;  // of those, the ones another worker heard "in flight" of
    };
    std::map<const Channel *, ClaimCounts> claims_of_;  // each worker's, counted as they change
    uint64_t stored_bytes_ = 0;
    std::map<std::string, uint64_t> tenant_bytes_;  // named entries' bytes, by tenant directory
    uint64_t reserved_bytes_ = 0;
    StoreOwnerCounters counters_;
    std::list<std::unique_ptr<Channel>> channels_;
};

}  // namespace ggml_remote::host
