// Finding the file behind a guest address (a model that llama.cpp memory-mapped).
#pragma once

#include "protocol/status.h"
#include "transport/unique_fd.h"

#include <cstddef>
#include <cstdint>

namespace ggml_remote::guest {

// Opens, read-only, the file mapped at [ptr, ptr + size) in this process and says
// where in the file `ptr` lies. Fails when the range is not one file's contiguous
// mapping (anonymous memory, several files).
Status open_mapped_file(const void *ptr, size_t size, UniqueFd *fd, uint64_t *file_offset);

}  // namespace ggml_remote::guest
