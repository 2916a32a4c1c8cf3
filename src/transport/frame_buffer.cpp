#include "transport/frame_buffer.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

namespace ggml_remote {

namespace {

size_t page_size() { return static_cast<size_t>(::sysconf(_SC_PAGESIZE)); }

}  // namespace

FrameBuffer::~FrameBuffer() {
    if (data_ != nullptr) ::munmap(data_, capacity_);
}

size_t FrameBuffer::next_step(size_t received, size_t total) {
    const size_t doubled = received > total / 2 ? total : 2 * received;
    return std::min(total, std::max(doubled, kFirstStep));
}

Status FrameBuffer::resize(size_t size) {
    if (size > capacity_) {
        Status status = reserve(size);
        if (!status) return status;
    }
    size_ = size;
    return Status::success();
}

Status FrameBuffer::reserve(size_t capacity) {
    const size_t page = page_size();
    if (capacity > SIZE_MAX - page) return error(Code::out_of_memory, "frame buffer: size overflow");
    const size_t rounded = (capacity + page - 1) / page * page;
    // Fresh pages cost nothing until written; mremap moves the old ones without a copy.
    void *grown = data_ == nullptr
                      ? ::mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
                      : ::mremap(data_, capacity_, rounded, MREMAP_MAYMOVE);
    if (grown == MAP_FAILED) {
        return error(Code::out_of_memory,
                     "frame buffer of " + std::to_string(rounded) + " bytes: " + std::strerror(errno));
    }
    data_ = static_cast<uint8_t *>(grown);
    capacity_ = rounded;
    return Status::success();
}

void FrameBuffer::release_excess() {
    if (capacity_ <= kKeptBytes) return;
    ::munmap(data_ + kKeptBytes, capacity_ - kKeptBytes);
    capacity_ = kKeptBytes;
    size_ = std::min(size_, capacity_);
}

}  // namespace ggml_remote
