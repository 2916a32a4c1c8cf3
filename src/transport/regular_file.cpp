#include "transport/regular_file.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace ggml_remote {

namespace {

Status refused(const std::string &path, const std::string &why) { return error(Code::error, path + ": " + why); }

Status system_error(const std::string &path) { return refused(path, std::strerror(errno)); }

std::string size_text(uint64_t bytes) {
    if (bytes >= (uint64_t(1) << 20) && bytes % (uint64_t(1) << 20) == 0) {
        return std::to_string(bytes >> 20) + " MiB";
    }
    return std::to_string(bytes) + " bytes";
}

// Refuses what `st` shows is not a regular file within the rules.
Status check_kind_and_size(const std::string &path, const struct stat &st, const RegularFileRules &rules) {
    if (!S_ISREG(st.st_mode)) return refused(path, std::string("not a regular file (") + file_kind(st.st_mode) + ")");
    if (static_cast<uint64_t>(st.st_size) > rules.max_bytes) {
        return refused(path, std::to_string(st.st_size) + " bytes, more than the " + size_text(rules.max_bytes) +
                                 " a file of its kind may hold");
    }
    return Status::success();
}

}  // namespace

const char *file_kind(mode_t mode) {
    switch (mode & S_IFMT) {
        case S_IFREG:
            return "a regular file";
        case S_IFDIR:
            return "a directory";
        case S_IFIFO:
            return "a FIFO";
        case S_IFSOCK:
            return "a socket";
        case S_IFCHR:
            return "a character device";
        case S_IFBLK:
            return "a block device";
        case S_IFLNK:
            return "a symbolic link";
        default:
            return "of an unknown kind";
    }
}

Status open_regular_file(int directory, const std::string &path, const RegularFileRules &rules, UniqueFd *file,
                         struct stat *st) {
    // A look first, so that a device is never opened (opening some has effects).
    struct stat seen{};
    if (::fstatat(directory, path.c_str(), &seen, rules.follow_link ? 0 : AT_SYMLINK_NOFOLLOW) != 0) {
        return system_error(path);
    }
    if (S_ISLNK(seen.st_mode)) return refused(path, "a symbolic link, not followed here");
    if (Status status = check_kind_and_size(path, seen, rules); !status) return status;
    // What is opened may not be what was seen: O_NONBLOCK keeps a FIFO put there
    // since from hanging the open, and fstat decides.
    const int flags = rules.access | O_NONBLOCK | O_NOCTTY | O_CLOEXEC | (rules.follow_link ? 0 : O_NOFOLLOW);
    UniqueFd opened(::openat(directory, path.c_str(), flags));
    if (!opened.valid()) {
        return errno == ELOOP && !rules.follow_link ? refused(path, "a symbolic link, not followed here")
                                                    : system_error(path);
    }
    struct stat now{};
    if (::fstat(opened.get(), &now) != 0) return system_error(path);
    if (Status status = check_kind_and_size(path, now, rules); !status) return status;
    if (::fcntl(opened.get(), F_SETFL, ::fcntl(opened.get(), F_GETFL) & ~O_NONBLOCK) != 0) return system_error(path);
    if (st != nullptr) *st = now;
    *file = std::move(opened);
    return Status::success();
}

Status read_regular_fd(int fd, const std::string &name, size_t max_bytes, std::string *text) {
    std::string bytes;
    char chunk[16384];
    for (off_t offset = 0;;) {
        const ssize_t got = ::pread(fd, chunk, sizeof(chunk), offset);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) return system_error(name);
        if (got == 0) break;
        if (static_cast<size_t>(got) > max_bytes - bytes.size()) {
            return refused(name, "grew past the " + size_text(max_bytes) + " a file of its kind may hold");
        }
        bytes.append(chunk, static_cast<size_t>(got));
        offset += got;
    }
    *text = std::move(bytes);
    return Status::success();
}

Status read_regular_file(int directory, const std::string &path, const RegularFileRules &rules, std::string *text) {
    UniqueFd file;
    if (Status status = open_regular_file(directory, path, rules, &file); !status) return status;
    const size_t bound = rules.max_bytes < SIZE_MAX ? static_cast<size_t>(rules.max_bytes) : SIZE_MAX;
    return read_regular_fd(file.get(), path, bound, text);
}

}  // namespace ggml_remote
