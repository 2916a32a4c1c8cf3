// Digests of the weights a guest uploads, for the server's weight store.
//
// Hashing a model's weights costs about as much as reading them once, so digests
// of bytes that come from a memory-mapped model file are kept on disk, per file
// (its device, inode, size, modification and change times: a file written again
// is another file), and an unchanged model is never hashed twice:
//   <cache dir>/digests/<file identity>   records of (offset, size, digest)
// where the cache directory is GuestOptions::cache_dir.
// Bytes from anywhere else (whisper.cpp reads its model into memory) are hashed
// each time, on all cores.
#pragma once

#include <cstddef>
#include <string>

#include "protocol/content_digest.h"

namespace ggml_remote::guest {

// The digest of `size` bytes at `data`; thread-safe. `*seen_before`: the bytes come
// from a model file whose digests were kept before in `cache_dir` (so the server's
// store likely holds them), or from memory, of which nothing is known (then worth
// asking too). An empty `cache_dir` keeps digests for this process only.
protocol::ContentDigest weight_digest(const void *data, size_t size, const std::string &cache_dir, bool *seen_before);

}  // namespace ggml_remote::guest
