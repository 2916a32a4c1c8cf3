#include "host/worker/session/region_heap.h"

#include <string>

namespace ggml_remote::host {

RegionHeap::RegionHeap(uint64_t offset, uint64_t size, uint64_t alignment) : alignment_(alignment) {
    const uint64_t start = (offset + alignment - 1) / alignment * alignment;
    const uint64_t end = (offset + size) / alignment * alignment;
    size_ = end > start ? end - start : 0;
    bytes_free_ = size_;
    if (size_ > 0) free_[start] = size_;
}

Status RegionHeap::allocate(uint64_t size, uint64_t *offset) {
    if (size == 0 || size > size_) {
        return error(Code::out_of_memory, "a buffer of " + std::to_string(size) + " bytes does not fit the region's " +
                                              std::to_string(size_) + "-byte heap");
    }
    const uint64_t length = (size + alignment_ - 1) / alignment_ * alignment_;
    for (auto range = free_.begin(); range != free_.end(); ++range) {
        if (range->second < length) continue;
        const uint64_t start = range->first, left = range->second - length;
        free_.erase(range);
        if (left > 0) free_[start + length] = left;
        taken_[start] = length;
        bytes_free_ -= length;
        *offset = start;
        return Status::success();
    }
    return error(Code::out_of_memory, "the region's heap has no free range of " + std::to_string(length) + " bytes (" +
                                          std::to_string(bytes_free_) +
                                          " free in all; a larger "
                                          "ivshmem region holds more)");
}

Status RegionHeap::release(uint64_t offset) {
    const auto taken = taken_.find(offset);
    if (taken == taken_.end()) return error(Code::bad_request, "no heap range starts at " + std::to_string(offset));
    uint64_t start = offset, length = taken->second;
    taken_.erase(taken);
    bytes_free_ += length;
    auto next = free_.lower_bound(start);
    if (next != free_.end() && next->first == start + length) {
        length += next->second;
        next = free_.erase(next);
    }
    if (next != free_.begin()) {
        auto before = std::prev(next);
        if (before->first + before->second == start) {
            before->second += length;
            return Status::success();
        }
    }
    free_[start] = length;
    return Status::success();
}

}  // namespace ggml_remote::host
