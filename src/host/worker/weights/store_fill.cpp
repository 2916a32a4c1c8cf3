#include "host/worker/weights/store_fill.h"

#include <ggml-backend.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <thread>

namespace ggml_remote::host {

namespace {

// A write this large is part of an upload (a token's inputs are far smaller).
constexpr uint64_t kUploadWrite = uint64_t(64) << 10;
// How long a lookup waits for another worker of the tenant that writes the same
// entry, and how long a session's lookups wait in all: past that, the guest sends.
constexpr auto kWaitForOthers = std::chrono::seconds(30);
constexpr auto kWaitForOthersInAll = std::chrono::seconds(120);
// How often a session asks whether entries others write are named yet.
constexpr auto kOthersPoll = std::chrono::milliseconds(20);

size_t page_size() { return static_cast<size_t>(::sysconf(_SC_PAGESIZE)); }

uint8_t *start_of(const StoreFill::Target &target) { return static_cast<uint8_t *>(target.range->data); }

size_t offset_in_memory(const StoreFill::Target &target) {
    return static_cast<size_t>(start_of(target) - static_cast<uint8_t *>(target.memory->data()));
}

bool read_exactly(int fd, uint8_t *to, size_t size, uint64_t offset) {
    return size == 0 || ::pread(fd, to, size, static_cast<off_t>(offset)) == static_cast<ssize_t>(size);
}

}  // namespace

void StoreFill::whole_pages(const Mapping *memory, size_t offset, uint64_t size, size_t *first, size_t *end) {
    *first = *end = 0;
    if (memory == nullptr) return;
    // By address: the mapping itself may start inside a page (Mapping::anonymous).
    const size_t page = page_size();
    const uintptr_t base = reinterpret_cast<uintptr_t>(memory->data()), start = base + offset;
    const uintptr_t first_page = (start + page - 1) / page * page;
    const uintptr_t end_page = (start + size) / page * page;
    if (end_page > first_page) {
        *first = first_page - base;
        *end = end_page - base;
    }
}

StoreLookup StoreFill::find_or_wait(const protocol::ContentDigest &digest, uint64_t size, StoreEntry *entry,
                                    uint32_t flags) {
    using Clock = std::chrono::steady_clock;
    const Clock::time_point until = Clock::now() + std::min<Clock::duration>(kWaitForOthers, wait_left_);
    auto pause = std::chrono::milliseconds(5);
    for (;;) {
        const Clock::time_point asked = Clock::now();
        const StoreLookup lookup = store_.find(digest, size, entry, flags | store_channel::kClaim);
        if (lookup != StoreLookup::in_flight || asked >= until) return lookup;
        std::this_thread::sleep_for(pause);
        pause = std::min(pause * 2, std::chrono::milliseconds(20));
        wait_left_ -= std::min<Clock::duration>(wait_left_, Clock::now() - asked);
    }
}

Status StoreFill::lookup(const Target &target, const protocol::ContentDigest &digest, bool *found) {
    *found = false;
    const uint64_t size = ggml_nbytes(target.range);
    StoreEntry entry;
    if (find_or_wait(digest, size, &entry, 0) != StoreLookup::found) {
        ++counters_.misses;
        return start_entry(target, digest);
    }
    if (!fill_in_place(target, entry)) {
        Status status = fill_by_copy(target, entry);
        if (!status) {
            ++counters_.misses;
            return start_entry(target, digest);
        }
    }
    ++counters_.hits;
    counters_.bytes_saved += size;
    *found = true;
    return Status::success();
}

bool StoreFill::entry_offset(const protocol::ContentDigest &digest, uint64_t size, uint64_t *content_offset) {
    StoreEntry entry;
    if (store_.find(digest, size, &entry) != StoreLookup::found) return false;
    *content_offset = entry.content_offset;
    return true;
}

Status StoreFill::offer(const Target &target, const protocol::ContentDigest &digest) {
    ++counters_.misses;
    // The bytes come whatever the store holds. Asked first, so that this worker
    // claims the entry, or the worker of the tenant that claimed it hears that
    // this one waits for it (it commits at once); once the bytes are here, they
    // are swapped for the entry's pages if it is named by then.
    StoreEntry entry;
    (void)store_.find(digest, ggml_nbytes(target.range), &entry, store_channel::kClaim);
    return start_entry(target, digest);
}

bool StoreFill::pages_of_entry_fit(const Mapping *memory, size_t offset, const StoreEntry &entry, size_t *first,
                                   size_t *end) {
    whole_pages(memory, offset, entry.size, first, end);
    const uintptr_t start = reinterpret_cast<uintptr_t>(memory != nullptr ? memory->data() : nullptr) + offset;
    // Pages of the file can only be mapped where the bytes have the same place in a page.
    return *first != *end && entry.content_offset % page_size() == start % page_size();
}

bool StoreFill::map_pages_of_entry(Mapping *memory, size_t offset, const StoreEntry &entry, size_t first, size_t end) {
    return memory->overlay_file(first, end - first, entry.file.get(), entry.content_offset + (first - offset), false)
        .ok();
}

bool StoreFill::fill_in_place(const Target &target, const StoreEntry &entry) {
    if (target.memory == nullptr) return false;
    const size_t offset = offset_in_memory(target);
    size_t first = 0, end = 0;
    if (!pages_of_entry_fit(target.memory, offset, entry, &first, &end)) return false;
    // The partial pages at the two ends are read, the whole ones mapped. Their
    // neighbours are mostly mapped from a file too: a huge page there would be
    // split at once, and hold 2 MiB of memory for a few bytes.
    auto *memory = static_cast<uint8_t *>(target.memory->data());
    const size_t head = first - offset, tail = offset + entry.size - end;
    target.memory->prefer_small_pages(offset, head);
    target.memory->prefer_small_pages(end, tail);
    if (!read_exactly(entry.file.get(), memory + offset, head, entry.content_offset) ||
        !read_exactly(entry.file.get(), memory + end, tail, entry.content_offset + (end - offset))) {
        return false;
    }
    return map_pages_of_entry(target.memory, offset, entry, first, end);
}

Status StoreFill::fill_by_copy(const Target &target, const StoreEntry &entry) {
    Mapping content;
    Status status = Mapping::map(entry.file.get(), entry.content_offset, entry.size, false, &content);
    if (!status) return status;
    ggml_backend_tensor_set(target.range, content.data(), 0, entry.size);
    return Status::success();
}

Status StoreFill::start_entry(const Target &target, const protocol::ContentDigest &digest) {
    Pending pending;
    pending.range = *target.range;
    pending.target = target;
    pending.digest = digest;
    pending.size = ggml_nbytes(target.range);
    pending.phase = reinterpret_cast<uintptr_t>(start_of(target)) % kEntryHeaderSpan;
    pending_ = std::move(pending);
    pending_->target.range = &pending_->range;
    return Status::success();
}

void StoreFill::received(uint64_t buffer, uint64_t offset, uint64_t size, uint64_t sent) {
    if (!pending_ || pending_->target.buffer != buffer) return;
    const uint64_t start = pending_->target.offset, end = start + pending_->size;
    const uint64_t last = size > UINT64_MAX - offset ? UINT64_MAX : offset + size;
    if (offset >= end || last <= start) return;
    const uint64_t inside = std::min(last, end) - std::max(offset, start);
    pending_->received += std::min(inside, sent);
}

Status StoreFill::finish_pending() {
    if (!pending_) return Status::success();
    Pending pending = std::move(*pending_);
    pending_.reset();
    pending.target.range = &pending.range;
    // Offers the guest did not follow with the bytes cost the store nothing: the
    // bytes in the range are not the guest's upload (overlapping or repeated offers).
    if (pending.received < pending.size) return Status::success();
    const Target &target = pending.target;
    if (target.memory != nullptr) {
        Awaiting awaiting;
        awaiting.digest = pending.digest;
        awaiting.memory = target.memory;
        awaiting.buffer = target.buffer;
        awaiting.offset = offset_in_memory(target);
        awaiting.size = awaiting.source_size = pending.size;
        keep_in_memory(std::move(awaiting), pending.phase);
        return Status::success();
    }
    // Device memory: read through the backend, a piece at a time, now. No room in
    // the store (its limit, a full disk) only means the bytes are not kept.
    (void)store_.commit_now(pending.digest, pending.size, pending.phase, [&](uint64_t at, uint8_t *into, size_t size) {
        ggml_backend_tensor_get(target.range, into, at, size);
    });
    return Status::success();
}

void StoreFill::keep_in_memory(Awaiting awaiting, uint64_t phase) {
    // Another worker of the tenant may have written the entry meanwhile (guests
    // that load a model at once), or be writing it: its pages, not a second copy.
    StoreEntry entry;
    const StoreLookup lookup = store_.find(awaiting.digest, awaiting.size, &entry);
    if (lookup == StoreLookup::found) return swap_in(awaiting, entry);
    if (lookup == StoreLookup::in_flight) {
        awaiting.others_until = std::chrono::steady_clock::now() + kWaitForOthers;
        awaiting_.push_back(std::move(awaiting));
        return;
    }
    // The store's thread streams them from the worker's memory, later, on idle
    // cores; at once, here, when others wait for them.
    store_.commit_copy(awaiting.digest, awaiting.size, phase,
                       static_cast<uint8_t *>(awaiting.memory->data()) + awaiting.offset);
    awaiting_.push_back(std::move(awaiting));
    serve_waiters();
}

void StoreFill::poll_others() {
    const auto now = std::chrono::steady_clock::now();
    if (now - last_poll_ < kOthersPoll) return;
    last_poll_ = now;
    for (auto it = awaiting_.begin(); it != awaiting_.end();) {
        if (it->others_until == std::chrono::steady_clock::time_point{}) {
            ++it;
            continue;
        }
        if (it->written) {  // the session's own bytes now: nothing to swap
            it = awaiting_.erase(it);
            continue;
        }
        StoreEntry entry;
        const StoreLookup lookup = store_.find(it->digest, it->size, &entry, it->flags);
        if (lookup == StoreLookup::in_flight && now < it->others_until) {
            ++it;
            continue;
        }
        if (lookup == StoreLookup::found) swap_in(*it, entry);
        it = awaiting_.erase(it);  // the other's commit failed, or takes too long: the session keeps its bytes
    }
}

void StoreFill::stop(std::chrono::milliseconds limit) {
    (void)finish_pending();
    store_.finish_commits(limit);
    awaiting_.clear();
}

void StoreFill::written(uint64_t buffer, uint64_t offset, uint64_t size) {
    if (store_.enabled() && size >= kUploadWrite) store_.note_activity();
    for (Awaiting &awaiting : awaiting_) {
        if (awaiting.buffer != buffer) continue;
        const uint64_t start = awaiting.offset, end = awaiting.offset + awaiting.source_size;
        // `offset` is relative to the buffer, `awaiting.offset` to its mapping: the same
        // for the worker's own buffers, whose mapping starts where the buffer does.
        if (offset < end && (size > UINT64_MAX - offset || offset + size > start)) awaiting.written = true;
    }
}

void StoreFill::forget_buffer(uint64_t buffer) {
    const auto of_buffer = [buffer](const Awaiting &awaiting) { return awaiting.buffer == buffer; };
    if (std::none_of(awaiting_.begin(), awaiting_.end(), of_buffer)) return;
    store_.wait_for_commits();  // none may still be copying from its memory
    awaiting_.erase(std::remove_if(awaiting_.begin(), awaiting_.end(), of_buffer), awaiting_.end());
}

void StoreFill::map_named() {
    if (awaiting_.empty()) return;
    poll_others();
    const bool all_done = !store_.commits_pending();
    for (const protocol::ContentDigest &digest : store_.take_named()) {
        for (const Awaiting &awaiting : awaiting_) {
            if (awaiting.digest == digest && !awaiting.written) swap_in(awaiting);
        }
        awaiting_.erase(
            std::remove_if(awaiting_.begin(), awaiting_.end(), [&](const Awaiting &a) { return a.digest == digest; }),
            awaiting_.end());
    }
    // Entries the store refused are never named.
    if (all_done) {
        awaiting_.erase(
            std::remove_if(awaiting_.begin(), awaiting_.end(),
                           [](const Awaiting &a) { return a.others_until == std::chrono::steady_clock::time_point{}; }),
            awaiting_.end());
    }
}

void StoreFill::swap_in(const Awaiting &awaiting) {
    StoreEntry entry;
    if (store_.find(awaiting.digest, awaiting.size, &entry, awaiting.flags) == StoreLookup::found) {
        swap_in(awaiting, entry);
    }
}

void StoreFill::swap_in(const Awaiting &awaiting, const StoreEntry &entry) {
    if (awaiting.image != nullptr) {
        if (!map_image_pages(awaiting.image, awaiting.size, entry)) awaiting.lost();
        return;
    }
    size_t first = 0, end = 0;
    if (!pages_of_entry_fit(awaiting.memory, awaiting.offset, entry, &first, &end)) return;
    // The same bytes (the range was not written since they were copied): the buffer
    // keeps them, in pages every session of this content shares.
    (void)map_pages_of_entry(awaiting.memory, awaiting.offset, entry, first, end);
}

}  // namespace ggml_remote::host

namespace ggml_remote::host {

bool StoreFill::map_image_pages(uint8_t *image, uint64_t size, const StoreEntry &entry) {
    const size_t page = page_size();
    const size_t whole = static_cast<size_t>(size / page * page);
    if (whole == 0) return true;
    if (reinterpret_cast<uintptr_t>(image) % page != 0 || entry.content_offset % page != 0) return false;
    void *placed = ::mmap(image, whole, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_FIXED, entry.file.get(),
                          static_cast<off_t>(entry.content_offset));
    if (placed != MAP_FAILED) return true;
    // A failed MAP_FIXED may have unmapped the range: never leave a hole in a copy.
    (void)::mmap(image, whole, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    return false;
}

bool StoreFill::fill(const protocol::ContentDigest &key, uint8_t *image, uint64_t size) {
    if (!store_.enabled() || size < page_size()) return false;  // share() keeps no such image: nothing to claim
    StoreEntry entry;
    if (find_or_wait(key, size, &entry, store_channel::kDerived) != StoreLookup::found) return false;
    const size_t whole = static_cast<size_t>(size / page_size() * page_size());
    return read_exactly(entry.file.get(), image + whole, size - whole, entry.content_offset + whole) &&
           map_image_pages(image, size, entry);
}

void StoreFill::share(const protocol::ContentDigest &key, uint8_t *image, uint64_t size, const ImageSource &source,
                      std::function<void()> lost) {
    if (!store_.enabled() || size < page_size()) return;  // nothing to share but a partial page
    Awaiting awaiting;
    awaiting.digest = key;
    awaiting.image = image;
    awaiting.buffer = source.buffer;
    awaiting.offset = source.offset;
    awaiting.size = size;
    awaiting.source_size = source.size;
    awaiting.flags = store_channel::kDerived;
    awaiting.lost = std::move(lost);
    awaiting_.push_back(std::move(awaiting));
    store_.commit_copy(key, size, 0, image, store_channel::kDerived);
    serve_waiters();  // one image at a time, when others wait: never a second copy of them all
}

}  // namespace ggml_remote::host
