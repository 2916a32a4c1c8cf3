// The weight store's settings and the layout of its entries on disk: what the
// store's owner (services/store_owner.h) and a worker's client of it
// (worker/weights/weight_store.h) agree on.
#pragma once

#include <cstdint>
#include <string>

namespace ggml_remote::host {

struct WeightStoreOptions {
    std::string directory;  // empty: no store
    // 0: a quarter of the directory's file system. It counts every entry's pages
    // and those reserved for entries being written.
    uint64_t max_bytes = 0;
    bool shared_across_tenants = false;
    // Hash every entry again before a worker uses it (bit rot on disk); off, an
    // entry's header and size are checked, and its bytes were checked when written.
    bool verify_on_use = false;
    // An entry's last use is recorded on disk (for the next start) to this many
    // seconds; the owner keeps it exactly in memory.
    int lru_resolution_s = 60;
};

// Where an entry's bytes start: a file offset whose remainder modulo 2 MiB is the
// tensor's `phase` (its offset in its buffer modulo 2 MiB).
constexpr uint64_t kEntryHeaderSpan = uint64_t(2) << 20;

}  // namespace ggml_remote::host
