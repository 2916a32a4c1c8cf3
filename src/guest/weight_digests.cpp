#include "guest/weight_digests.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>

#include "guest/file_mapping.h"
#include "protocol/commands.h"

namespace ggml_remote::guest {

using protocol::ContentDigest;

namespace {

#pragma pack(push, 1)
struct DigestRecord {
    uint64_t offset;
    uint64_t size;
    uint8_t digest[16];
};
#pragma pack(pop)

unsigned hashing_threads() {
    const unsigned cores = std::thread::hardware_concurrency();
    return std::clamp(cores, 1u, 8u);
}

// One model file's digests, read from and appended to its record file.
class FileDigests {
  public:
    explicit FileDigests(const std::string &path) : path_(path) {
        const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) return;
        DigestRecord record;
        while (::read(fd, &record, sizeof(record)) == static_cast<ssize_t>(sizeof(record))) {
            std::memcpy(known_[{record.offset, record.size}].bytes, record.digest, sizeof(record.digest));
        }
        ::close(fd);
    }

    bool find(uint64_t offset, uint64_t size, ContentDigest *digest) const {
        auto it = known_.find({offset, size});
        if (it == known_.end()) return false;
        *digest = it->second;
        return true;
    }

    void add(uint64_t offset, uint64_t size, const ContentDigest &digest) {
        known_[{offset, size}] = digest;
        if (path_.empty()) return;
        const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
        if (fd < 0) return;  // a cache that cannot be written only costs the next load a hash
        DigestRecord record{offset, size, {}};
        std::memcpy(record.digest, digest.bytes, sizeof(record.digest));
        (void)!::write(fd, &record, sizeof(record));
        ::close(fd);
    }

  private:
    std::string path_;
    std::map<std::pair<uint64_t, uint64_t>, ContentDigest> known_;
};

// The record file's name for the file behind a mapping; empty when unknown.
std::string identity_of(const MappedFile &mapped) {
    struct stat st{};
    if (::stat(mapped.path.c_str(), &st) != 0 || st.st_ino != mapped.inode || major(st.st_dev) != mapped.major ||
        minor(st.st_dev) != mapped.minor) {
        return std::string();
    }
    char name[160];
    std::snprintf(name, sizeof(name), "%x-%x-%llu-%llu-%lld.%09ld-%lld.%09ld", mapped.major, mapped.minor,
                  static_cast<unsigned long long>(st.st_ino), static_cast<unsigned long long>(st.st_size),
                  static_cast<long long>(st.st_mtim.tv_sec), st.st_mtim.tv_nsec,
                  static_cast<long long>(st.st_ctim.tv_sec), st.st_ctim.tv_nsec);
    return name;
}

class DigestCache {
  public:
    ContentDigest digest_of(const void *data, size_t size, const std::string &directory, bool *seen_before) {
        MappedFile mapped;
        std::string identity;
        if (find_mapped_file(data, size, &mapped) && !mapped.writable) identity = identity_of(mapped);
        *seen_before = true;
        if (identity.empty()) return protocol::content_digest(data, size, hashing_threads());
        std::lock_guard<std::mutex> lock(mutex_);
        FileDigests &file = file_for(identity, directory);
        ContentDigest digest;
        if (file.find(mapped.offset, size, &digest)) return digest;
        *seen_before = false;
        digest = protocol::content_digest(data, size, hashing_threads());
        file.add(mapped.offset, size, digest);
        return digest;
    }

  private:
    FileDigests &file_for(const std::string &identity, const std::string &directory) {
        auto it = files_.find(identity);
        if (it != files_.end()) return it->second;
        std::string path;
        if (!directory.empty()) {
            (void)::mkdir(directory.c_str(), 0700);
            (void)::mkdir((directory + "/digests").c_str(), 0700);
            path = directory + "/digests/" + identity;
        }
        return files_.emplace(identity, FileDigests(path)).first->second;
    }

    std::mutex mutex_;
    std::map<std::string, FileDigests> files_;
};

}  // namespace

ContentDigest weight_digest(const void *data, size_t size, const std::string &cache_dir, bool *seen_before) {
    static DigestCache cache;
    return cache.digest_of(data, size, cache_dir, seen_before);
}

}  // namespace ggml_remote::guest
