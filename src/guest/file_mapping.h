// Finding the file behind a guest address (a model that llama.cpp memory-mapped).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "protocol/status.h"
#include "transport/unique_fd.h"

namespace ggml_remote::guest {

// Which file is mapped at a range of this process's memory, and how.
struct MappedFile {
    std::string path;
    unsigned major = 0, minor = 0;  // the file's device
    uint64_t inode = 0;
    uint64_t offset = 0;    // where in the file the range starts
    bool writable = false;  // some page of the range may be written through this mapping

    bool same_file_at(const MappedFile &other) const {
        return major == other.major && minor == other.minor && inode == other.inode && offset == other.offset;
    }
};

// Describes the file mapped at [ptr, ptr + size). Fails when the range is not one
// file's contiguous mapping (anonymous memory, several files).
Status find_mapped_file(const void *ptr, size_t size, MappedFile *file);

// Opens, read-only, the file mapped at [ptr, ptr + size) in this process and says
// where in the file `ptr` lies. Fails when the range is not one file's contiguous
// mapping (anonymous memory, several files).
Status open_mapped_file(const void *ptr, size_t size, UniqueFd *fd, uint64_t *file_offset);

}  // namespace ggml_remote::guest
