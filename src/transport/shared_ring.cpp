#include "transport/shared_ring.h"

#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

namespace ggml_remote {

namespace {

constexpr uint32_t kRingMagic = 0x474e4952;  // "RING"
constexpr uint32_t kRingLayoutVersion = 2;
static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<uint32_t>::is_always_lock_free,
              "shared counters must be lock-free to work across processes");
static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t), "a doorbell is a futex word");

using RegionHeader = RingChannel::RegionHeader;
static_assert(sizeof(RegionHeader) <= kRingHeaderBytes, "ring header fits its page");

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
}

uint32_t *futex_word(std::atomic<uint32_t> *word) { return reinterpret_cast<uint32_t *>(word); }

void ring_doorbell(std::atomic<uint32_t> *doorbell, std::atomic<uint32_t> *sleeping) {
    // Pairs with the sleeper's store of `sleeping` and re-check: one of the two sees the other.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (sleeping->load(std::memory_order_relaxed) == 0) return;
    doorbell->fetch_add(1, std::memory_order_release);
    ::syscall(SYS_futex, futex_word(doorbell), FUTEX_WAKE, 1, nullptr, nullptr, 0);
}

bool peer_gone(int socket) {
    pollfd watch{socket, POLLRDHUP, 0};
    return ::poll(&watch, 1, 0) > 0 && (watch.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

Status corrupt(const char *what) {
    return error(Code::bad_request, std::string("shared ring: the peer's ") + what + " count is impossible");
}

}  // namespace

RingChannel::RingChannel(Side side, Mapping mapping, size_t capacity)
    : side_(side), mapping_(std::move(mapping)), capacity_(capacity) {
    header_ = static_cast<RegionHeader *>(mapping_.data());
    locate_rings();
}

RingChannel::RingChannel(Side side, std::shared_ptr<const Mapping> region, size_t header_offset, size_t capacity)
    : side_(side), region_(std::move(region)), capacity_(capacity) {
    header_ = reinterpret_cast<RegionHeader *>(static_cast<uint8_t *>(region_->data()) + header_offset);
    locate_rings();
}

std::unique_ptr<RingChannel> RingChannel::in_region(Side side, std::shared_ptr<const Mapping> region,
                                                    size_t header_offset, size_t capacity,
                                                    std::function<bool()> peer_gone) {
    std::unique_ptr<RingChannel> channel(new RingChannel(side, std::move(region), header_offset, capacity));
    channel->peer_gone_ = std::move(peer_gone);
    return channel;
}

void RingChannel::locate_rings() {
    RegionHeader *header = header_;
    auto *data = reinterpret_cast<uint8_t *>(header) + kRingHeaderBytes;
    const int out = side_ == Side::guest ? 0 : 1;
    out_.state = &header->rings[out];
    out_.data = data + static_cast<size_t>(out) * capacity_;
    in_.state = &header->rings[1 - out];
    in_.data = data + static_cast<size_t>(1 - out) * capacity_;
}

Status RingChannel::create(size_t capacity, UniqueFd *fd, std::unique_ptr<RingChannel> *channel) {
    UniqueFd file;
    const size_t size = kRingHeaderBytes + 2 * capacity;
    Status status = create_shared_memory(size, "ggml-remote-ring", &file);
    if (!status) return status;
    Mapping mapping;
    status = Mapping::map(file.get(), 0, size, true, &mapping);
    if (!status) return status;
    auto *header = new (mapping.data()) RegionHeader{};
    header->magic = kRingMagic;
    header->version = kRingLayoutVersion;
    header->capacity = capacity;
    header->worker_cpu.store(-1, std::memory_order_relaxed);
    channel->reset(new RingChannel(Side::host, std::move(mapping), capacity));
    *fd = std::move(file);
    return Status::success();
}

Status RingChannel::attach(int fd, std::unique_ptr<RingChannel> *channel) {
    struct stat info;
    if (::fstat(fd, &info) != 0 || info.st_size < static_cast<off_t>(kRingHeaderBytes)) {
        return error(Code::error, "shared ring: the server's memory file is too small");
    }
    const size_t size = static_cast<size_t>(info.st_size);
    if (Status sealed = check_sealed_memory(fd, size); !sealed)
        return error(Code::error, "shared ring: " + sealed.message());
    Mapping mapping;
    Status status = Mapping::map(fd, 0, size, true, &mapping);
    if (!status) return status;
    const auto *header = static_cast<const RegionHeader *>(mapping.data());
    if (header->magic != kRingMagic || header->version != kRingLayoutVersion || header->capacity == 0 ||
        header->capacity > (size - kRingHeaderBytes) / 2) {
        return error(Code::error, "shared ring: the server's memory file has an unknown layout");
    }
    const size_t capacity = header->capacity;
    channel->reset(new RingChannel(Side::guest, std::move(mapping), capacity));
    return Status::success();
}

// A futex wake-up leaves the woken thread on the CPU it last ran on. When the
// server computes on every core, its compute threads spin there between graphs,
// and a guest that once woke next to one of them (rather than next to the worker,
// which sleeps while the guest works) stays there: at each token it waits for
// that thread to give the core up, while the worker's core idles. That costs the
// tiny model's tokens half their rate, for the whole life of a process. So a
// guest that is about to sleep behind a compute, on another CPU than the worker,
// moves to the worker's CPU (its own affinity mask, narrowed and then restored,
// so the application's mask is kept), at most every 100 ms.
void RingChannel::follow_worker() {
    constexpr uint64_t kMinIntervalNs = 100 * 1000 * 1000;
    if (side_ != Side::guest || !follow_worker_) return;
    const int worker = header_->worker_cpu.load(std::memory_order_relaxed);
    const int here = ::sched_getcpu();
    if (worker < 0 || worker >= CPU_SETSIZE || here < 0 || here == worker) return;
    const uint64_t now = SpinPolicy::now_ns();
    if (now - last_follow_ns_ < kMinIntervalNs) return;
    last_follow_ns_ = now;
    cpu_set_t mask;
    if (::sched_getaffinity(0, sizeof(mask), &mask) != 0 || !CPU_ISSET(worker, &mask)) return;
    cpu_set_t only;
    CPU_ZERO(&only);
    CPU_SET(worker, &only);
    if (::sched_setaffinity(0, sizeof(only), &only) == 0) (void)::sched_setaffinity(0, sizeof(mask), &mask);
}

template <class Ready>
Status RingChannel::wait(std::atomic<uint32_t> *doorbell, std::atomic<uint32_t> *sleeping, Ready ready,
                         int peer_socket) {
    const uint64_t start = SpinPolicy::now_ns();
    const uint64_t spin = spin_.spin_ns();
    for (uint64_t now = start; now - start < spin; now = SpinPolicy::now_ns()) {
        if (ready()) {
            spin_.note_wait(SpinPolicy::now_ns() - start);
            return Status::success();
        }
        cpu_relax();
    }
    if (peer_gone_) return poll_until(ready, start);
    if (spin_.peer_busy()) follow_worker();
    Patience patience = patience_from(start);
    for (;;) {
        const uint32_t seen = doorbell->load(std::memory_order_acquire);
        sleeping->store(1, std::memory_order_seq_cst);
        if (ready()) {
            sleeping->store(0, std::memory_order_relaxed);
            spin_.note_wait(SpinPolicy::now_ns() - start);
            return Status::success();
        }
        timespec limit{0, kLivenessCheckMs * 1000000L};
        const long woken = ::syscall(SYS_futex, futex_word(doorbell), FUTEX_WAIT, seen, &limit, nullptr, 0);
        const int err = errno;
        sleeping->store(0, std::memory_order_relaxed);
        if (ready()) {
            spin_.note_wait(SpinPolicy::now_ns() - start);
            return Status::success();
        }
        if (woken != 0 && err == ETIMEDOUT && peer_gone(peer_socket)) {
            return error(Code::disconnected, "shared ring: connection closed by peer");
        }
        if (Status s = check_patience(&patience); !s) return s;
    }
}

RingChannel::Patience RingChannel::patience_from(uint64_t start) const {
    const uint64_t beats = heeds_heartbeat_ ? header_->server_heartbeat.load(std::memory_order_relaxed) : 0;
    return Patience{start, start, beats};
}

Status RingChannel::check_patience(Patience *patience) const {
    const uint64_t now = SpinPolicy::now_ns();
    if (heeds_heartbeat_) {
        const uint64_t beats = header_->server_heartbeat.load(std::memory_order_relaxed);
        if (beats != patience->beats) {
            patience->beats = beats;
            patience->heard_at = now;
        }
        if (wait_cap_ns_ != 0 && now - patience->start >= wait_cap_ns_) {
            return error(Code::disconnected, "shared ring: the peer kept the session alive for " +
                                                 std::to_string(wait_cap_ns_ / 1000000) +
                                                 " ms but sent nothing (the reply timeout)");
        }
    }
    if (silence_limit_ns_ != 0 && now - patience->heard_at >= silence_limit_ns_) {
        return error(Code::disconnected,
                     "shared ring: the peer was silent for " + std::to_string(silence_limit_ns_ / 1000000) + " ms");
    }
    return Status::success();
}

Status RingChannel::next_free_piece(size_t want, size_t *at, size_t *size, int peer_socket) {
    for (;;) {
        const uint64_t peer_read = out_.state->read.load(std::memory_order_acquire);
        if (peer_read > out_.own || out_.own - peer_read > capacity_) return corrupt("read");
        const size_t space = capacity_ - static_cast<size_t>(out_.own - peer_read);
        *at = static_cast<size_t>(out_.own % capacity_);
        *size = std::min(space, capacity_ - *at);
        if (*size > 0 && *size >= std::min(want, capacity_ - *at)) return Status::success();
        Status status = wait(
            &out_.state->space_doorbell, &out_.state->writer_sleeping,
            [&] { return out_.state->read.load(std::memory_order_acquire) != peer_read; }, peer_socket);
        if (!status) return status;
    }
}

Status RingChannel::next_data_piece(size_t want, size_t *at, size_t *size, int peer_socket) {
    if (side_ == Side::host) {
        header_->worker_cpu.store(::sched_getcpu(), std::memory_order_relaxed);
    }
    for (;;) {
        const uint64_t peer_written = in_.state->written.load(std::memory_order_acquire);
        if (peer_written < in_.own || peer_written - in_.own > capacity_) return corrupt("written");
        const size_t available = static_cast<size_t>(peer_written - in_.own);
        *at = static_cast<size_t>(in_.own % capacity_);
        *size = std::min(available, capacity_ - *at);
        if (*size > 0 && *size >= std::min(want, capacity_ - *at)) return Status::success();
        Status status = wait(
            &in_.state->data_doorbell, &in_.state->reader_sleeping,
            [&] { return in_.state->written.load(std::memory_order_acquire) != peer_written; }, peer_socket);
        if (!status) return status;
    }
}

void RingChannel::publish_written(size_t bytes) {
    out_.own += bytes;
    out_.state->written.store(out_.own, std::memory_order_release);
    ring_doorbell(&out_.state->data_doorbell, &out_.state->reader_sleeping);
}

void RingChannel::publish_read(size_t bytes) {
    in_.own += bytes;
    in_.state->read.store(in_.own, std::memory_order_release);
    ring_doorbell(&in_.state->space_doorbell, &in_.state->writer_sleeping);
}

// Pauses start short, for a peer that answers within microseconds, and double up
// to a limit that grows once the peer has been idle for a while: a VM's guest that
// waits for its user costs the host a few wake-ups a second, not thousands.
template <class Ready>
Status RingChannel::poll_until(Ready ready, uint64_t start) {
    constexpr uint64_t kFirstPauseNs = 10 * 1000, kBusyPauseNs = 500 * 1000, kIdlePauseNs = 20 * 1000 * 1000;
    constexpr uint64_t kIdleAfterNs = 1000ull * 1000 * 1000, kCheckEveryNs = kLivenessCheckMs * 1000000ull;
    uint64_t pause_ns = kFirstPauseNs, checked = start;
    Patience patience = patience_from(start);
    for (bool first = true;; first = false) {
        if (ready()) {
            spin_.note_wait(SpinPolicy::now_ns() - start);
            return Status::success();
        }
        const uint64_t now = SpinPolicy::now_ns();
        if (first || now - checked >= kCheckEveryNs) {
            checked = now;
            if (peer_gone_()) return error(Code::disconnected, "shared ring: the peer is gone");
            if (Status s = check_patience(&patience); !s) return s;
        }
        timespec pause{0, static_cast<long>(pause_ns)};
        ::nanosleep(&pause, nullptr);
        pause_ns = std::min(pause_ns * 2, now - start < kIdleAfterNs ? kBusyPauseNs : kIdlePauseNs);
    }
}

Status RingChannel::write(const iovec *parts, size_t count, int peer_socket) {
    for (size_t i = 0; i < count; ++i) {
        const auto *bytes = static_cast<const uint8_t *>(parts[i].iov_base);
        size_t left = parts[i].iov_len;
        while (left > 0) {
            size_t at = 0, free = 0;
            if (Status s = next_free_piece(1, &at, &free, peer_socket); !s) return s;
            const size_t n = std::min(left, free);
            std::memcpy(out_.data + at, bytes, n);
            bytes += n;
            left -= n;
            publish_written(n);
        }
    }
    return Status::success();
}

Status RingChannel::read(void *data, size_t size, int peer_socket) {
    auto *out = static_cast<uint8_t *>(data);
    while (size > 0) {
        size_t at = 0, available = 0;
        if (Status s = next_data_piece(1, &at, &available, peer_socket); !s) return s;
        const size_t n = std::min(size, available);
        std::memcpy(out, in_.data + at, n);
        out += n;
        size -= n;
        publish_read(n);
    }
    return Status::success();
}

Status RingChannel::read_in_place(uint64_t size, size_t min_piece, const PieceReader &take, int peer_socket) {
    while (size > 0) {
        size_t at = 0, available = 0;
        const size_t want = static_cast<size_t>(std::min<uint64_t>(size, std::max<size_t>(min_piece, 1)));
        if (Status s = next_data_piece(want, &at, &available, peer_socket); !s) return s;
        const size_t n = static_cast<size_t>(std::min<uint64_t>(size, available));
        take(in_.data + at, n);
        size -= n;
        publish_read(n);
    }
    return Status::success();
}

Status RingChannel::write_in_place(uint64_t size, size_t min_piece, const PieceWriter &fill, int peer_socket) {
    while (size > 0) {
        size_t at = 0, free = 0;
        const size_t want = static_cast<size_t>(std::min<uint64_t>(size, std::max<size_t>(min_piece, 1)));
        if (Status s = next_free_piece(want, &at, &free, peer_socket); !s) return s;
        const size_t n = static_cast<size_t>(std::min<uint64_t>(size, free));
        fill(out_.data + at, n);
        size -= n;
        publish_written(n);
    }
    return Status::success();
}

}  // namespace ggml_remote
