// Session: the handlers of buffers (allocation, freeing, usage) and of the weight store.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "host/worker/session/session.h"

namespace ggml_remote::host {

using namespace protocol;

namespace {

ContentDigest digest_of(const uint8_t (&bytes)[16]) {
    ContentDigest digest;
    std::memcpy(digest.bytes, bytes, sizeof(digest.bytes));
    return digest;
}

}  // namespace

Status Session::handle(const BufferAlloc::Request &request, Call<BufferAlloc> &call) {
    ggml_backend_dev_t device = nullptr;
    if (Status s = device_at(request.device, &device); !s) return s;
    if (buffers_.size() >= limits_.max_buffers) return over_cap(buffers_.size(), "buffers", "--max-buffers");
    if (!fits_quota(request.size)) {
        return error(Code::limit_exceeded, "allocating " + std::to_string(request.size) +
                                               " bytes would exceed the session's memory quota of " +
                                               std::to_string(limits_.memory_quota) + " bytes");
    }
    size_t free_memory = 0, total_memory = 0;
    ggml_backend_dev_memory(device, &free_memory, &total_memory);
    // A clear refusal, before any driver tries (0: the device does not say).
    if (total_memory != 0 && request.size > total_memory) {
        return error(Code::out_of_memory, "buffer of " + std::to_string(request.size) + " bytes is larger than " +
                                              ggml_backend_dev_name(device) + "'s " + std::to_string(total_memory) +
                                              " bytes of memory");
    }
    ggml_backend_buffer_type_t buft = ggml_backend_dev_buffer_type(device);
    if (request.size > ggml_backend_buft_get_max_size(buft)) {
        return error(Code::bad_request,
                     "buffer of " + std::to_string(request.size) + " bytes is larger than the device's maximum");
    }
    SessionBuffer record;
    if (shared_memory_ && device_shares_memory(device)) {
        if (Status s = allocate_shared(device, request.size, &record, &call.reply_tail.fd); !s) return s;
        record.shared_with_guest = true;
        call.reply.shared = BufferAlloc::kSharedFile;
    } else if (region_heap_granted_ && device_shares_memory(device)) {
        if (Status s = allocate_in_region(device, request.size, &record); !s) return s;
        record.shared_with_guest = true;
        call.reply.shared = BufferAlloc::kSharedInRegion;
        append_pod(call.reply_tail.owned, record.region_offset);
    } else if (device_shares_memory(device)) {
        if (Status s = allocate_private(device, request.size, &record); !s) return s;
        record.private_memory = true;
        record.placed = false;
    } else {
        ggml_backend_buffer_t buffer = ggml_backend_buft_alloc_buffer(buft, request.size);
        if (buffer == nullptr) {
            return error(Code::out_of_memory,
                         "the host device could not allocate " + std::to_string(request.size) + " bytes");
        }
        record.buffer.reset(buffer);
    }
    record.device = request.device;
    record.size = ggml_backend_buffer_get_size(record.buffer.get());
    record.charged = record.size;
    memory_in_use_ += record.charged;
    call.reply.size = record.size;
    call.reply.buffer = buffers_.insert(std::move(record));
    return Status::success();
}

Status Session::handle(const BufferFromFile::Request &request, Call<BufferFromFile> &call) {
    ggml_backend_dev_t device = nullptr;
    if (Status s = device_at(request.device, &device); !s) return s;
    if (!shared_memory_ || !device_shares_memory(device)) {
        return error(Code::unsupported, "buffer_from_file needs a shared-memory session on a CPU-memory device");
    }
    if (call.fds.size() != 1) {
        return error(Code::bad_request, "buffer_from_file needs exactly one file descriptor");
    }
    if (buffers_.size() >= limits_.max_buffers) return over_cap(buffers_.size(), "buffers", "--max-buffers");
    if (request.size > limits_.mapped_file_quota - mapped_file_bytes_) {
        return error(Code::limit_exceeded, "mapping " + std::to_string(request.size) +
                                               " bytes of the guest's file would exceed the "
                                               "session's mapped-file quota of " +
                                               std::to_string(limits_.mapped_file_quota) +
                                               " bytes (--mapped-file-quota; " + std::to_string(mapped_file_bytes_) +
                                               " mapped)");
    }
    UniqueFd file = std::move(call.fds.front());
    call.fds.clear();
    SessionBuffer record;
    // Read-only and shared: the host reads the very pages of the guest's file.
    if (Status s = Mapping::map(file.get(), request.file_offset, request.size, false, &record.mapping); !s) {
        return error(s.code(), "cannot map the guest's file: " + s.message());
    }
    const size_t alignment = ggml_backend_buft_get_alignment(ggml_backend_dev_buffer_type(device));
    if (reinterpret_cast<uintptr_t>(record.mapping.data()) % alignment != 0) {
        return error(Code::bad_request, "file offset " + std::to_string(request.file_offset) +
                                            " is not aligned to the device's " + std::to_string(alignment) + " bytes");
    }
    ggml_backend_buffer_t buffer = ggml_backend_dev_buffer_from_host_ptr(
        device, record.mapping.data(), record.mapping.size(),
        std::min(uint64_t{request.max_tensor_size}, uint64_t{request.size}));  // packed: copies, not references
    if (buffer == nullptr) return error(Code::error, "the host device cannot wrap the mapped file");
    record.buffer.reset(buffer);
    record.device = request.device;
    record.size = request.size;
    record.writable = false;
    record.mapped = request.size;
    mapped_file_bytes_ += record.mapped;
    call.reply.buffer = buffers_.insert(std::move(record));
    return Status::success();
}

namespace {

// A memory file the guest hands back must be one the host may map for good: a
// memory file (only those take seals) that can neither shrink, which would make
// the host's accesses fault, nor grow, and exactly the size asked for.
Status check_sealed_memory_file(int fd, uint64_t size) {
    const int seals = ::fcntl(fd, F_GET_SEALS);
    if (seals < 0)
        return error(Code::bad_request, std::string("buffer_adopt: not a memory file: ") + std::strerror(errno));
    constexpr int kNeeded = F_SEAL_SHRINK | F_SEAL_GROW;
    if ((seals & kNeeded) != kNeeded) {
        return error(Code::bad_request, "buffer_adopt: the memory file is not sealed against shrinking and growing");
    }
    struct stat st{};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || static_cast<uint64_t>(st.st_size) != size) {
        return error(Code::bad_request, "buffer_adopt: the memory file is not " + std::to_string(size) + " bytes long");
    }
    return Status::success();
}

}  // namespace

Status Session::handle(const BufferAdopt::Request &request, Call<BufferAdopt> &call) {
    ggml_backend_dev_t device = nullptr;
    if (Status s = device_at(request.device, &device); !s) return s;
    if (!shared_memory_ || !device_shares_memory(device)) {
        return error(Code::unsupported, "buffer_adopt needs a shared-memory session on a CPU-memory device");
    }
    if (call.fds.size() != 1) return error(Code::bad_request, "buffer_adopt needs exactly one file descriptor");
    if (buffers_.size() >= limits_.max_buffers) return over_cap(buffers_.size(), "buffers", "--max-buffers");
    if (request.size == 0 || !fits_quota(request.size)) {
        return error(Code::limit_exceeded, "adopting " + std::to_string(request.size) +
                                               " bytes would exceed the session's memory quota of " +
                                               std::to_string(limits_.memory_quota) + " bytes");
    }
    UniqueFd file = std::move(call.fds.front());
    call.fds.clear();
    if (Status s = check_sealed_memory_file(file.get(), request.size); !s) return s;
    SessionBuffer record;
    if (Status s = Mapping::map(file.get(), 0, request.size, true, &record.mapping); !s) return s;
    ggml_backend_buffer_t buffer =
        ggml_backend_dev_buffer_from_host_ptr(device, record.mapping.data(), record.mapping.size(), request.size);
    if (buffer == nullptr) return error(Code::error, "the host device cannot use shared memory");
    record.buffer.reset(buffer);
    record.shared_with_guest = true;
    record.device = request.device;
    record.size = request.size;
    record.charged = record.size;
    memory_in_use_ += record.charged;
    call.reply.buffer = buffers_.insert(std::move(record));
    return Status::success();
}

Status Session::handle(const BufferFree::Request &request, Call<BufferFree> &) {
    SessionBuffer *buffer = nullptr;
    if (Status s = buffer_at(request.buffer, &buffer); !s) return s;
    memory_in_use_ -= buffer->charged;
    mapped_file_bytes_ -= buffer->mapped;
    if (buffer->in_region) (void)region_heap_.release(buffer->region_offset);
    // Kept graphs may point into the buffer (or its repacked weights); the guest forgets them too.
    graph_slots_.clear_all();
    // The store's thread may be copying from the buffer or its copies: it is done first.
    store_fill_.forget_buffer(request.buffer);
    memory_in_use_ -= weight_repack_.forget(request.buffer);
    weight_upload_.forget(buffer->upload, buffer->size);
    buffers_.erase(request.buffer);
    return Status::success();
}

Status Session::handle(const BufferClear::Request &request, Call<BufferClear> &) {
    SessionBuffer *buffer = nullptr;
    if (Status s = buffer_at(request.buffer, &buffer); !s) return s;
    return write_range({request.buffer, 0, buffer->size}, [&](ggml_tensor *bytes) {
        // Zero in the worker's own memory: fresh pages, resident once written.
        if (request.value == 0 && buffer->private_memory) return buffer->mapping.zero(0, buffer->size);
        ggml_backend_buffer_clear(bytes->buffer, request.value);
        return Status::success();
    });
}

Status Session::handle(const BufferReset::Request &request, Call<BufferReset> &) {
    SessionBuffer *buffer = nullptr;
    if (Status s = buffer_at(request.buffer, &buffer); !s) return s;
    ggml_backend_buffer_reset(buffer->buffer.get());
    return Status::success();
}

Status Session::handle(const BufferSetUsage::Request &request, Call<BufferSetUsage> &) {
    SessionBuffer *buffer = nullptr;
    if (Status s = buffer_at(request.buffer, &buffer); !s) return s;
    if (request.usage > GGML_BACKEND_BUFFER_USAGE_COMPUTE) {
        return error(Code::bad_request, "unknown buffer usage " + std::to_string(request.usage));
    }
    const auto usage = static_cast<ggml_backend_buffer_usage>(request.usage);
    ggml_backend_buffer_set_usage(buffer->buffer.get(), usage);
    buffer->weights = usage == GGML_BACKEND_BUFFER_USAGE_WEIGHTS;
    // A read-only buffer is the guest's own file, mapped: it has nothing to upload.
    weight_upload_.set_weights(&buffer->upload, buffer->size, buffer->weights && buffer->writable);
    return Status::success();
}

Status Session::handle(const BufferWritten::Request &request, Call<BufferWritten> &) {
    // The guest wrote the bytes itself: the host only checks where they are.
    const BufferRange range{request.buffer, request.offset, request.size};
    SessionBuffer *buffer = nullptr;
    if (Status s = buffer_range(range, Access::read, &buffer); !s) return s;
    bytes_written(request.buffer, request.offset, request.size);
    count_guest_bytes(request.buffer, request.size);
    return Status::success();
}

Status Session::handle(const WeightLookup::Request &request, Call<WeightLookup> &call) {
    Mapping *memory = nullptr;
    if (Status s = check_store_request(request.range, "weight_lookup", &memory); !s) return s;
    // (*memory is the buffer's mapping: moved or not, the same object.)
    place_like_entry(buffers_.find(request.range.buffer), request.range, digest_of(request.digest));
    // A hit fills the range from the store.
    const uint64_t saved_before = store_fill_.counters().bytes_saved;
    Status status = write_range(request.range, [&](ggml_tensor *bytes) {
        bool found = false;
        Status looked_up = store_fill_.lookup({bytes, memory, request.range.buffer, request.range.offset},
                                              digest_of(request.digest), &found);
        call.reply.found = found ? 1 : 0;
        return looked_up;
    });
    // What the store counts as saved is what the upload found (a model library's
    // hits are the store's too, from here).
    SessionBuffer *buffer = buffers_.find(request.range.buffer);
    if (status && buffer != nullptr) {
        weight_upload_.count_found(&buffer->upload, buffer->size, store_fill_.counters().bytes_saved - saved_before);
    }
    return status;
}

Status Session::handle(const WeightOffer::Request &request, Call<WeightOffer> &) {
    Mapping *memory = nullptr;
    if (Status s = check_store_request(request.range, "weight_offer", &memory); !s) return s;
    place_like_entry(buffers_.find(request.range.buffer), request.range, digest_of(request.digest));
    // The guest's bytes for the range come next (SetTensor).
    return write_range(request.range, [&](ggml_tensor *bytes) {
        return store_fill_.offer({bytes, memory, request.range.buffer, request.range.offset},
                                 digest_of(request.digest));
    });
}

Status Session::check_store_request(const BufferRange &range, const char *command, Mapping **memory) {
    if (!weight_store_granted_) {
        return error(Code::unsupported, std::string(command) + ": this session has no weight store");
    }
    SessionBuffer *buffer = nullptr;
    if (Status s = buffer_at(range.buffer, &buffer); !s) return s;
    if (buffer->shared_with_guest) {
        return error(Code::bad_request, std::string(command) + ": buffer " + std::to_string(range.buffer) +
                                            " is shared memory, which the guest writes itself");
    }
    if (range.size < kMinWeightLookupBytes) {
        return error(Code::bad_request, std::string(command) + ": " + std::to_string(range.size) +
                                            " bytes is below the store's minimum of " +
                                            std::to_string(kMinWeightLookupBytes));
    }
    *memory = buffer->private_memory ? &buffer->mapping : nullptr;
    return Status::success();
}

bool Session::fits_quota(uint64_t size) const {
    return limits_.memory_quota == 0 || (size <= limits_.memory_quota && memory_in_use_ <= limits_.memory_quota - size);
}

bool Session::device_shares_memory(ggml_backend_dev_t device) const {
    ggml_backend_dev_props props{};
    ggml_backend_dev_get_props(device, &props);
    return props.caps.buffer_from_host_ptr && ggml_backend_buft_is_host(ggml_backend_dev_buffer_type(device));
}

Status Session::allocate_shared(ggml_backend_dev_t device, uint64_t size, SessionBuffer *record, UniqueFd *fd) {
    if (Status s = create_shared_memory(size, "ggml-remote-buffer", fd); !s) return s;
    if (Status s = Mapping::map(fd->get(), 0, size, true, &record->mapping); !s) return s;
    // The device computes in place in the shared pages.
    ggml_backend_buffer_t buffer =
        ggml_backend_dev_buffer_from_host_ptr(device, record->mapping.data(), record->mapping.size(), size);
    if (buffer == nullptr) return error(Code::error, "the host device cannot use shared memory");
    record->buffer.reset(buffer);
    return Status::success();
}

void Session::use_region_heap(std::shared_ptr<const Mapping> region, uint64_t heap_offset, uint64_t heap_size) {
    region_ = std::move(region);
    region_heap_ = RegionHeap(heap_offset, heap_size, BufferAlloc::kRegionAlignment);
}

Status Session::allocate_in_region(ggml_backend_dev_t device, uint64_t size, SessionBuffer *record) {
    uint64_t offset = 0;
    if (Status s = region_heap_.allocate(size, &offset); !s) return s;
    // The device computes in place, in the pages the guest writes.
    ggml_backend_buffer_t buffer = ggml_backend_dev_buffer_from_host_ptr(
        device, static_cast<uint8_t *>(region_->data()) + offset, static_cast<size_t>(size), size);
    if (buffer == nullptr) {
        (void)region_heap_.release(offset);
        return error(Code::error, "the host device cannot use the region's memory");
    }
    record->buffer.reset(buffer);
    record->in_region = true;
    record->region_offset = offset;
    return Status::success();
}

Status Session::allocate_private(ggml_backend_dev_t device, uint64_t size, SessionBuffer *record,
                                 size_t phase_in_page) {
    if (Status s = Mapping::anonymous(size, &record->mapping, phase_in_page); !s) return s;
    ggml_backend_buffer_t buffer =
        ggml_backend_dev_buffer_from_host_ptr(device, record->mapping.data(), record->mapping.size(), size);
    if (buffer == nullptr) {
        return error(Code::out_of_memory, "the host device could not allocate " + std::to_string(size) + " bytes");
    }
    record->buffer.reset(buffer);
    return Status::success();
}

void Session::note_before_placed(SessionBuffer *buffer, const BufferRange &range, bool write) {
    // The guest's small tensors (norms) come before its first large one.
    constexpr size_t kMaxEarlyWrites = 64;
    constexpr uint64_t kMaxEarlyBytes = uint64_t(1) << 20;
    uint64_t written = 0;
    for (const BufferRange &early : buffer->early_writes) written += early.size;
    if (write && buffer->early_writes.size() < kMaxEarlyWrites && range.size <= kMaxEarlyBytes - written) {
        buffer->early_writes.push_back(range);
        return;
    }
    buffer->placed = true;
    buffer->early_writes = {};
}

void Session::place_like_entry(SessionBuffer *buffer, const BufferRange &range, const ContentDigest &digest) {
    if (buffer->placed) return;
    buffer->placed = true;
    const std::vector<BufferRange> written = std::exchange(buffer->early_writes, {});
    uint64_t content_offset = 0;
    if (!store_fill_.entry_offset(digest, range.size, &content_offset)) return;
    const auto page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
    const auto phase = static_cast<size_t>((content_offset - range.offset) % page);  // wraps: page is a power of 2
    ggml_backend_dev_t device = devices_[buffer->device];
    const size_t alignment = ggml_backend_buft_get_alignment(ggml_backend_dev_buffer_type(device));
    if (phase == reinterpret_cast<uintptr_t>(buffer->mapping.data()) % page || phase % alignment != 0) return;
    SessionBuffer moved;
    if (!allocate_private(device, buffer->size, &moved, phase)) return;
    // Only the written ranges hold anything but zeros (checked when written).
    for (const BufferRange &bytes : written) {
        std::memcpy(static_cast<uint8_t *>(moved.mapping.data()) + bytes.offset,
                    static_cast<const uint8_t *>(buffer->mapping.data()) + bytes.offset, bytes.size);
    }
    ggml_backend_buffer_set_usage(moved.buffer.get(), ggml_backend_buffer_get_usage(buffer->buffer.get()));
    buffer->buffer = std::move(moved.buffer);  // first: the old buffer lies over the old mapping
    buffer->mapping = std::move(moved.mapping);
}

}  // namespace ggml_remote::host
