#include "host/weight_store.h"

#include <dirent.h>
#include <sched.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cstring>
#include <functional>
#include <utility>
#include <vector>

namespace ggml_remote::host {

using protocol::ContentDigest;

namespace {

constexpr char kMagic[8] = {'G', 'G', 'R', 'W', 'S', 'T', 'R', '1'};
constexpr const char *kTemporaryPrefix = ".new-";
constexpr size_t kMaxQueuedCommits = 16;
constexpr int kQuietMs = 100;  // no upload for this long: the store copies

struct EntryHeader {
    char magic[8];
    uint8_t digest[16];
    uint64_t size;
    uint64_t content_offset;
    uint64_t check;  // XXH3-64 of the fields above
};

uint64_t header_check(const EntryHeader &header) { return XXH3_64bits(&header, offsetof(EntryHeader, check)); }

Status failure(const std::string &what) { return error(Code::error, "weight store: " + what + ": " + std::strerror(errno)); }

// Calls `visit(directory fd, name)` for every directory entry but "." and "..".
void for_each_entry(int directory, const std::function<void(int, const char *)> &visit) {
    const int listing = ::openat(directory, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (listing < 0) return;
    DIR *dir = ::fdopendir(listing);
    if (dir == nullptr) {
        ::close(listing);
        return;
    }
    while (const dirent *entry = ::readdir(dir)) {
        if (std::strcmp(entry->d_name, ".") == 0 || std::strcmp(entry->d_name, "..") == 0) continue;
        visit(::dirfd(dir), entry->d_name);
    }
    ::closedir(dir);
}

// A half-written entry whose worker is gone: ".new-<pid>-<n>".
bool is_orphaned_temporary(const char *name) {
    if (std::strncmp(name, kTemporaryPrefix, std::strlen(kTemporaryPrefix)) != 0) return false;
    const long pid = std::strtol(name + std::strlen(kTemporaryPrefix), nullptr, 10);
    return pid <= 0 || (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH);
}

bool header_is_sound(const EntryHeader &header, const ContentDigest &digest, uint64_t size, uint64_t file_size) {
    return std::memcmp(header.magic, kMagic, sizeof(kMagic)) == 0 &&
           std::memcmp(header.digest, digest.bytes, sizeof(digest.bytes)) == 0 && header.size == size &&
           header.content_offset >= kEntryHeaderSpan && header.content_offset < 2 * kEntryHeaderSpan &&
           header.check == header_check(header) && file_size == header.content_offset + size;
}

// The digest of [offset, +size) of `file`.
bool digest_of_file(int file, uint64_t offset, uint64_t size, ContentDigest *digest) {
    const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
    const uint64_t start = offset / page * page;
    const size_t length = static_cast<size_t>(offset + size - start);
    void *mapped = ::mmap(nullptr, length, PROT_READ, MAP_SHARED, file, static_cast<off_t>(start));
    if (mapped == MAP_FAILED) return false;
    (void)::madvise(mapped, length, MADV_SEQUENTIAL);
    *digest = protocol::content_digest(static_cast<uint8_t *>(mapped) + (offset - start), size);
    ::munmap(mapped, length);
    return true;
}

bool write_bytes(int fd, const uint8_t *data, uint64_t size, uint64_t offset) {
    while (size > 0) {
        const ssize_t done = ::pwrite(fd, data, std::min<uint64_t>(size, uint64_t(1) << 30), static_cast<off_t>(offset));
        if (done <= 0) return false;
        data += done;
        size -= static_cast<uint64_t>(done);
        offset += static_cast<uint64_t>(done);
    }
    return true;
}

}  // namespace

WeightStore::~WeightStore() {
    hurry_.store(true);
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stopping_ = true;
    }
    changed_.notify_all();
    if (committer_.joinable()) committer_.join();
}

std::string WeightStore::tenant_directory_name(const std::string &tenant) {
    if (tenant.empty()) return "shared";
    const ContentDigest digest = protocol::content_digest(tenant.data(), tenant.size());
    return "t-" + digest.hex().substr(0, 24);
}

Status WeightStore::prepare(const WeightStoreOptions &options) {
    if (options.directory.empty()) return Status::success();
    if (::mkdir(options.directory.c_str(), 0700) != 0 && errno != EEXIST) return failure("mkdir " + options.directory);
    UniqueFd root(::open(options.directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!root.valid()) return failure("open " + options.directory);
    for_each_entry(root.get(), [](int directory, const char *tenant) {
        UniqueFd part(::openat(directory, tenant, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW));
        if (!part.valid()) return;
        for_each_entry(part.get(), [](int tenant_directory, const char *name) {
            if (is_orphaned_temporary(name)) (void)::unlinkat(tenant_directory, name, 0);
        });
    });
    return Status::success();
}

Status WeightStore::open(const WeightStoreOptions &options, const std::string &tenant) {
    options_ = options;
    root_.reset(::open(options.directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!root_.valid()) return failure("open " + options.directory);
    const std::string name = tenant_directory_name(options.shared_across_tenants ? std::string() : tenant);
    if (::mkdirat(root_.get(), name.c_str(), 0700) != 0 && errno != EEXIST) return failure("mkdir " + name);
    directory_.reset(::openat(root_.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW));
    if (!directory_.valid()) return failure("open " + name);
    if (options_.max_bytes == 0) {
        struct statvfs fs {};
        options_.max_bytes = ::fstatvfs(root_.get(), &fs) == 0 ? uint64_t(fs.f_blocks) * fs.f_frsize / 4 : 0;
    }
    return Status::success();
}

bool WeightStore::find(const ContentDigest &digest, uint64_t size, StoreEntry *entry) {
    if (!enabled()) return false;
    const std::string name = digest.hex();
    UniqueFd file(::openat(directory_.get(), name.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
    if (!file.valid()) return false;
    EntryHeader header{};
    struct stat st {};
    bool sound = ::pread(file.get(), &header, sizeof(header), 0) == static_cast<ssize_t>(sizeof(header)) &&
                 ::fstat(file.get(), &st) == 0 && S_ISREG(st.st_mode) &&
                 header_is_sound(header, digest, size, static_cast<uint64_t>(st.st_size));
    if (sound && options_.verify_on_use) {
        ContentDigest found;
        sound = digest_of_file(file.get(), header.content_offset, size, &found) && found == digest;
    }
    if (!sound) {
        // Damaged (a crash, a full disk, bit rot): the guest sends the bytes again.
        (void)::unlinkat(directory_.get(), name.c_str(), 0);
        std::lock_guard<std::mutex> lock(mutex_);
        ++counters_.entries_damaged;
        return false;
    }
    // Most recently used. At most once a minute (lru_resolution_s): a time stamp is a
    // journal write, which waits behind the disk's writeback, once per tensor.
    timespec now{};
    ::clock_gettime(CLOCK_REALTIME, &now);
    if (now.tv_sec - st.st_mtim.tv_sec >= options_.lru_resolution_s) (void)::futimens(file.get(), nullptr);
    entry->file = std::move(file);
    entry->content_offset = header.content_offset;
    entry->size = size;
    return true;
}

Status WeightStore::create(const ContentDigest &digest, uint64_t size, uint64_t phase, NewEntry *entry) {
    if (!enabled()) return error(Code::unsupported, "no weight store");
    entry->temporary_name = kTemporaryPrefix + std::to_string(::getpid()) + "-" + std::to_string(next_temporary_++);
    entry->file.reset(::openat(directory_.get(), entry->temporary_name.c_str(),
                               O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
    if (!entry->file.valid()) return failure("create an entry");
    entry->digest = digest;
    entry->size = size;
    entry->content_offset = kEntryHeaderSpan + phase % kEntryHeaderSpan;
    EntryHeader header{};
    std::memcpy(header.magic, kMagic, sizeof(kMagic));
    std::memcpy(header.digest, digest.bytes, sizeof(digest.bytes));
    header.size = size;
    header.content_offset = entry->content_offset;
    header.check = header_check(header);
    if (::ftruncate(entry->file.get(), static_cast<off_t>(entry->content_offset + size)) != 0 ||
        ::pwrite(entry->file.get(), &header, sizeof(header), 0) != static_cast<ssize_t>(sizeof(header))) {
        Status status = failure("size an entry of " + std::to_string(size) + " bytes");
        abandon(std::move(*entry));
        return status;
    }
    return Status::success();
}

void WeightStore::abandon(NewEntry entry) {
    if (!entry.temporary_name.empty()) (void)::unlinkat(directory_.get(), entry.temporary_name.c_str(), 0);
}

void WeightStore::commit(NewEntry entry) {
    std::unique_lock<std::mutex> lock(mutex_);
    // A guest that makes entries faster than they are checked waits, when each holds
    // a file (entries copied from memory get theirs on the store's thread); the store
    // does not wait for a pause in the uploads then.
    if (entry.file.valid()) {
        hurry_.store(true, std::memory_order_relaxed);
        changed_.wait(lock, [this] { return open_files_queued_ < kMaxQueuedCommits; });
        hurry_.store(false, std::memory_order_relaxed);
        ++open_files_queued_;
    }
    queue_.push_back(std::move(entry));
    if (!committer_.joinable()) committer_ = std::thread(&WeightStore::run_commits, this);
    changed_.notify_all();
}

void WeightStore::note_activity() {
    last_activity_ns_.store(std::chrono::steady_clock::now().time_since_epoch().count(), std::memory_order_relaxed);
}

void WeightStore::wait_for_quiet() {
    // Copying a model's weights while the guest still uploads them would take the
    // cores and memory bandwidth the upload needs: the store waits for a pause.
    const auto quiet = std::chrono::milliseconds(kQuietMs);
    for (;;) {
        const std::chrono::steady_clock::duration last(last_activity_ns_.load(std::memory_order_relaxed));
        const auto since = std::chrono::steady_clock::now().time_since_epoch() - last;
        if (since >= quiet || hurry_.load(std::memory_order_relaxed)) return;
        std::this_thread::sleep_for(quiet - since);
    }
}

void WeightStore::wait_for_commits() {
    hurry_.store(true, std::memory_order_relaxed);
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [this] { return queue_.empty() && !busy_; });
    hurry_.store(false, std::memory_order_relaxed);
}

bool WeightStore::commits_pending() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return !queue_.empty() || busy_;
}

std::vector<ContentDigest> WeightStore::take_named() {
    std::lock_guard<std::mutex> lock(mutex_);
    return std::exchange(named_, {});
}

WeightStoreCounters WeightStore::counters() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return counters_;
}

void WeightStore::run_commits() {
    // Copying and hashing a model's weights takes as long as receiving them: the
    // store's thread runs only on cores nothing else wants, so a guest's first load
    // is not slowed down by its own commits.
    sched_param idle{};
    (void)::sched_setscheduler(0, SCHED_IDLE, &idle);
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
        changed_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping, nothing left
        busy_ = true;
        lock.unlock();
        wait_for_quiet();
        lock.lock();
        NewEntry entry = std::move(queue_.front());
        queue_.pop_front();
        if (entry.file.valid()) --open_files_queued_;
        lock.unlock();
        commit_now(entry);
        lock.lock();
        busy_ = false;
        changed_.notify_all();
    }
}

void WeightStore::commit_copy(const ContentDigest &digest, uint64_t size, uint64_t phase, const uint8_t *source) {
    NewEntry entry;
    entry.digest = digest;
    entry.size = size;
    entry.phase = phase;
    entry.source = source;
    commit(std::move(entry));
}

void WeightStore::commit_now(NewEntry &entry) {
    if (entry.source != nullptr) {
        const uint8_t *source = entry.source;
        if (!create(entry.digest, entry.size, entry.phase, &entry)) return;  // no room: not kept
        if (!write_bytes(entry.file.get(), source, entry.size, entry.content_offset)) {
            abandon(std::move(entry));
            return;
        }
    }
    ContentDigest found;
    const bool matches = digest_of_file(entry.file.get(), entry.content_offset, entry.size, &found) &&
                         found == entry.digest;
    const std::string name = entry.digest.hex();
    if (!matches || ::renameat(directory_.get(), entry.temporary_name.c_str(), directory_.get(), name.c_str()) != 0) {
        abandon(std::move(entry));
        std::lock_guard<std::mutex> lock(mutex_);
        ++counters_.entries_refused;
        return;
    }
    {
        std::lock_guard<std::mutex> lock(mutex_);
        ++counters_.entries_written;
        named_.push_back(entry.digest);
    }
    const auto now = std::chrono::steady_clock::now();
    if (now - last_eviction_ >= std::chrono::milliseconds(options_.eviction_interval_ms)) {
        last_eviction_ = now;
        evict_to_limit();
    }
}

void WeightStore::evict_to_limit() {
    struct Stored {
        int64_t used_ns;
        uint64_t bytes;
        std::string tenant, name;
    };
    std::vector<Stored> stored;
    uint64_t total = 0;
    for_each_entry(root_.get(), [&](int root, const char *tenant) {
        UniqueFd part(::openat(root, tenant, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW));
        if (!part.valid()) return;
        for_each_entry(part.get(), [&](int directory, const char *name) {
            struct stat st {};
            if (name[0] == '.' || ::fstatat(directory, name, &st, AT_SYMLINK_NOFOLLOW) != 0) return;
            const uint64_t bytes = uint64_t(st.st_blocks) * 512;
            total += bytes;
            stored.push_back({int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec, bytes, tenant, name});
        });
    });
    if (total <= options_.max_bytes) return;
    std::sort(stored.begin(), stored.end(), [](const Stored &a, const Stored &b) { return a.used_ns < b.used_ns; });
    for (const Stored &entry : stored) {
        if (total <= options_.max_bytes) break;
        UniqueFd part(::openat(root_.get(), entry.tenant.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW));
        if (part.valid() && ::unlinkat(part.get(), entry.name.c_str(), 0) == 0) {
            total -= entry.bytes;
            std::lock_guard<std::mutex> lock(mutex_);
            ++counters_.entries_evicted;
        }
    }
}

}  // namespace ggml_remote::host
