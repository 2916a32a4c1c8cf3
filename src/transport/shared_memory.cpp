#include "transport/shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

namespace ggml_remote {

Status create_shared_memory(size_t size, const char *name, UniqueFd *out) {
    UniqueFd fd(::memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING));
    if (!fd.valid()) return error(Code::out_of_memory, std::string("memfd_create: ") + std::strerror(errno));
    if (::ftruncate(fd.get(), static_cast<off_t>(size)) != 0) {
        return error(Code::out_of_memory, "cannot size shared memory of " + std::to_string(size) +
                                              " bytes: " + std::strerror(errno));
    }
    if (::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
        return error(Code::error, std::string("cannot seal shared memory: ") + std::strerror(errno));
    }
    *out = std::move(fd);
    return Status::success();
}

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

Status Mapping::map(int fd, uint64_t offset, size_t size, bool writable, Mapping *out) {
    if (size == 0) return error(Code::bad_request, "cannot map an empty range");
    struct stat st {};
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
    void *base = ::mmap(nullptr, length, writable ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED, fd,
                        static_cast<off_t>(aligned));
    if (base == MAP_FAILED) return error(Code::out_of_memory, std::string("mmap: ") + std::strerror(errno));
    Mapping mapping;
    mapping.base_ = base;
    mapping.length_ = length;
    mapping.data_ = static_cast<uint8_t *>(base) + (offset - aligned);
    mapping.size_ = size;
    *out = std::move(mapping);
    return Status::success();
}

Status Mapping::anonymous(size_t size, Mapping *out) {
    if (size == 0) return error(Code::bad_request, "cannot map an empty range");
    constexpr size_t kHugePage = 2u << 20;
    // Over-reserve, then trim to a huge-page-aligned start.
    size_t length = 0;
    if (__builtin_add_overflow(size, kHugePage, &length)) return error(Code::bad_request, "mapping too large");
    void *reserved = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (reserved == MAP_FAILED) return error(Code::out_of_memory, std::string("mmap: ") + std::strerror(errno));
    const uintptr_t start = reinterpret_cast<uintptr_t>(reserved);
    const uintptr_t aligned = (start + kHugePage - 1) & ~(uintptr_t(kHugePage) - 1);
    const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
    const size_t used = (size + page - 1) / page * page;
    if (aligned > start) ::munmap(reserved, aligned - start);
    const uintptr_t end = start + length;
    if (end > aligned + used) ::munmap(reinterpret_cast<void *>(aligned + used), end - (aligned + used));
    void *base = reinterpret_cast<void *>(aligned);
    if (used >= kHugePage) (void)::madvise(base, used, MADV_HUGEPAGE);  // a hint: "never" mode ignores it
    Mapping mapping;
    mapping.base_ = base;
    mapping.length_ = used;
    mapping.data_ = base;
    mapping.size_ = size;
    *out = std::move(mapping);
    return Status::success();
}

}  // namespace ggml_remote
