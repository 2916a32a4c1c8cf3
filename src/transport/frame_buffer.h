// FrameBuffer: the bytes of one received frame, in memory that grows only as the
// peer's bytes arrive and is given back after a large frame.
//
// A frame header announces its payload's size before any of it comes. Allocating
// that size at once would let a peer that sends 16 bytes make the receiver commit
// (and, with std::vector, zero-fill) up to the message size limit, and keeping the
// capacity afterwards would hold it for the rest of the session.
#pragma once

#include <cstddef>
#include <cstdint>

#include "protocol/status.h"

namespace ggml_remote {

class FrameBuffer {
  public:
    // Capacity kept between frames; a larger one is given back by release_excess().
    static constexpr size_t kKeptBytes = 1 << 20;
    // The first step of growth: frames up to this size take one read.
    static constexpr size_t kFirstStep = 64 * 1024;

    FrameBuffer() = default;
    ~FrameBuffer();
    FrameBuffer(const FrameBuffer &) = delete;
    FrameBuffer &operator=(const FrameBuffer &) = delete;

    uint8_t *data() { return data_; }
    const uint8_t *data() const { return data_; }
    size_t size() const { return size_; }
    size_t capacity() const { return capacity_; }

    // Makes the buffer `size` bytes long, keeping its first bytes; grows the
    // capacity to at least `size` (an error when the memory is not there).
    Status resize(size_t size);
    // The size that a buffer holding `received` bytes of a `total`-byte payload
    // grows to next: double what came, at least kFirstStep, at most `total`.
    static size_t next_step(size_t received, size_t total);
    // Gives back capacity beyond kKeptBytes (after a large frame was handled).
    void release_excess();

  private:
    Status reserve(size_t capacity);

    uint8_t *data_ = nullptr;  // an anonymous mapping of capacity_ bytes, or null
    size_t size_ = 0;
    size_t capacity_ = 0;
};

}  // namespace ggml_remote
