// StoreFill: a session's use of the weight store (weight_store.h).
//
// A lookup that finds its entry fills the range from it. In a buffer in the
// worker's own memory, the entry's whole pages are mapped in place (copy-on-write),
// and only the partial pages at the two ends are copied: sessions that load the
// same weights share one copy of them. Elsewhere (device memory, another place in
// the page), the bytes are copied.
//
// A lookup that finds nothing makes a new entry; the guest's bytes land in the
// buffer as they would without a store. The next command that is not a write ends
// it, and only when the guest sent at least the entry's size of bytes into its
// range since: the work the store does for a guest is bounded by what it sent. In
// the worker's memory, the store's thread, on otherwise idle cores, streams the
// bytes to the store's owner, which checks them against the digest and names the
// entry (or drops it); once named, the buffer's whole pages are swapped for the
// entry's (same bytes, one copy for all sessions), unless the range was written
// since. From device memory the bytes are read and streamed at once.
//
// Lookups claim what they do not find (store_owner.h): a lookup that hears another
// worker of the tenant is writing the entry waits for it, so that guests that load
// a model at once hold one copy (bounded: kWaitForOthers, and a budget per session).
//
// Repacked images (weight_repack.h) go the same way as derived entries: one that
// is found is mapped in place of the copy's pages; one that is not is made, then
// handed to the store and swapped for the entry's pages once named.
#pragma once

#include <ggml.h>

#include <chrono>
#include <functional>
#include <optional>
#include <utility>
#include <vector>

#include "host/worker/weights/weight_repack.h"
#include "host/worker/weights/weight_store.h"
#include "transport/shared_memory.h"

namespace ggml_remote::host {

struct StoreFillCounters {
    uint64_t hits = 0;
    uint64_t misses = 0;
    uint64_t bytes_saved = 0;  // bytes the guest did not send
};

class StoreFill : public RepackedImages {
  public:
    // Where a lookup's bytes go: `range` is a byte tensor over them (the session's
    // write_range); `memory` the buffer's own mapping when the store's pages may be
    // put into it (the worker's private memory), else null.
    struct Target {
        ggml_tensor *range = nullptr;
        Mapping *memory = nullptr;
        uint64_t buffer = 0;  // the session's handle
        uint64_t offset = 0;  // of the range in the buffer
    };

    Status open(UniqueFd channel) { return store_.open(std::move(channel)); }
    bool enabled() const { return store_.enabled(); }

    // Fills `target` from the entry for `digest` (*found), or starts a new entry.
    Status lookup(const Target &target, const protocol::ContentDigest &digest, bool *found);
    // Where in its file the entry for `digest` starts, when the store (or the
    // model library) has it; claims nothing.
    bool entry_offset(const protocol::ContentDigest &digest, uint64_t size, uint64_t *content_offset);
    // Starts a new entry for the bytes the guest sends next (WeightOffer): unless the
    // store holds them already, which only costs the guest the bytes it sends anyway.
    Status offer(const Target &target, const protocol::ContentDigest &digest);
    // `sent` bytes of the guest's arrived for [offset, +size) of `buffer` (SetTensor):
    // they count towards the new entry where they fall in its range.
    void received(uint64_t buffer, uint64_t offset, uint64_t size, uint64_t sent);
    // Hands the new entry, if any, to the store, when the guest sent its bytes.
    Status finish_pending();
    // The guest left: a new entry whose bytes it sent is handed over, and the
    // commits are done within `limit` (they hold only bytes it sent), or dropped.
    void stop(std::chrono::milliseconds limit);

    // Bytes of a buffer changed (or it is being freed: then call forget_buffer):
    // a new entry made from the range before is not swapped in.
    void written(uint64_t buffer, uint64_t offset, uint64_t size);
    // The buffer is about to be freed: the store's thread may be copying from it.
    void forget_buffer(uint64_t buffer);
    // Swaps in the pages of entries named since the last call (cheap when none are due).
    void map_named();
    // Commits at once what other workers of the tenant wait for (see WeightStore).
    void serve_waiters() {
        store_.serve_waiters([this] { map_named(); });
    }

    // RepackedImages
    bool fill(const protocol::ContentDigest &key, uint8_t *image, uint64_t size) override;
    void share(const protocol::ContentDigest &key, uint8_t *image, uint64_t size, const ImageSource &source,
               std::function<void()> lost) override;

    const StoreFillCounters &counters() const { return counters_; }
    WeightStore &store() { return store_; }

  private:
    struct Pending {
        protocol::ContentDigest digest;
        uint64_t size = 0;
        uint64_t phase = 0;
        uint64_t received = 0;  // bytes the guest sent into the range since
        ggml_tensor range;      // what target.range points at
        Target target;
    };
    // A new entry copied from a buffer's memory, or a repacked image made from
    // it, to be swapped in once named.
    struct Awaiting {
        protocol::ContentDigest digest;
        Mapping *memory = nullptr;  // a range of the buffer's mapping, or
        uint8_t *image = nullptr;   // a repacked image (page-aligned) of a range of the buffer
        uint64_t buffer = 0;
        size_t offset = 0;           // in the mapping (the buffer's own: the same)
        uint64_t size = 0;           // of the entry
        uint64_t source_size = 0;    // of the range [offset, +source_size) the image was made from
        uint32_t flags = 0;          // the store's (kDerived for an image)
        bool written = false;        // since the copy was queued: keep the buffer's own bytes
        std::function<void()> lost;  // an image whose pages could not be swapped: make it again
        // Another worker writes the entry: until when this session asks for it.
        std::chrono::steady_clock::time_point others_until{};
    };
    // Keeps the guest's bytes, just arrived in the worker's memory, in the store.
    void keep_in_memory(Awaiting awaiting, uint64_t phase);
    // Swaps in the entries other workers wrote since the last call (at most every kOthersPoll).
    void poll_others();
    void swap_in(const Awaiting &awaiting);
    void swap_in(const Awaiting &awaiting, const StoreEntry &entry);
    // Maps the entry's whole pages over `image`'s, copy-on-write; false when it
    // could not (the image's bytes are then gone).
    static bool map_image_pages(uint8_t *image, uint64_t size, const StoreEntry &entry);
    // A lookup that waits while another worker of the tenant writes the entry.
    StoreLookup find_or_wait(const protocol::ContentDigest &digest, uint64_t size, StoreEntry *entry, uint32_t flags);
    // [first whole page, end of the last whole page) of `size` bytes at `offset` of
    // `memory`; empty when they hold no whole page.
    static void whole_pages(const Mapping *memory, size_t offset, uint64_t size, size_t *first, size_t *end);
    // Whether the entry's pages can stand in for whole pages of `entry.size` bytes at
    // `offset` of `memory` (which pages: [*first, *end)).
    static bool pages_of_entry_fit(const Mapping *memory, size_t offset, const StoreEntry &entry, size_t *first,
                                   size_t *end);
    // Maps them there, copy-on-write.
    static bool map_pages_of_entry(Mapping *memory, size_t offset, const StoreEntry &entry, size_t first, size_t end);
    bool fill_in_place(const Target &target, const StoreEntry &entry);
    Status fill_by_copy(const Target &target, const StoreEntry &entry);
    Status start_entry(const Target &target, const protocol::ContentDigest &digest);

    WeightStore store_;
    std::optional<Pending> pending_;
    std::vector<Awaiting> awaiting_;
    StoreFillCounters counters_;
    std::chrono::steady_clock::time_point last_poll_{};
    std::chrono::steady_clock::duration wait_left_ = std::chrono::seconds(120);  // kWaitForOthersInAll
};

}  // namespace ggml_remote::host
