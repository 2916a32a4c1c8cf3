// Digests of the weights a guest uploads, for the server's weight store.
//
// Hashing a model's weights costs about as much as reading them once, so digests
// of bytes that come from a memory-mapped model file are kept on disk, per file
// (its device, inode, size, modification and change times: a file written again
// is another file), and an unchanged model is never hashed twice:
//   $GGML_REMOTE_CACHE_DIR, else $XDG_CACHE_HOME/ggml-remote, else ~/.cache/ggml-remote
//   .../digests/<file identity>   records of (offset, size, digest)
// Bytes from anywhere else (whisper.cpp reads its model into memory) are hashed
// each time, on all cores.
#pragma once

#include "protocol/content_digest.h"

#include <cstddef>

namespace ggml_remote::guest {

// The digest of `size` bytes at `data`; thread-safe. `*seen_before`: the bytes come
// from a model file whose digests were kept before (so the server's store likely
// holds them), or from memory, of which nothing is known (then worth asking too).
protocol::ContentDigest weight_digest(const void *data, size_t size, bool *seen_before);

// The smallest weight tensor worth a round trip to the store: GGML_REMOTE_STORE_MIN_BYTES
// (default 1 MiB, never below the protocol's minimum); 0 when GGML_REMOTE_WEIGHT_STORE=0.
size_t weight_store_min_bytes();

}  // namespace ggml_remote::guest
