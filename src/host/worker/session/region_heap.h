// RegionHeap: hands out ranges of an ivshmem region's heap for a session's buffers.
// It lives in the worker, never in the region: the guest sees only the offsets it
// is given, and nothing it writes can change what the heap believes is free.
#pragma once

#include <cstdint>
#include <map>

#include "protocol/status.h"

namespace ggml_remote::host {

class RegionHeap {
  public:
    RegionHeap() = default;
    // The heap [offset, offset + size) of a region; every range it hands out starts
    // at a multiple of `alignment` (a power of two) and is a multiple of it long.
    RegionHeap(uint64_t offset, uint64_t size, uint64_t alignment);

    // The start of a free range of at least `size` bytes (the first that fits), now
    // taken; out_of_memory when none is free.
    Status allocate(uint64_t size, uint64_t *offset);
    // Gives back a range allocate() handed out; anything else is refused.
    Status release(uint64_t offset);

    uint64_t bytes_free() const { return bytes_free_; }
    uint64_t size() const { return size_; }

  private:
    uint64_t size_ = 0, alignment_ = 1, bytes_free_ = 0;
    std::map<uint64_t, uint64_t> free_;   // start -> length, never adjacent (merged)
    std::map<uint64_t, uint64_t> taken_;  // start -> length
};

}  // namespace ggml_remote::host
