// ContentDigest: what names a weight tensor's bytes in the weight store.
//
// XXH3-128 over fixed 8 MiB blocks, then over the blocks' digests with the size
// as the seed: a tree, so that one tensor can be hashed on several cores and any
// number of threads gives the same digest. XXH3 is fast (memory speed here) but
// not collision resistant: a digest names content for guests of one tenant, who
// could only fool themselves (see docs/SECURITY.md, "Weight store").
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ggml_remote::protocol {

struct ContentDigest {
    uint8_t bytes[16] = {};

    bool operator==(const ContentDigest &other) const;
    bool operator!=(const ContentDigest &other) const { return !(*this == other); }
    bool operator<(const ContentDigest &other) const;
    std::string hex() const;  // 32 lowercase hex digits
};

constexpr size_t kDigestBlockSize = size_t(8) << 20;

// The digest of `size` bytes, hashed on up to `threads` threads (1: this one).
ContentDigest content_digest(const void *data, size_t size, unsigned threads = 1);

// The same digest from bytes read a block at a time (a file read by pread is
// never mapped, so a file that shrinks cannot fault its reader).
class ContentDigestBlocks {
  public:
    // The next kDigestBlockSize bytes, or fewer for the last block.
    void add(const void *block, size_t size);
    ContentDigest finish() const;

  private:
    std::vector<uint8_t> block_digests_;
    uint64_t size_ = 0;
};

}  // namespace ggml_remote::protocol
