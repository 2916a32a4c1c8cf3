// StoreFill: a session's use of the weight store (weight_store.h).
//
// A lookup that finds its entry fills the range from it. In a buffer in the
// worker's own memory, the entry's whole pages are mapped in place (copy-on-write),
// and only the partial pages at the two ends are copied: sessions that load the
// same weights share one copy of them. Elsewhere (device memory, another place in
// the page), the bytes are copied.
//
// A lookup that finds nothing makes a new entry, and maps its pages in place of
// the range's, so that the guest's bytes land in the entry as they arrive. The
// next command that is not a write ends it: the entry's pages become
// copy-on-write, and the store checks the bytes against the digest and names the
// entry (or drops it) on its own thread.
#pragma once

#include "host/weight_store.h"
#include "transport/shared_memory.h"

#include <ggml.h>

#include <optional>

namespace ggml_remote::host {

struct StoreFillCounters {
    uint64_t hits = 0;
    uint64_t misses = 0;
    uint64_t bytes_saved = 0;  // bytes the guest did not send
};

class StoreFill {
  public:
    // Where a lookup's bytes go: `range` is a byte tensor over them (the session's
    // range_tensor); `memory` the buffer's own mapping when the store's pages may be
    // put into it (the worker's private memory), else null.
    struct Target {
        ggml_tensor *range = nullptr;
        Mapping *memory = nullptr;
    };

    Status open(const WeightStoreOptions &options, const std::string &tenant) { return store_.open(options, tenant); }
    bool enabled() const { return store_.enabled(); }

    // Fills `target` from the entry for `digest` (*found), or starts a new entry.
    Status lookup(const Target &target, const protocol::ContentDigest &digest, bool *found);
    // Hands the new entry, if any, to the store: its bytes have arrived. An error
    // means the range's bytes may be lost (the memory could not be mapped back).
    Status finish_pending();

    const StoreFillCounters &counters() const { return counters_; }
    WeightStore &store() { return store_; }

  private:
    struct Pending {
        NewEntry entry;
        ggml_tensor range;  // what target.range points at
        Target target;
        bool in_place = false;  // the entry's pages are mapped into the buffer
    };
    // [first whole page, end of the last whole page) of the target, relative to the
    // mapping; empty when it has no whole page.
    static void whole_pages(const Target &target, size_t *first, size_t *end);
    bool fill_in_place(const Target &target, const StoreEntry &entry);
    Status fill_by_copy(const Target &target, const StoreEntry &entry);
    Status start_entry(const Target &target, const protocol::ContentDigest &digest);

    WeightStore store_;
    std::optional<Pending> pending_;
    StoreFillCounters counters_;
};

}  // namespace ggml_remote::host
