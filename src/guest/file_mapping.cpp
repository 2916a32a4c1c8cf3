#include "guest/file_mapping.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <string>

namespace ggml_remote::guest {

namespace {

struct MapsLine {
    uintptr_t start = 0, end = 0;
    bool writable = false;
    uint64_t offset = 0;
    unsigned major = 0, minor = 0;
    uint64_t inode = 0;
    std::string path;
};

bool parse_maps_line(const char *line, MapsLine *out) {
    char perms[8];
    int path_at = 0;
    if (std::sscanf(line, "%" SCNxPTR "-%" SCNxPTR " %7s %" SCNx64 " %x:%x %" SCNu64 " %n", &out->start, &out->end,
                    perms, &out->offset, &out->major, &out->minor, &out->inode, &path_at) < 7) {
        return false;
    }
    out->writable = perms[1] == 'w';
    out->path = path_at > 0 ? std::string(line + path_at) : std::string();
    while (!out->path.empty() && (out->path.back() == '\n' || out->path.back() == ' ')) out->path.pop_back();
    return true;
}

}  // namespace

Status find_mapped_file(const void *ptr, size_t size, MappedFile *file) {
    FILE *maps = std::fopen("/proc/self/maps", "re");
    if (maps == nullptr) return error(Code::unsupported, "cannot read /proc/self/maps");
    const auto first = reinterpret_cast<uintptr_t>(ptr);
    const uintptr_t last = first + size;
    // The range may span several lines of one file (madvise splits mappings); they
    // must follow each other in memory and in the file.
    MapsLine found;
    uintptr_t covered = first;
    bool started = false, writable = false;
    char line[4096];
    while (covered < last && std::fgets(line, sizeof(line), maps) != nullptr) {
        MapsLine current;
        if (!parse_maps_line(line, &current) || current.end <= covered || current.start > covered) continue;
        if (current.inode == 0 || current.path.empty() || current.path[0] != '/') break;
        if (!started) {
            found = current;
            file->offset = current.offset + (first - current.start);
            started = true;
        } else if (current.inode != found.inode || current.path != found.path ||
                   current.offset != found.offset + (current.start - found.start)) {
            break;
        }
        writable = writable || current.writable;
        covered = current.end;
    }
    std::fclose(maps);
    if (!started || covered < last) return error(Code::unsupported, "the memory is not a mapped file");
    file->path = found.path;
    file->major = found.major;
    file->minor = found.minor;
    file->inode = found.inode;
    file->writable = writable;
    return Status::success();
}

Status open_mapped_file(const void *ptr, size_t size, UniqueFd *fd, uint64_t *file_offset) {
    MappedFile found;
    Status status = find_mapped_file(ptr, size, &found);
    if (!status) return status;
    UniqueFd file(::open(found.path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!file.valid()) return error(Code::unsupported, "open " + found.path + ": " + std::strerror(errno));
    struct stat st{};
    if (::fstat(file.get(), &st) != 0 || st.st_ino != found.inode || major(st.st_dev) != found.major ||
        minor(st.st_dev) != found.minor) {
        return error(Code::unsupported, found.path + " is no longer the file that is mapped");
    }
    *fd = std::move(file);
    *file_offset = found.offset;
    return Status::success();
}

}  // namespace ggml_remote::guest
