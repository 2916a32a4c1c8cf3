// Opening the files the server reads (configuration, keys, models, the store):
// whatever stands in a file's place, a FIFO, a device, a socket, a directory or
// a link out of a directory, is refused without hanging the open or feeding the
// reader, and a file that grows or shrinks after the check is read with a bound.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "protocol/status.h"
#include "transport/unique_fd.h"

namespace ggml_remote {

struct RegularFileRules {
    uint64_t max_bytes = UINT64_MAX;  // a larger file is refused
    // A final symbolic link is followed only when true: an operator's own path
    // may be one (a mounted secret), an entry of a walked directory never.
    bool follow_link = false;
    int access = O_RDONLY;
};

// What a file of `mode` is, for errors: "a FIFO", "a directory", ...
const char *file_kind(mode_t mode);

// Opens `path` (relative to `directory`, or AT_FDCWD) close-on-exec, never as a
// controlling terminal, and non-blocking until fstat shows it a regular file of
// at most rules.max_bytes; anything else is refused before it is read (a device
// before it is opened). The descriptor is blocking when returned; `st`, if
// given, is its fstat. Errors start with `path`.
Status open_regular_file(int directory, const std::string &path, const RegularFileRules &rules, UniqueFd *file,
                         struct stat *st = nullptr);

// The bytes of the file behind `fd` from offset 0 (pread: the offset is left
// alone), at most `max_bytes`: a file grown past them is an error, one that
// shrank is read as it is now. Errors start with `name`.
Status read_regular_fd(int fd, const std::string &name, size_t max_bytes, std::string *text);

// open_regular_file, then read_regular_fd of at most rules.max_bytes.
Status read_regular_file(int directory, const std::string &path, const RegularFileRules &rules, std::string *text);

}  // namespace ggml_remote
