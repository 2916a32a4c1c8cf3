#include "transport/shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>

namespace ggml_remote {

Status create_shared_memory(size_t size, const char *name, UniqueFd *out) {
    UniqueFd fd(::memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING));
    if (!fd.valid()) return error(Code::out_of_memory, std::string("memfd_create: ") + std::strerror(errno));
    if (::ftruncate(fd.get(), static_cast<off_t>(size)) != 0) {
        return error(Code::out_of_memory,
                     "cannot size shared memory of " + std::to_string(size) + " bytes: " + std::strerror(errno));
    }
    if (::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
        return error(Code::error, std::string("cannot seal shared memory: ") + std::strerror(errno));
    }
    *out = std::move(fd);
    return Status::success();
}

Status check_sealed_memory(int fd, uint64_t size) {
    struct stat info;
    if (::fstat(fd, &info) != 0 || info.st_size < 0 || static_cast<uint64_t>(info.st_size) < size) {
        return error(Code::bad_request, "the peer's memory file is shorter than " + std::to_string(size) + " bytes");
    }
    const int seals = ::fcntl(fd, F_GET_SEALS);
    if (seals < 0 || (seals & F_SEAL_SHRINK) == 0) {
        return error(Code::bad_request, "the peer's memory file is not sealed against shrinking");
    }
    return Status::success();
}

namespace {

// Address space with no access on both sides of every mapping: a kernel that runs
// off a buffer's end by less than kGuardBytes faults (ending only its own worker)
// instead of reading or writing whatever the process mapped next to it.
constexpr size_t kGuardBytes = 2u << 20;

struct GuardedRange {
    void *base = nullptr;  // the whole reservation, guards included
    size_t length = 0;
    void *inner = nullptr;  // with length bytes free for MAP_FIXED
};

// Where huge pages can back a mapping: its address and its file offset must agree
// modulo 2 MiB (the kernel maps a model file read back into the page cache in
// 2 MiB folios with huge pages only then, as it does for a plain mmap).
constexpr size_t kHugePageBytes = 2u << 20;

// Reserves guarded address space whose inner start is `phase` past a multiple of
// `alignment`.
Status reserve_guarded(size_t length, size_t alignment, size_t phase, GuardedRange *range) {
    size_t total = 0;
    if (__builtin_add_overflow(length, 2 * kGuardBytes + 2 * alignment, &total)) {
        return error(Code::bad_request, "mapping too large");
    }
    void *reserved = ::mmap(nullptr, total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (reserved == MAP_FAILED) return error(Code::out_of_memory, std::string("mmap: ") + std::strerror(errno));
    const uintptr_t start = reinterpret_cast<uintptr_t>(reserved);
    const uintptr_t inner = (start + kGuardBytes + alignment - 1) / alignment * alignment + phase;
    // Keep exactly one guard on each side; give the rest of the slack back.
    const uintptr_t head = inner - kGuardBytes, tail = inner + length + kGuardBytes, end = start + total;
    if (head > start) ::munmap(reserved, head - start);
    if (end > tail) ::munmap(reinterpret_cast<void *>(tail), end - tail);
    range->base = reinterpret_cast<void *>(head);
    range->length = tail - head;
    range->inner = reinterpret_cast<void *>(inner);
    return Status::success();
}

}  // namespace

Mapping::Mapping(Mapping &&other) noexcept
    : base_(std::exchange(other.base_, nullptr)),
      length_(std::exchange(other.length_, 0)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

Mapping &Mapping::operator=(Mapping &&other) noexcept {
    if (this != &other) {
        this->~Mapping();
        new (this) Mapping(std::move(other));
    }
    return *this;
}

Mapping::~Mapping() {
    if (base_ != nullptr) ::munmap(base_, length_);
}

Status Mapping::map_guarded(size_t length, size_t phase, int prot, int flags, int fd, uint64_t file_offset) {
    GuardedRange range;
    if (Status s = reserve_guarded(length, kHugePageBytes, phase, &range); !s) return s;
    if (::mmap(range.inner, length, prot, flags | MAP_FIXED, fd, static_cast<off_t>(file_offset)) == MAP_FAILED) {
        const int saved = errno;
        ::munmap(range.base, range.length);
        return error(Code::out_of_memory, std::string("mmap: ") + std::strerror(saved));
    }
    base_ = range.base;
    length_ = range.length;
    data_ = range.inner;
    return Status::success();
}

Status Mapping::map(int fd, uint64_t offset, size_t size, bool writable, Mapping *out) {
    if (size == 0) return error(Code::bad_request, "cannot map an empty range");
    struct stat st{};
    if (::fstat(fd, &st) != 0) return error(Code::bad_request, std::string("fstat: ") + std::strerror(errno));
    if (!S_ISREG(st.st_mode)) return error(Code::bad_request, "the descriptor is not a regular file");
    uint64_t end = 0;
    if (__builtin_add_overflow(offset, size, &end) || end > static_cast<uint64_t>(st.st_size)) {
        return error(Code::bad_request, "range [" + std::to_string(offset) + ", +" + std::to_string(size) +
                                            ") lies outside the file of " + std::to_string(st.st_size) + " bytes");
    }
    const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
    const uint64_t aligned = offset / page * page;
    const size_t length = static_cast<size_t>(end - aligned);
    Mapping mapping;
    Status status = mapping.map_guarded(length, aligned % kHugePageBytes, writable ? PROT_READ | PROT_WRITE : PROT_READ,
                                        MAP_SHARED, fd, aligned);
    if (!status) return status;
    mapping.data_ = static_cast<uint8_t *>(mapping.data_) + (offset - aligned);
    mapping.size_ = size;
    *out = std::move(mapping);
    return Status::success();
}

Status Mapping::overlay_file(size_t offset, size_t length, int fd, uint64_t file_offset, bool shared) {
    const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
    auto *at = static_cast<uint8_t *>(data_) + offset;
    uint64_t end = 0;
    if (reinterpret_cast<uintptr_t>(at) % page != 0 || length % page != 0 || file_offset % page != 0 ||
        __builtin_add_overflow(offset, length, &end) || end > size_ || length == 0) {
        return error(Code::bad_request, "overlay outside the mapping or not page-aligned");
    }
    void *placed = ::mmap(at, length, PROT_READ | PROT_WRITE, (shared ? MAP_SHARED : MAP_PRIVATE) | MAP_FIXED, fd,
                          static_cast<off_t>(file_offset));
    if (placed == MAP_FAILED) {
        const int saved = errno;
        // A failed MAP_FIXED may have unmapped the range: never leave a hole in a buffer.
        void *refilled = ::mmap(at, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
        // Should even that fail, the hole stays: a use of it ends only this worker.
        const char *hole = refilled == MAP_FAILED ? " (and the range could not be refilled)" : "";
        return error(Code::error, std::string("mmap: ") + std::strerror(saved) + hole);
    }
    return Status::success();
}

void Mapping::prefer_small_pages(size_t offset, size_t length) {
    if (length == 0 || offset > size_ || length > size_ - offset) return;
    const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
    const auto start = reinterpret_cast<uintptr_t>(data_) + offset;
    const uintptr_t first = start / page * page, last = (start + length + page - 1) / page * page;
    (void)::madvise(reinterpret_cast<void *>(first), last - first, MADV_NOHUGEPAGE);  // a hint
}

Status Mapping::zero(size_t offset, size_t length) {
    uint64_t end = 0;
    if (__builtin_add_overflow(offset, length, &end) || end > size_) {
        return error(Code::bad_request, "zero: outside the mapping");
    }
    const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
    const auto start = reinterpret_cast<uintptr_t>(data_) + offset, stop = start + length;
    const uintptr_t first = (start + page - 1) / page * page, last = stop / page * page;
    if (last <= first) {
        std::memset(reinterpret_cast<void *>(start), 0, length);
        return Status::success();
    }
    std::memset(reinterpret_cast<void *>(start), 0, first - start);
    std::memset(reinterpret_cast<void *>(last), 0, stop - last);
    void *placed = ::mmap(reinterpret_cast<void *>(first), last - first, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    if (placed == MAP_FAILED) {
        std::memset(reinterpret_cast<void *>(first), 0, last - first);  // the range is as it was: cleared in place
        return Status::success();
    }
    // Small pages: a huge one would be made whole by a write of a few bytes.
    (void)::madvise(placed, last - first, MADV_NOHUGEPAGE);
    return Status::success();
}

Status Mapping::anonymous(size_t size, Mapping *out, size_t phase_in_page) {
    if (size == 0) return error(Code::bad_request, "cannot map an empty range");
    const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
    if (size > SIZE_MAX / 2) return error(Code::bad_request, "mapping too large");
    if (phase_in_page >= page) return error(Code::bad_request, "the phase lies outside a page");
    const size_t used = (phase_in_page + size + page - 1) / page * page;
    Mapping mapping;
    Status status = mapping.map_guarded(used, 0, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (!status) return status;
    if (used >= kHugePageBytes) (void)::madvise(mapping.data_, used, MADV_HUGEPAGE);  // a hint: "never" mode ignores it
    mapping.data_ = static_cast<uint8_t *>(mapping.data_) + phase_in_page;
    mapping.size_ = size;
    *out = std::move(mapping);
    return Status::success();
}

}  // namespace ggml_remote
