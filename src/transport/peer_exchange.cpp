#include "transport/peer_exchange.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstring>
#include <ctime>
#include <string>
#include <thread>

namespace ggml_remote {

namespace {

// A rank's published step that says it left the group (steps never reach it).
constexpr uint32_t kGone = UINT32_MAX;
// Spinning first answers a peer that is a few microseconds behind without two
// system calls; a peer further behind is waited for asleep.
constexpr auto kSpin = std::chrono::microseconds(30);

long futex(std::atomic<uint32_t> *word, int op, uint32_t value, const timespec *timeout) {
    // Not FUTEX_PRIVATE: the word is in memory shared with other processes.
    return ::syscall(SYS_futex, reinterpret_cast<uint32_t *>(word), op, value, timeout, nullptr, 0);
}

// How often a rank that waits asleep looks whether the peer's process still lives.
constexpr auto kLivenessCheck = std::chrono::milliseconds(100);

// The byte of the file whose lock says that `rank`'s process lives (beyond the
// file's end: locks need no bytes there, and no data is locked).
struct flock lock_of(uint32_t rank, short type) {
    struct flock lock{};
    lock.l_type = type;
    lock.l_whence = SEEK_SET;
    lock.l_start = static_cast<off_t>((1ull << 40) + rank);
    lock.l_len = 1;
    return lock;
}

timespec as_timespec(std::chrono::nanoseconds span) {
    const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(span);
    return timespec{static_cast<time_t>(seconds.count()), static_cast<long>((span - seconds).count())};
}

}  // namespace

struct PeerExchange::Header {
    std::atomic<uint32_t> published;  // the last step whose partial is in the slots
    uint32_t reserved;
    std::atomic<uint64_t> bytes;  // of that partial
    uint8_t token[16];
};
static_assert(sizeof(std::atomic<uint32_t>) == 4 && std::atomic<uint32_t>::is_always_lock_free);
static_assert(sizeof(PeerExchange::Token) == 16);

Status PeerExchange::check_place(const Place &place) {
    if (place.ranks < 2 || place.ranks > kMaxRanks) {
        return error(Code::bad_request, "a tensor-parallel group has 2 to " + std::to_string(kMaxRanks) +
                                            " servers, not " + std::to_string(place.ranks));
    }
    if (place.rank >= place.ranks) {
        return error(Code::bad_request, "rank " + std::to_string(place.rank) + " of a group of " +
                                            std::to_string(place.ranks) + " does not exist");
    }
    if (place.slot_bytes == 0 || place.slot_bytes % 64 != 0 || place.slot_bytes > kMaxSlotBytes) {
        return error(Code::bad_request, "a group's slot holds a multiple of 64 bytes up to " +
                                            std::to_string(kMaxSlotBytes) + ", not " +
                                            std::to_string(place.slot_bytes));
    }
    return Status::success();
}

uint64_t PeerExchange::area_bytes(const Place &place) {
    // Bounded by check_place: 16 ranks x 2 slots x 256 MiB, far from overflowing.
    return uint64_t{place.ranks} * kHeaderBytes + uint64_t{place.ranks} * 2 * place.slot_bytes;
}

Status PeerExchange::create_area(const Place &place, UniqueFd *file) {
    if (Status s = check_place(place); !s) return s;
    return create_shared_memory(area_bytes(place), "ggml-remote-peer-exchange", file);
}

Status PeerExchange::watch(int fd, const Place &place, PeerExchange *exchange) {
    if (Status s = check_place(place); !s) return s;
    return exchange->map_area(fd, place);
}

Status PeerExchange::map_area(int fd, const Place &place) {
    if (Status s = Mapping::map(fd, 0, area_bytes(place), true, &mapping_); !s) return s;
    place_ = place;
    return Status::success();
}

Status PeerExchange::attach(UniqueFd file, const Place &place, PeerExchange *exchange) {
    if (Status s = check_place(place); !s) return s;
    if (Status s = check_sealed_memory(file.get(), area_bytes(place)); !s) return s;
    struct flock rank_lock = lock_of(place.rank, F_WRLCK);
    if (::fcntl(file.get(), F_SETLK, &rank_lock) != 0) {
        return error(Code::bad_request, "rank " + std::to_string(place.rank) +
                                            " of the group is another process's already: " + std::strerror(errno));
    }
    if (Status s = exchange->map_area(file.get(), place); !s) return s;
    exchange->file_ = std::move(file);
    exchange->watch_peer_processes_ = true;
    Header *own = exchange->header(place.rank);
    std::memcpy(own->token, place.token.data(), sizeof(own->token));
    own->bytes.store(0, std::memory_order_relaxed);
    own->published.store(0, std::memory_order_release);
    return Status::success();
}

PeerExchange::Header *PeerExchange::header(uint32_t rank) const {
    return reinterpret_cast<Header *>(static_cast<uint8_t *>(mapping_.data()) + uint64_t{rank} * kHeaderBytes);
}

float *PeerExchange::slot(uint32_t rank, uint32_t step) const {
    const uint64_t index = uint64_t{rank} * 2 + (step % 2);
    uint8_t *base = static_cast<uint8_t *>(mapping_.data()) + uint64_t{place_.ranks} * kHeaderBytes;
    return reinterpret_cast<float *>(base + index * place_.slot_bytes);
}

bool PeerExchange::peer_process_alive(uint32_t rank) const {
    struct flock probe = lock_of(rank, F_WRLCK);
    if (::fcntl(file_.get(), F_GETLK, &probe) != 0) return true;  // cannot tell: the deadline decides
    return probe.l_type != F_UNLCK;
}

Status PeerExchange::fail(Status status) {
    broken_ = status;
    return status;
}

void PeerExchange::mark_gone(uint32_t rank) {
    if (mapping_.data() == nullptr || rank >= place_.ranks) return;
    Header *gone = header(rank);
    gone->published.store(kGone, std::memory_order_release);
    (void)futex(&gone->published, FUTEX_WAKE, INT_MAX, nullptr);
}

Status PeerExchange::wait_for(uint32_t rank, uint32_t step, uint64_t bytes,
                              std::chrono::steady_clock::time_point deadline) {
    Header *peer = header(rank);
    const std::string who = "tensor-parallel peer rank " + std::to_string(rank);
    const auto spin_until = std::chrono::steady_clock::now() + kSpin;
    for (;;) {
        const uint32_t seen = peer->published.load(std::memory_order_acquire);
        if (seen == kGone) return error(Code::error, who + " left the group (its server was lost)");
        const uint32_t ahead = seen - step;  // 0: at our step; 1: one past it
        if (ahead <= 1) break;
        if (seen != step - 1) {
            return error(Code::bad_request, who + " says it is at step " + std::to_string(seen) + " where we are at " +
                                                std::to_string(step));
        }
        const auto now = std::chrono::steady_clock::now();
        if (now >= deadline) return error(Code::error, who + " sent nothing for step " + std::to_string(step));
        if (now < spin_until) continue;
        if (watch_peer_processes_ && !peer_process_alive(rank)) {
            return error(Code::error, who + " is gone: its server's process ended");
        }
        const timespec nap = as_timespec(std::min<std::chrono::nanoseconds>(deadline - now, kLivenessCheck));
        (void)futex(&peer->published, FUTEX_WAIT, seen, &nap);
    }
    uint8_t token[sizeof(Token)];
    std::memcpy(token, peer->token, sizeof(token));
    if (std::memcmp(token, place_.token.data(), sizeof(token)) != 0) {
        return error(Code::bad_request, who + " is not of this session's group (another token)");
    }
    // Its slot for step s is read below: only if it says it wrote our size there.
    const uint64_t its_bytes = peer->bytes.load(std::memory_order_relaxed);
    if (peer->published.load(std::memory_order_acquire) == step && its_bytes != bytes) {
        return error(Code::bad_request, who + " sent " + std::to_string(its_bytes) + " bytes where " +
                                            std::to_string(bytes) + " were due");
    }
    return Status::success();
}

Status PeerExchange::all_reduce_f32(float *values, size_t count, std::chrono::milliseconds timeout) {
    if (!broken_.ok()) return broken_;
    const uint64_t bytes = uint64_t{count} * sizeof(float);
    if (bytes > place_.slot_bytes) {
        return error(Code::bad_request, "an all-reduce of " + std::to_string(bytes) +
                                            " bytes exceeds the group's slot of " + std::to_string(place_.slot_bytes));
    }
    if (step_ + 1 == kGone) return fail(error(Code::limit_exceeded, "the group ran out of steps; join a new one"));
    const uint32_t step = step_ + 1;
    std::memcpy(slot(place_.rank, step), values, bytes);
    Header *own = header(place_.rank);
    own->bytes.store(bytes, std::memory_order_relaxed);
    own->published.store(step, std::memory_order_release);
    (void)futex(&own->published, FUTEX_WAKE, INT_MAX, nullptr);
    step_ = step;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (uint32_t rank = 0; rank < place_.ranks; ++rank) {
        if (rank == place_.rank) continue;
        if (Status s = wait_for(rank, step, bytes, deadline); !s) return fail(s);
    }
    // In rank order on every rank: the same additions, so the same bits.
    std::memcpy(values, slot(0, step), bytes);
    for (uint32_t rank = 1; rank < place_.ranks; ++rank) {
        const float *partial = slot(rank, step);
        for (size_t i = 0; i < count; ++i) values[i] += partial[i];
    }
    return Status::success();
}

}  // namespace ggml_remote
