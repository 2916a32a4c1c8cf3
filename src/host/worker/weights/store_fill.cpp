#include "host/worker/weights/store_fill.h"

#include <ggml-backend.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

namespace ggml_remote::host {

namespace {

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
    const size_t page = page_size();
    const size_t first_page = (offset + page - 1) / page * page;
    const size_t end_page = (offset + size) / page * page;
    if (end_page > first_page) {
        *first = first_page;
        *end = end_page;
    }
}

Status StoreFill::lookup(const Target &target, const protocol::ContentDigest &digest, bool *found) {
    *found = false;
    const uint64_t size = ggml_nbytes(target.range);
    StoreEntry entry;
    if (!store_.find(digest, size, &entry)) {
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

Status StoreFill::offer(const Target &target, const protocol::ContentDigest &digest) {
    ++counters_.misses;
    StoreEntry entry;
    if (store_.find(digest, ggml_nbytes(target.range), &entry)) return Status::success();
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
    // The partial pages at the two ends are read, the whole ones mapped.
    auto *memory = static_cast<uint8_t *>(target.memory->data());
    const size_t head = first - offset, tail = offset + entry.size - end;
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
        // The store's thread streams them from the worker's memory, later, on idle cores.
        awaiting_.push_back(
            {pending.digest, target.memory, target.buffer, offset_in_memory(target), pending.size, false});
        store_.commit_copy(pending.digest, pending.size, pending.phase, start_of(target));
        return Status::success();
    }
    // Device memory: read through the backend, a piece at a time, now. No room in
    // the store (its limit, a full disk) only means the bytes are not kept.
    (void)store_.commit_now(pending.digest, pending.size, pending.phase, [&](uint64_t at, uint8_t *into, size_t size) {
        ggml_backend_tensor_get(target.range, into, at, size);
    });
    return Status::success();
}

void StoreFill::stop(std::chrono::milliseconds limit) {
    (void)finish_pending();
    store_.finish_commits(limit);
    awaiting_.clear();
}

void StoreFill::written(uint64_t buffer, uint64_t offset, uint64_t size) {
    if (store_.enabled()) store_.note_activity();
    for (Awaiting &awaiting : awaiting_) {
        if (awaiting.buffer != buffer) continue;
        const uint64_t start = awaiting.offset, end = awaiting.offset + awaiting.size;
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
    if (all_done) awaiting_.clear();
}

void StoreFill::swap_in(const Awaiting &awaiting) {
    StoreEntry entry;
    if (!store_.find(awaiting.digest, awaiting.size, &entry)) return;
    size_t first = 0, end = 0;
    if (!pages_of_entry_fit(awaiting.memory, awaiting.offset, entry, &first, &end)) return;
    // The same bytes (the range was not written since they were copied): the buffer
    // keeps them, in pages every session of this content shares.
    (void)map_pages_of_entry(awaiting.memory, awaiting.offset, entry, first, end);
}

}  // namespace ggml_remote::host
