#include "host/services/store_owner.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <functional>
#include <thread>
#include <utility>

#include "host/common/store_channel.h"
#include "host/services/channel_threads.h"
#include "protocol/content_digest.h"
#include "transport/socket.h"

namespace ggml_remote::host {

using protocol::ContentDigest;
using store_channel::Kind;
using store_channel::Reply;
using store_channel::Request;

namespace {

constexpr char kMagic[8] = {'G', 'G', 'R', 'W', 'S', 'T', 'R', '1'};
constexpr const char *kTemporaryPrefix = ".new-";
constexpr uint64_t kPage = 4096;
// A worker that sends none of a commit's bytes for this long loses the commit.
constexpr int kStallMs = 10000;
constexpr int kPollMs = 200;
constexpr size_t kSpliceChunk = size_t(1) << 20;
// A claim lapses unless its worker commits or claims it again within this.
constexpr int64_t kClaimNs = int64_t(60) * 1000000000;
// A worker's claims at most: beyond them, lookups claim nothing (others do not wait).
constexpr size_t kMaxClaimsPerChannel = 4096;
constexpr const char *kDerivedPrefix = "r-";

struct EntryHeader {
    char magic[8];
    uint8_t digest[16];
    uint64_t size;
    uint64_t content_offset;
    uint64_t check;  // XXH3-64 of the fields above
};

uint64_t header_check(const EntryHeader &header) { return XXH3_64bits(&header, offsetof(EntryHeader, check)); }

Status failure(const std::string &what) {
    return error(Code::error, "weight store: " + what + ": " + std::strerror(errno));
}

int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
        .count();
}

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

// A half-written entry nobody writes any more: ".new-<pid>-<n>" of a process that is
// gone, or of this one (an owner that starts has no commit under way).
bool is_orphaned_temporary(const char *name) {
    if (std::strncmp(name, kTemporaryPrefix, std::strlen(kTemporaryPrefix)) != 0) return false;
    const long pid = std::strtol(name + std::strlen(kTemporaryPrefix), nullptr, 10);
    return pid <= 0 || pid == ::getpid() || (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH);
}

// Whether the entry is whole: its header, and a length that matches it. (Whether
// it holds the size a worker asks for is another question: a wrong size is not
// damage, and must not let a worker remove an entry by asking for it.) A derived
// entry's header holds its bytes' digest, not its name: `named` is null for one.
bool header_is_sound(const EntryHeader &header, const ContentDigest *named, uint64_t file_size) {
    return std::memcmp(header.magic, kMagic, sizeof(kMagic)) == 0 &&
           (named == nullptr || std::memcmp(header.digest, named->bytes, sizeof(named->bytes)) == 0) &&
           header.content_offset >= kEntryHeaderSpan && header.content_offset < 2 * kEntryHeaderSpan &&
           header.check == header_check(header) && header.size <= UINT64_MAX - header.content_offset &&
           file_size == header.content_offset + header.size;
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

// What an entry of `size` bytes at `content_offset` takes on disk: its header page
// and the pages of its bytes (the hole between them takes nothing).
uint64_t entry_bytes(uint64_t content_offset, uint64_t size) {
    const uint64_t first = content_offset / kPage * kPage;
    const uint64_t end = (content_offset + size + kPage - 1) / kPage * kPage;
    return kPage + (end - first);
}

bool is_pipe(int fd) {
    struct stat st{};
    return ::fstat(fd, &st) == 0 && S_ISFIFO(st.st_mode);
}

ContentDigest digest_of(const uint8_t (&bytes)[16]) {
    ContentDigest digest;
    std::memcpy(digest.bytes, bytes, sizeof(digest.bytes));
    return digest;
}

}  // namespace

struct StoreOwner::Channel {
    UniqueFd fd;
    std::string tenant;      // its directory's name; empty until a TLS worker names itself
    std::string own_tenant;  // the same, were the store not shared: derived entries, claims
    std::thread thread;
    std::thread commit;
    std::atomic<bool> committing{false};
    std::atomic<bool> ended{false};
};

struct StoreOwner::Commit {
    Channel *channel = nullptr;
    std::string tenant, name, temporary;
    bool derived = false;
    UniqueFd directory, file, data, result;
    ContentDigest digest;
    uint64_t size = 0, content_offset = 0, reserved = 0;
    std::string key() const { return tenant + "/" + name; }
};

StoreOwner::StoreOwner() = default;

StoreOwner::~StoreOwner() {
    stopping_.store(true);
    std::list<std::unique_ptr<Channel>> channels;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        channels.swap(channels_);
    }
    for (auto &channel : channels) (void)::shutdown(channel->fd.get(), SHUT_RDWR);
    for (auto &channel : channels) {
        if (channel->thread.joinable()) channel->thread.join();
    }
}

std::string StoreOwner::tenant_directory_name(const std::string &tenant) { return store_tenant_directory(tenant); }

namespace {

// The store's directory, made first if need be (mode 0700, the server's own).
Status open_store_directory(const std::string &directory, UniqueFd *root) {
    if (::mkdir(directory.c_str(), 0700) != 0 && errno != EEXIST) return failure("mkdir " + directory);
    root->reset(::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    return root->valid() ? Status::success() : failure("open " + directory);
}

}  // namespace

Status StoreOwner::prepare(const WeightStoreOptions &options) {
    if (options.directory.empty()) return Status::success();
    UniqueFd root;
    if (Status s = open_store_directory(options.directory, &root); !s) return s;
    for_each_entry(root.get(), [](int directory, const char *tenant) {
        UniqueFd part(::openat(directory, tenant, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW));
        if (!part.valid()) return;
        for_each_entry(part.get(), [](int tenant_directory, const char *name) {
            if (is_orphaned_temporary(name)) (void)::unlinkat(tenant_directory, name, 0);
        });
    });
    return Status::success();
}

Status StoreOwner::open(const WeightStoreOptions &options) {
    options_ = options;
    // The server's start prepared the directory (prepare): the half-written entries
    // of earlier owners are gone already, and scan() passes over temporaries.
    if (Status s = open_store_directory(options.directory, &root_); !s) return s;
    if (options_.max_bytes == 0) {
        struct statvfs fs{};
        options_.max_bytes = ::fstatvfs(root_.get(), &fs) == 0 ? uint64_t(fs.f_blocks) * fs.f_frsize / 4 : 0;
    }
    scan();
    return Status::success();
}

void StoreOwner::scan() {
    std::lock_guard<std::mutex> lock(mutex_);
    for_each_entry(root_.get(), [&](int root, const char *tenant) {
        UniqueFd part(::openat(root, tenant, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW));
        if (!part.valid()) return;
        for_each_entry(part.get(), [&](int directory, const char *name) {
            struct stat st{};
            if (name[0] == '.' || ::fstatat(directory, name, &st, AT_SYMLINK_NOFOLLOW) != 0) return;
            const uint64_t bytes = uint64_t(st.st_blocks) * 512;
            const std::string key = std::string(tenant) + "/" + name;
            stored_[key] = {bytes, int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
            count_stored_locked(key, static_cast<int64_t>(bytes));
        });
    });
}

StoreOwnerCounters StoreOwner::counters() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return counters_;
}

uint64_t StoreOwner::bytes_held() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return stored_bytes_ + reserved_bytes_;
}

Status StoreOwner::connect(const std::string &tenant, UniqueFd *worker_end) {
    return connect_tenant_directory(tenant_directory_name(tenant), worker_end);
}

void StoreOwner::forget_ended_channels() { join_ended_channels(mutex_, channels_); }

void StoreOwner::serve(UniqueFd channel_fd, const std::string &tenant) {
    serve_tenant_directory(std::move(channel_fd), tenant_directory_name(tenant));
}

Status StoreOwner::connect_tenant_directory(const std::string &directory, UniqueFd *worker_end) {
    if (!is_store_tenant_directory(directory))
        return error(Code::bad_request, "not a tenant's directory: " + directory);
    int pair[2];
    if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) return failure("socketpair");
    worker_end->reset(pair[0]);
    serve_tenant_directory(UniqueFd(pair[1]), directory);
    return Status::success();
}

void StoreOwner::serve_tenant_directory(UniqueFd channel_fd, const std::string &directory) {
    if (!serves_workers()) return;
    forget_ended_channels();
    auto channel = std::make_unique<Channel>();
    channel->fd = std::move(channel_fd);
    channel->tenant = options_.shared_across_tenants ? tenant_directory_name("") : directory;
    channel->own_tenant = directory;
    Channel *served = channel.get();
    std::lock_guard<std::mutex> lock(mutex_);
    channels_.push_back(std::move(channel));
    served->thread = std::thread(&StoreOwner::serve_channel, this, served);
}

void StoreOwner::serve_channel(Channel *channel) {
    store_channel::NoSigpipe no_sigpipe;
    for (;;) {
        Request request;
        std::vector<UniqueFd> fds;
        // A message of another size, or too many descriptors, ends the channel.
        if (!store_channel::receive_message(channel->fd.get(), &request, sizeof(request), &fds, 2, -1)) break;
        if (stopping_.load()) break;
        answer(channel, request, fds);
    }
    // A commit under way ends when its worker's pipe closes, it stalls, or we stop.
    if (channel->commit.joinable()) channel->commit.join();
    drop_claims_of(*channel);
    channel->ended.store(true);
}

void StoreOwner::answer(Channel *channel, const Request &request, std::vector<UniqueFd> &fds) {
    Reply reply;
    UniqueFd file;
    Status status;
    switch (static_cast<Kind>(request.kind)) {
        case Kind::identify:  // the listener fixes every tenant; a worker names none
            status = error(Code::bad_request, "weight store: the tenant is the listener's to name");
            break;
        case Kind::find:
            status = enabled() ? find(*channel, request, &reply, &file) : Status::success();
            if (status && reply.found != store_channel::kFound) find_in_library(request, &reply, &file);
            break;
        case Kind::commit:
            status = enabled() ? start_commit(channel, request, fds, &reply)
                               : error(Code::unsupported, "weight store: none (--models alone) keeps no entries");
            break;
        case Kind::waiters:
            reply.found = waiters_of(*channel);
            break;
        default:
            status = error(Code::bad_request, "unknown weight store request " + std::to_string(request.kind));
    }
    reply.code = static_cast<int32_t>(status.code());
    std::snprintf(reply.message, sizeof(reply.message), "%s", status.message().c_str());
    const int fd = file.get();
    (void)store_channel::send_message(channel->fd.get(), &reply, sizeof(reply), file.valid() ? &fd : nullptr,
                                      file.valid() ? 1 : 0);
}

Status StoreOwner::open_tenant(const std::string &tenant, UniqueFd *directory) {
    if (::mkdirat(root_.get(), tenant.c_str(), 0700) != 0 && errno != EEXIST) return failure("mkdir " + tenant);
    directory->reset(::openat(root_.get(), tenant.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW));
    if (!directory->valid()) return failure("open " + tenant);
    return Status::success();
}

void StoreOwner::remove_entry(const std::string &key) {
    (void)::unlinkat(root_.get(), key.c_str(), 0);
    const auto it = stored_.find(key);
    if (it == stored_.end()) return;
    count_stored_locked(key, -static_cast<int64_t>(it->second.bytes));
    stored_.erase(it);
}

StoreOwner::EntryName StoreOwner::entry_name(const Channel &channel, const Request &request) const {
    const bool derived = (request.flags & store_channel::kDerived) != 0;
    const std::string hex = digest_of(request.digest).hex();
    return derived ? EntryName{channel.own_tenant, kDerivedPrefix + hex, true} : EntryName{channel.tenant, hex, false};
}

Status StoreOwner::find(const Channel &channel, const Request &request, Reply *reply, UniqueFd *file) {
    const EntryName name = entry_name(channel, request);
    UniqueFd directory;
    if (Status s = open_tenant(name.tenant, &directory); !s) return s;
    const ContentDigest digest = digest_of(request.digest);
    UniqueFd entry(::openat(directory.get(), name.name.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
    if (!entry.valid()) {
        answer_miss(channel, name, request, reply);
        return Status::success();
    }
    EntryHeader header{};
    struct stat st{};
    bool sound = ::fstat(entry.get(), &st) == 0 && S_ISREG(st.st_mode) &&
                 ::pread(entry.get(), &header, sizeof(header), 0) == static_cast<ssize_t>(sizeof(header)) &&
                 header_is_sound(header, name.derived ? nullptr : &digest, static_cast<uint64_t>(st.st_size));
    if (sound && header.size != request.size) return Status::success();  // another tensor: not found
    if (sound && options_.verify_on_use) {
        ContentDigest found;
        sound = digest_of_file(entry.get(), header.content_offset, request.size, &found) &&
                found == digest_of(header.digest);
    }
    const std::string key = name.key();
    std::lock_guard<std::mutex> lock(mutex_);
    if (!sound) {
        // Damaged (a crash, bit rot): the guest sends the bytes again.
        remove_entry(key);
        ++counters_.entries_damaged;
        return Status::success();
    }
    // Most recently used: in memory at once, on disk (for the next start) at most
    // every lru_resolution_s, since a time stamp is a journal write.
    Stored &stored = stored_[key];
    if (stored.bytes == 0) {
        stored.bytes = uint64_t(st.st_blocks) * 512;
        count_stored_locked(key, static_cast<int64_t>(stored.bytes));
    }
    stored.used_ns = now_ns();
    if (stored.used_ns / 1000000000 - st.st_mtim.tv_sec >= options_.lru_resolution_s)
        (void)::futimens(entry.get(), nullptr);
    reply->found = store_channel::kFound;
    reply->content_offset = header.content_offset;
    *file = std::move(entry);
    return Status::success();
}

void StoreOwner::answer_miss(const Channel &channel, const EntryName &entry, const Request &request, Reply *reply) {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto claim = live_claim_locked(entry.key());
    if (claim != claims_.end() && claim->second.by != &channel) {
        // Only the tenant's own workers are worth waiting for (see the header).
        if (claim->second.tenant != channel.own_tenant) return;
        reply->found = store_channel::kInFlight;
        if (!claim->second.waited) ++claims_of_[claim->second.by].waited;
        claim->second.waited = true;
        return;
    }
    if ((request.flags & store_channel::kClaim) != 0) claim_locked(channel, entry.key());
}

std::map<std::string, StoreOwner::Claim>::iterator StoreOwner::live_claim_locked(const std::string &key) {
    auto claim = claims_.find(key);
    if (claim == claims_.end() || claim->second.until_ns > now_ns()) return claim;
    erase_claim_locked(claim);
    return claims_.end();
}

void StoreOwner::claim_locked(const Channel &channel, const std::string &key) {
    auto claim = live_claim_locked(key);
    if (claim != claims_.end()) {
        if (claim->second.by == &channel) claim->second.until_ns = now_ns() + kClaimNs;  // renewed
        return;
    }
    uint32_t &held = claims_of_[&channel].held;
    if (held >= kMaxClaimsPerChannel) return;
    ++held;
    claims_[key] = Claim{&channel, channel.own_tenant, now_ns() + kClaimNs, false};
}

void StoreOwner::erase_claim_locked(std::map<std::string, Claim>::iterator claim) {
    auto counts = claims_of_.find(claim->second.by);
    if (counts != claims_of_.end()) {
        counts->second.waited -= claim->second.waited ? 1 : 0;
        if (--counts->second.held == 0) claims_of_.erase(counts);
    }
    claims_.erase(claim);
}

bool StoreOwner::named_already(const std::string &key) const {
    std::lock_guard<std::mutex> lock(mutex_);
    return stored_.count(key) != 0;
}

void StoreOwner::release_claim(const Channel &channel, const std::string &key) {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto claim = claims_.find(key);
    if (claim != claims_.end() && claim->second.by == &channel) erase_claim_locked(claim);
}

uint32_t StoreOwner::waiters_of(const Channel &channel) {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto counts = claims_of_.find(&channel);
    return counts != claims_of_.end() ? counts->second.waited : 0;
}

void StoreOwner::drop_claims_of(const Channel &channel) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = claims_.begin(); it != claims_.end();) {
        it = it->second.by == &channel ? claims_.erase(it) : std::next(it);
    }
    claims_of_.erase(&channel);
}

// The library's bytes are the same for every tenant: published models (see
// model_library.h and docs/SECURITY.md).
void StoreOwner::find_in_library(const Request &request, Reply *reply, UniqueFd *file) {
    uint64_t offset = 0;
    if ((request.flags & store_channel::kDerived) != 0) return;  // a repacked image is never published
    if (library_ == nullptr || !library_->find(digest_of(request.digest), request.size, file, &offset)) return;
    reply->found = store_channel::kFound;
    reply->content_offset = offset;
}

namespace {

std::string tenant_of_key(const std::string &key) { return key.substr(0, key.find('/')); }

}  // namespace

void StoreOwner::count_stored_locked(const std::string &key, int64_t bytes) {
    stored_bytes_ = static_cast<uint64_t>(static_cast<int64_t>(stored_bytes_) + bytes);
    uint64_t &held = tenant_bytes_[tenant_of_key(key)];
    held = static_cast<uint64_t>(static_cast<int64_t>(held) + bytes);
    if (held == 0) tenant_bytes_.erase(tenant_of_key(key));
}

// Each tenant's share: the limit divided among the tenants that hold entries,
// `tenant` among them.
uint64_t StoreOwner::share_locked(const std::string &tenant) const {
    const size_t tenants = tenant_bytes_.size() + (tenant_bytes_.count(tenant) == 0 ? 1 : 0);
    return options_.max_bytes / std::max<size_t>(1, tenants);
}

// A tenant that holds no more than its share loses nothing to another's offers.
bool StoreOwner::evictable_locked(const std::string &key, const std::string &tenant, uint64_t share) const {
    const std::string owner = tenant_of_key(key);
    if (owner == tenant) return true;
    const auto held = tenant_bytes_.find(owner);
    return held != tenant_bytes_.end() && held->second > share;
}

void StoreOwner::evict_locked(uint64_t room_for, const std::string &tenant) {
    const uint64_t share = share_locked(tenant);
    while (stored_bytes_ + reserved_bytes_ + room_for > options_.max_bytes) {
        auto oldest = stored_.end();
        for (auto it = stored_.begin(); it != stored_.end(); ++it) {
            if (!evictable_locked(it->first, tenant, share)) continue;
            if (oldest == stored_.end() || it->second.used_ns < oldest->second.used_ns) oldest = it;
        }
        if (oldest == stored_.end()) return;  // the rest is others' shares
        const std::string key = oldest->first;
        remove_entry(key);  // unlinked: a worker's mapping of it stays valid
        ++counters_.entries_evicted;
    }
}

Status StoreOwner::reserve(const std::string &key, uint64_t bytes, bool *in_flight) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (in_flight_.count(key) != 0) {
        ++counters_.commits_refused;
        *in_flight = true;
        return error(Code::limit_exceeded, "weight store: this entry is being written already");
    }
    if (bytes > options_.max_bytes) {
        ++counters_.commits_refused;
        return error(Code::limit_exceeded,
                     "weight store: an entry of " + std::to_string(bytes) + " bytes exceeds the store's limit");
    }
    evict_locked(bytes, tenant_of_key(key));
    if (stored_bytes_ + reserved_bytes_ + bytes > options_.max_bytes) {
        ++counters_.commits_refused;
        return error(Code::limit_exceeded,
                     "weight store: full with entries being written, or with other tenants' shares (" +
                         std::to_string(share_locked(tenant_of_key(key))) + " bytes each)");
    }
    in_flight_[key] = bytes;
    reserved_bytes_ += bytes;
    return Status::success();
}

Status StoreOwner::reserve_for(const Channel &channel, const std::string &key, uint64_t bytes, bool *in_flight) {
    if (Status s = reserve(key, bytes, in_flight); !s) return s;
    std::lock_guard<std::mutex> lock(mutex_);
    // Others of the tenant may wait for this commit now; another's claim had not
    // come to a commit yet: this one was faster.
    const auto claim = live_claim_locked(key);
    if (claim != claims_.end() && claim->second.by != &channel) erase_claim_locked(claim);
    claim_locked(channel, key);
    return Status::success();
}

Status StoreOwner::start_commit(Channel *channel, const Request &request, std::vector<UniqueFd> &fds, Reply *reply) {
    if (channel->committing.load()) {
        std::lock_guard<std::mutex> lock(mutex_);
        ++counters_.commits_refused;
        return error(Code::limit_exceeded, "weight store: one commit at a time");
    }
    if (fds.size() != 2 || !is_pipe(fds[0].get()) || !is_pipe(fds[1].get())) {
        return error(Code::bad_request, "weight store: a commit needs two pipes");
    }
    if (request.size == 0) return error(Code::bad_request, "weight store: an empty entry");
    auto commit = std::make_unique<Commit>();
    const EntryName name = entry_name(*channel, request);
    commit->channel = channel;
    commit->tenant = name.tenant;
    commit->name = name.name;
    commit->derived = name.derived;
    commit->digest = digest_of(request.digest);
    commit->size = request.size;
    commit->content_offset = kEntryHeaderSpan + request.phase % kEntryHeaderSpan;
    if (request.size > options_.max_bytes) return error(Code::limit_exceeded, "weight store: larger than the store");
    commit->reserved = entry_bytes(commit->content_offset, commit->size);
    if (named_already(commit->key())) {
        // Another worker's commit named it since this one looked: one entry, one
        // copy in memory (a second file would be mapped beside the first).
        reply->found = store_channel::kFound;
        return error(Code::limit_exceeded, "weight store: this entry is named already");
    }
    bool in_flight = false;
    if (Status s = reserve_for(*channel, commit->key(), commit->reserved, &in_flight); !s) {
        if (in_flight) reply->found = store_channel::kInFlight;
        if (!in_flight) release_claim(*channel, commit->key());  // nobody waits for bytes that never come
        return s;
    }
    if (Status s = create_entry(commit.get()); !s) {
        finish_commit(*commit, CommitEnd::refused);  // no room on the disk: a refusal, like the limit's
        return s;
    }
    commit->data = std::move(fds[0]);
    commit->result = std::move(fds[1]);
    reply->content_offset = commit->content_offset;
    if (channel->commit.joinable()) channel->commit.join();  // the last one is over
    channel->committing.store(true);
    channel->commit = std::thread(&StoreOwner::run_commit, this, std::move(commit));
    return Status::success();
}

Status StoreOwner::create_entry(Commit *commit) {
    if (Status s = open_tenant(commit->tenant, &commit->directory); !s) return s;
    commit->temporary = kTemporaryPrefix + std::to_string(::getpid()) + "-" + std::to_string(next_temporary_++);
    // Read-only from the start: the owner writes through this descriptor, nobody
    // opens the entry for writing again.
    commit->file.reset(::openat(commit->directory.get(), commit->temporary.c_str(),
                                O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0400));
    if (!commit->file.valid()) return failure("create an entry");
    EntryHeader header{};
    std::memcpy(header.magic, kMagic, sizeof(kMagic));
    std::memcpy(header.digest, commit->digest.bytes, sizeof(commit->digest.bytes));
    header.size = commit->size;
    header.content_offset = commit->content_offset;
    header.check = header_check(header);
    // The space first: a full disk is a refusal now, not a fault later.
    const uint64_t first = commit->content_offset / kPage * kPage;
    int rc = ::posix_fallocate(commit->file.get(), 0, kPage);
    if (rc == 0) {
        rc = ::posix_fallocate(commit->file.get(), static_cast<off_t>(first),
                               static_cast<off_t>(commit->content_offset + commit->size - first));
    }
    if (rc == 0 && ::pwrite(commit->file.get(), &header, sizeof(header), 0) != static_cast<ssize_t>(sizeof(header))) {
        rc = errno != 0 ? errno : EIO;
    }
    if (rc != 0) {
        errno = rc;
        return error(
            rc == ENOSPC || rc == EDQUOT ? Code::limit_exceeded : Code::error,
            "weight store: no room for an entry of " + std::to_string(commit->size) + " bytes: " + std::strerror(rc));
    }
    return Status::success();
}

bool StoreOwner::take_bytes(Commit &commit) {
    loff_t at = static_cast<loff_t>(commit.content_offset);
    uint64_t left = commit.size;
    auto last_progress = std::chrono::steady_clock::now();
    while (left > 0) {
        if (stopping_.load()) return false;
        const int ready = poll_one(commit.data.get(), POLLIN, kPollMs);
        if (ready < 0) return false;
        if (ready == 0) {
            if (std::chrono::steady_clock::now() - last_progress > std::chrono::milliseconds(kStallMs)) return false;
            continue;
        }
        const ssize_t moved = ::splice(commit.data.get(), nullptr, commit.file.get(), &at,
                                       std::min<uint64_t>(left, kSpliceChunk), SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
        if (moved == 0) return false;  // the worker closed its end early
        if (moved < 0) {
            if (errno == EAGAIN || errno == EINTR) continue;
            return false;
        }
        left -= static_cast<uint64_t>(moved);
        last_progress = std::chrono::steady_clock::now();
    }
    return true;
}

void StoreOwner::run_commit(std::unique_ptr<Commit> commit) {
    store_channel::NoSigpipe no_sigpipe;
    // Hashing a model's weights takes as long as receiving them: on cores nothing
    // else wants (this thread only).
    sched_param idle{};
    (void)::sched_setscheduler(0, SCHED_IDLE, &idle);
    bool named = take_bytes(*commit);
    commit->data.reset();
    if (named) named = check_or_record_digest(*commit);
    if (named) {
        named = ::renameat(commit->directory.get(), commit->temporary.c_str(), commit->directory.get(),
                           commit->name.c_str()) == 0;
    }
    finish_commit(*commit, named ? CommitEnd::named : CommitEnd::dropped);
    commit->channel->committing.store(false);  // before the answer: the worker may go on at once
    const uint8_t answer = named ? store_channel::kNamed : store_channel::kNotNamed;
    (void)!::write(commit->result.get(), &answer, 1);
}

bool StoreOwner::check_or_record_digest(Commit &commit) {
    // Our own copy, which no worker can change, is what gets hashed.
    ContentDigest found;
    if (!digest_of_file(commit.file.get(), commit.content_offset, commit.size, &found)) return false;
    if (!commit.derived) return found == commit.digest;
    // A derived entry's name says nothing of its bytes: its header records their
    // digest, which verify_on_use checks.
    EntryHeader header{};
    if (::pread(commit.file.get(), &header, sizeof(header), 0) != static_cast<ssize_t>(sizeof(header))) return false;
    std::memcpy(header.digest, found.bytes, sizeof(found.bytes));
    header.check = header_check(header);
    return ::pwrite(commit.file.get(), &header, sizeof(header), 0) == static_cast<ssize_t>(sizeof(header));
}

void StoreOwner::finish_commit(Commit &commit, CommitEnd end) {
    const bool named = end == CommitEnd::named;
    if (!named && commit.directory.valid() && !commit.temporary.empty()) {
        (void)::unlinkat(commit.directory.get(), commit.temporary.c_str(), 0);
    }
    std::lock_guard<std::mutex> lock(mutex_);
    const auto claim = claims_.find(commit.key());
    if (claim != claims_.end()) erase_claim_locked(claim);
    const auto it = in_flight_.find(commit.key());
    if (it != in_flight_.end()) {
        reserved_bytes_ -= it->second;
        in_flight_.erase(it);
    }
    if (end == CommitEnd::refused) {
        ++counters_.commits_refused;
        return;
    }
    if (end == CommitEnd::dropped) {
        ++counters_.entries_refused;
        return;
    }
    Stored &stored = stored_[commit.key()];
    count_stored_locked(commit.key(), -static_cast<int64_t>(stored.bytes));  // an entry it replaced
    stored = {commit.reserved, now_ns()};
    count_stored_locked(commit.key(), static_cast<int64_t>(stored.bytes));
    ++counters_.entries_written;
}

}  // namespace ggml_remote::host
