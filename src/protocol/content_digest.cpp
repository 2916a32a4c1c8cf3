#include "protocol/content_digest.h"

#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

#include "protocol/printable.h"

namespace ggml_remote::protocol {

namespace {

void store(const XXH128_hash_t &hash, uint8_t *out) {
    XXH128_canonical_t canonical;
    XXH128_canonicalFromHash(&canonical, hash);
    std::memcpy(out, canonical.digest, sizeof(canonical.digest));
}

// Block i's digest into out[16 * i], for blocks [first, last).
void hash_blocks(const uint8_t *data, size_t size, size_t first, size_t last, uint8_t *out) {
    for (size_t block = first; block < last; ++block) {
        const size_t offset = block * kDigestBlockSize;
        const size_t length = std::min(kDigestBlockSize, size - offset);
        store(XXH3_128bits(data + offset, length), out + 16 * block);
    }
}

}  // namespace

bool ContentDigest::operator==(const ContentDigest &other) const {
    return std::memcmp(bytes, other.bytes, sizeof(bytes)) == 0;
}

bool ContentDigest::operator<(const ContentDigest &other) const {
    return std::memcmp(bytes, other.bytes, sizeof(bytes)) < 0;
}

std::string ContentDigest::hex() const { return hex_bytes(bytes, sizeof(bytes)); }

ContentDigest content_digest(const void *data, size_t size, unsigned threads) {
    const auto *bytes = static_cast<const uint8_t *>(data);
    const size_t blocks = std::max<size_t>(1, (size + kDigestBlockSize - 1) / kDigestBlockSize);
    std::vector<uint8_t> block_digests(16 * blocks);
    const size_t workers = std::clamp<size_t>(threads, 1, blocks);
    std::vector<std::thread> helpers;
    const size_t per_worker = (blocks + workers - 1) / workers;
    for (size_t w = 1; w < workers; ++w) {
        const size_t first = w * per_worker, last = std::min(blocks, first + per_worker);
        if (first < last) helpers.emplace_back(hash_blocks, bytes, size, first, last, block_digests.data());
    }
    if (size == 0) {
        store(XXH3_128bits(bytes, 0), block_digests.data());
    } else {
        hash_blocks(bytes, size, 0, std::min(blocks, per_worker), block_digests.data());
    }
    for (std::thread &helper : helpers) helper.join();
    ContentDigest digest;
    store(XXH3_128bits_withSeed(block_digests.data(), block_digests.size(), size), digest.bytes);
    return digest;
}

void ContentDigestBlocks::add(const void *block, size_t size) {
    block_digests_.resize(block_digests_.size() + 16);
    store(XXH3_128bits(block, size), block_digests_.data() + block_digests_.size() - 16);
    size_ += size;
}

ContentDigest ContentDigestBlocks::finish() const {
    std::vector<uint8_t> digests = block_digests_;
    if (digests.empty()) {
        digests.resize(16);
        store(XXH3_128bits(nullptr, 0), digests.data());
    }
    ContentDigest digest;
    store(XXH3_128bits_withSeed(digests.data(), digests.size(), size_), digest.bytes);
    return digest;
}

}  // namespace ggml_remote::protocol
