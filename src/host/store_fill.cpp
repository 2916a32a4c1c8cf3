#include "host/store_fill.h"

#include <ggml-backend.h>

#include <unistd.h>

#include <cstring>

namespace ggml_remote::host {

namespace {

size_t page_size() { return static_cast<size_t>(::sysconf(_SC_PAGESIZE)); }

uint8_t *start_of(const StoreFill::Target &target) { return static_cast<uint8_t *>(target.range->data); }

size_t offset_in_memory(const StoreFill::Target &target) {
    return static_cast<size_t>(start_of(target) - static_cast<uint8_t *>(target.memory->data()));
}

Status write_all(int fd, const uint8_t *data, size_t size, uint64_t offset) {
    while (size > 0) {
        const ssize_t done = ::pwrite(fd, data, size, static_cast<off_t>(offset));
        if (done <= 0) return error(Code::error, std::string("weight store: write: ") + std::strerror(errno));
        data += done;
        size -= static_cast<size_t>(done);
        offset += static_cast<uint64_t>(done);
    }
    return Status::success();
}

}  // namespace

void StoreFill::whole_pages(const Target &target, size_t *first, size_t *end) {
    *first = *end = 0;
    if (target.memory == nullptr) return;
    const size_t page = page_size();
    const size_t offset = offset_in_memory(target);
    const size_t first_page = (offset + page - 1) / page * page;
    const size_t end_page = (offset + ggml_nbytes(target.range)) / page * page;
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

bool StoreFill::fill_in_place(const Target &target, const StoreEntry &entry) {
    size_t first = 0, end = 0;
    whole_pages(target, &first, &end);
    const size_t page = page_size();
    // Pages of the file can only be mapped where the bytes have the same place in a page.
    if (first == end || entry.content_offset % page != reinterpret_cast<uintptr_t>(start_of(target)) % page) {
        return false;
    }
    Mapping content;
    if (!Mapping::map(entry.file.get(), entry.content_offset, entry.size, false, &content)) return false;
    const size_t offset = offset_in_memory(target);
    const auto *bytes = static_cast<const uint8_t *>(content.data());
    auto *memory = static_cast<uint8_t *>(target.memory->data());
    std::memcpy(memory + offset, bytes, first - offset);
    std::memcpy(memory + end, bytes + (end - offset), offset + entry.size - end);
    return target.memory
        ->overlay_file(first, end - first, entry.file.get(), entry.content_offset + (first - offset), false)
        .ok();
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
    pending.target.range = nullptr;  // set below, to the copy
    const uint64_t phase = reinterpret_cast<uintptr_t>(start_of(target)) % kEntryHeaderSpan;
    // No room for the entry (a full disk) only means the bytes are not kept.
    if (!store_.create(digest, ggml_nbytes(target.range), phase, &pending.entry)) return Status::success();
    size_t first = 0, end = 0;
    whole_pages(target, &first, &end);
    if (first != end) {
        const size_t offset = offset_in_memory(target);
        pending.in_place = target.memory
                               ->overlay_file(first, end - first, pending.entry.file.get(),
                                              pending.entry.content_offset + (first - offset), true)
                               .ok();
    }
    pending_ = std::move(pending);
    pending_->target.range = &pending_->range;
    return Status::success();
}

Status StoreFill::finish_pending() {
    if (!pending_) return Status::success();
    Pending pending = std::move(*pending_);
    pending_.reset();
    pending.target.range = &pending.range;
    const Target &target = pending.target;
    NewEntry &entry = pending.entry;
    Status status;
    if (pending.in_place) {
        // The whole pages are the entry's already; the partial ones at the ends are copied,
        // and the buffer's view of the entry becomes copy-on-write: later writes stay its own.
        size_t first = 0, end = 0;
        whole_pages(target, &first, &end);
        const size_t offset = offset_in_memory(target);
        const uint8_t *memory = static_cast<const uint8_t *>(target.memory->data());
        status = write_all(entry.file.get(), memory + offset, first - offset, entry.content_offset);
        if (status) {
            status = write_all(entry.file.get(), memory + end, offset + entry.size - end,
                               entry.content_offset + (end - offset));
        }
        if (status) {
            status = target.memory->overlay_file(first, end - first, entry.file.get(),
                                                 entry.content_offset + (first - offset), false);
        }
    } else {
        Mapping file_view;
        status = Mapping::map(entry.file.get(), entry.content_offset, entry.size, true, &file_view);
        if (status) ggml_backend_tensor_get(target.range, file_view.data(), 0, entry.size);
    }
    if (!status) {
        store_.abandon(std::move(entry));
        return status;
    }
    store_.commit(std::move(entry));
    return Status::success();
}

}  // namespace ggml_remote::host
