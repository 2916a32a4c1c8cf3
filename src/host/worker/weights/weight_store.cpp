#include "host/worker/weights/weight_store.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <utility>
#include <vector>

#include "transport/socket.h"

namespace ggml_remote::host {

using protocol::ContentDigest;
using store_channel::Kind;
using store_channel::Reply;
using store_channel::Request;

namespace {

constexpr int kQuietMs = 100;  // no upload for this long: the store copies
// The owner answers a request at once (a commit's reservation included); one that
// does not within this is taken for gone.
constexpr int kReplyTimeoutMs = 30000;
// How long the owner may take to hash and name an entry once it has its bytes.
constexpr int kResultTimeoutMs = 120000;
constexpr int kPollMs = 100;
constexpr size_t kChunk = size_t(1) << 20;
// How long a commit waits for another worker that writes the same entry.
constexpr auto kOthersWait = std::chrono::seconds(60);
constexpr auto kOthersPoll = std::chrono::milliseconds(50);

// A pipe whose write end is ours: [0] read, [1] write.
bool make_pipe(UniqueFd *read_end, UniqueFd *write_end) {
    int ends[2];
    if (::pipe2(ends, O_CLOEXEC) != 0) return false;
    read_end->reset(ends[0]);
    write_end->reset(ends[1]);
    return true;
}

}  // namespace

WeightStore::~WeightStore() {
    cancelled_.store(true);
    draining_.store(true);
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stopping_ = true;
        queue_.clear();
    }
    changed_.notify_all();
    if (committer_.joinable()) committer_.join();
}

Status WeightStore::open(UniqueFd channel) {
    channel_ = std::move(channel);
    usable_.store(channel_.valid());
    if (!channel_.valid()) return error(Code::unsupported, "no weight store channel");
    return Status::success();
}

bool WeightStore::request(const Request &request, Reply *reply, UniqueFd *file, const int *fds, size_t count) {
    std::lock_guard<std::mutex> lock(channel_mutex_);
    if (!usable_.load()) return false;
    std::vector<UniqueFd> received;
    if (!store_channel::send_message(channel_.get(), &request, sizeof(request), fds, count) ||
        !store_channel::receive_message(channel_.get(), reply, sizeof(*reply), &received, 1, kReplyTimeoutMs)) {
        usable_.store(false);  // the owner is gone (a listener that was replaced): no store
        return false;
    }
    reply->message[sizeof(reply->message) - 1] = '\0';
    if (file != nullptr && !received.empty()) *file = std::move(received.front());
    return true;
}

StoreLookup WeightStore::find(const ContentDigest &digest, uint64_t size, StoreEntry *entry, uint32_t flags) {
    if (!enabled()) return StoreLookup::missing;
    Request request;
    request.kind = static_cast<uint32_t>(Kind::find);
    std::memcpy(request.digest, digest.bytes, sizeof(request.digest));
    request.size = size;
    request.flags = flags;
    Reply reply;
    UniqueFd file;
    if (!this->request(request, &reply, &file) || reply.code != 0) return StoreLookup::missing;
    if (reply.found == store_channel::kInFlight) return StoreLookup::in_flight;
    if (reply.found != store_channel::kFound || !file.valid()) return StoreLookup::missing;
    // The owner's word, checked where a wrong one would fault: a regular file that
    // holds the whole range.
    struct stat st{};
    if (::fstat(file.get(), &st) != 0 || !S_ISREG(st.st_mode) || reply.content_offset > UINT64_MAX - size ||
        static_cast<uint64_t>(st.st_size) < reply.content_offset + size) {
        return StoreLookup::missing;
    }
    entry->file = std::move(file);
    entry->content_offset = reply.content_offset;
    entry->size = size;
    return StoreLookup::found;
}

bool WeightStore::others_wait() {
    Request request;
    request.kind = static_cast<uint32_t>(Kind::waiters);
    Reply reply;
    return this->request(request, &reply, nullptr) && reply.code == 0 && reply.found > 0;
}

WeightStore::Transfer WeightStore::transfer(const ContentDigest &digest, uint64_t size, uint64_t phase, uint32_t flags,
                                            const std::function<bool(int)> &send) {
    store_channel::NoSigpipe no_sigpipe;
    UniqueFd data_read, data_write, result_read, result_write;
    if (!make_pipe(&data_read, &data_write) || !make_pipe(&result_read, &result_write)) return Transfer::not_named;
    (void)::fcntl(data_write.get(), F_SETPIPE_SZ, static_cast<int>(kChunk));
    Request request;
    request.kind = static_cast<uint32_t>(Kind::commit);
    std::memcpy(request.digest, digest.bytes, sizeof(request.digest));
    request.size = size;
    request.phase = phase;
    request.flags = flags;
    const int fds[2] = {data_read.get(), result_write.get()};
    Reply reply;
    if (!this->request(request, &reply, nullptr, fds, 2)) return Transfer::not_named;
    if (reply.code != 0) {
        // Named by another worker since this one looked: as good as named here.
        if (reply.found == store_channel::kFound) return Transfer::named;
        return reply.found == store_channel::kInFlight ? Transfer::in_flight : Transfer::not_named;
    }
    data_read.reset();
    result_write.reset();
    const bool sent = send(data_write.get());
    data_write.reset();  // the owner sees the end; short of `size`, it drops the entry
    if (!sent) return Transfer::not_named;
    // The owner hashes the bytes now; a session that ends does not wait for it.
    for (int waited = 0; waited < kResultTimeoutMs; waited += kPollMs) {
        if (cancelled_.load(std::memory_order_relaxed)) return Transfer::not_named;
        const int ready = poll_one(result_read.get(), POLLIN, kPollMs);
        if (ready < 0) return Transfer::not_named;
        if (ready == 0) continue;
        uint8_t answer = store_channel::kNotNamed;
        const bool named = ::read(result_read.get(), &answer, 1) == 1 && answer == store_channel::kNamed;
        return named ? Transfer::named : Transfer::not_named;
    }
    return Transfer::not_named;
}

bool WeightStore::send_from_memory(int pipe, const uint8_t *source, uint64_t size) {
    // The pipe takes references to our pages (no copy here); the owner copies them
    // into its file and hashes its copy, so a page changed meanwhile only fails
    // the digest.
    uint64_t done = 0;
    while (done < size) {
        if (cancelled_.load(std::memory_order_relaxed)) return false;
        iovec part{const_cast<uint8_t *>(source + done), static_cast<size_t>(std::min<uint64_t>(size - done, kChunk))};
        ssize_t moved = ::vmsplice(pipe, &part, 1, 0);
        if (moved < 0 && errno == EINTR) continue;
        if (moved < 0 && (errno == EINVAL || errno == ENOSYS)) moved = ::write(pipe, part.iov_base, part.iov_len);
        if (moved <= 0) return false;
        done += static_cast<uint64_t>(moved);
    }
    return true;
}

bool WeightStore::send_filled(int pipe, uint64_t size, const EntryFill &fill) {
    std::vector<uint8_t> chunk(static_cast<size_t>(std::min<uint64_t>(size, kChunk)));
    for (uint64_t done = 0; done < size;) {
        if (cancelled_.load(std::memory_order_relaxed)) return false;
        const size_t n = static_cast<size_t>(std::min<uint64_t>(size - done, chunk.size()));
        fill(done, chunk.data(), n);
        if (!write_fully(pipe, chunk.data(), n)) return false;
        done += n;
    }
    return true;
}

void WeightStore::counted(const ContentDigest &digest, bool named) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (named) {
        ++counters_.entries_written;
        named_.push_back(digest);
    } else {
        ++counters_.entries_refused;
    }
}

void WeightStore::commit_copy(const ContentDigest &digest, uint64_t size, uint64_t phase, const uint8_t *source,
                              uint32_t flags) {
    if (!enabled()) return;
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back({digest, size, phase, source, flags, {}});
    if (!committer_.joinable()) committer_ = std::thread(&WeightStore::run_commits, this);
    changed_.notify_all();
}

bool WeightStore::commit_now(const ContentDigest &digest, uint64_t size, uint64_t phase, const EntryFill &fill) {
    if (!enabled()) return false;
    wait_for_commits();  // the owner takes one commit at a time from a worker
    const bool named =
        transfer(digest, size, phase, 0, [&](int pipe) { return send_filled(pipe, size, fill); }) == Transfer::named;
    counted(digest, named);
    return named;
}

void WeightStore::note_activity() {
    last_activity_ns_.store(std::chrono::steady_clock::now().time_since_epoch().count(), std::memory_order_relaxed);
}

void WeightStore::wait_for_quiet() {
    // Copying a model's weights while the guest still uploads them would take the
    // cores and memory bandwidth the upload needs: the store waits for a pause.
    // Unless other workers wait for these bytes rather than receive their own.
    const auto quiet = std::chrono::milliseconds(kQuietMs);
    for (;;) {
        const std::chrono::steady_clock::duration last(last_activity_ns_.load(std::memory_order_relaxed));
        const auto since = std::chrono::steady_clock::now().time_since_epoch() - last;
        if (since >= quiet || draining_.load(std::memory_order_relaxed) || others_wait()) return;
        std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(quiet - since, quiet));
    }
}

void WeightStore::wait_for_commits() { drain(std::chrono::steady_clock::time_point::max(), false); }

void WeightStore::cancel_commits() {
    cancelled_.store(true);
    {
        std::lock_guard<std::mutex> lock(mutex_);
        queue_.clear();
    }
    drain(std::chrono::steady_clock::time_point::max(), false);  // the one under way stops at its next chunk
    cancelled_.store(false);
}

void WeightStore::finish_commits(std::chrono::milliseconds limit) {
    drain(std::chrono::steady_clock::now() + limit, false);
}

void WeightStore::serve_waiters(const std::function<void()> &after_each) {
    if (!enabled() || !commits_pending() || !others_wait()) return;
    drain(std::chrono::steady_clock::now() + kOthersWait, true, after_each);
}

void WeightStore::drain(std::chrono::steady_clock::time_point until, bool keep_polls,
                        const std::function<void()> &after_each) {
    std::unique_lock<std::mutex> lock(mutex_);
    draining_.store(true);
    changed_.wait(lock, [this] { return !busy_; });  // the store's thread takes no more
    std::deque<Queued> polls;
    while (!queue_.empty()) {
        Queued entry = queue_.front();
        queue_.pop_front();
        const bool poll = entry.others_until != std::chrono::steady_clock::time_point{};
        if (poll && keep_polls) {
            polls.push_back(entry);
            continue;
        }
        if (poll || std::chrono::steady_clock::now() >= until) {  // swapped in later, or never: dropped
            lock.unlock();
            counted(entry.digest, false);
            lock.lock();
            continue;
        }
        lock.unlock();
        commit_one(entry, false);
        if (after_each) after_each();
        lock.lock();
    }
    queue_.insert(queue_.end(), polls.begin(), polls.end());
    draining_.store(false);
    changed_.notify_all();
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
    // Copying a model's weights takes as long as receiving them: the store's thread
    // runs only on cores nothing else wants, so a guest's first load is not slowed
    // down by its own commits.
    sched_param idle{};
    (void)::sched_setscheduler(0, SCHED_IDLE, &idle);
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
        changed_.wait(lock, [this] { return stopping_ || (!queue_.empty() && !draining_.load()); });
        if (stopping_ || queue_.empty()) return;
        busy_ = true;
        lock.unlock();
        wait_for_quiet();
        lock.lock();
        if (queue_.empty() || draining_.load()) {  // cancelled, or a session's thread drains it
            busy_ = false;
            changed_.notify_all();
            continue;
        }
        const Queued entry = queue_.front();
        queue_.pop_front();
        lock.unlock();
        commit_one(entry, true);
        lock.lock();
        busy_ = false;
        changed_.notify_all();
    }
}

WeightStore::Transfer WeightStore::send_queued(const Queued &entry) {
    return transfer(entry.digest, entry.size, entry.phase, entry.flags,
                    [&](int pipe) { return send_from_memory(pipe, entry.source, entry.size); });
}

void WeightStore::commit_one(Queued entry, bool may_wait) {
    const auto now = std::chrono::steady_clock::now();
    if (entry.others_until != std::chrono::steady_clock::time_point{}) {
        // Another worker writes it: found once named, then this worker's bytes are
        // swapped for it as if it had written it; given up when it is not.
        StoreEntry found;
        const StoreLookup lookup = find(entry.digest, entry.size, &found, entry.flags);
        if (lookup == StoreLookup::found) return counted(entry.digest, true);
        if (lookup == StoreLookup::missing) {  // the other worker's commit failed: this one's bytes go
            entry.others_until = {};
            return counted(entry.digest, send_queued(entry) == Transfer::named);
        }
        if (now >= entry.others_until) return counted(entry.digest, false);
        std::this_thread::sleep_for(kOthersPoll);
        std::lock_guard<std::mutex> lock(mutex_);
        queue_.push_back(entry);
        return;
    }
    const Transfer result = send_queued(entry);
    if (result == Transfer::in_flight && may_wait) {
        entry.others_until = now + kOthersWait;
        std::lock_guard<std::mutex> lock(mutex_);
        queue_.push_back(entry);
        return;
    }
    counted(entry.digest, result == Transfer::named);
}

}  // namespace ggml_remote::host
