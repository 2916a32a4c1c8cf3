// RingChannel: a session's frames through shared memory instead of the socket.
//
// On one host (shm: sessions) the server creates a memory file holding two byte
// rings, guest-to-host and host-to-guest, and passes it with the handshake's
// reply. Each ring is single-producer, single-consumer: the writer copies bytes in
// and publishes how many it has written; the reader copies them out and
// publishes how many it has read. A side that finds nothing to do spins (see
// SpinPolicy), then sleeps on a futex "doorbell" that the other side rings only
// when someone sleeps. The unix socket stays open, for file descriptors and to notice that the
// peer died: a sleeping side wakes every kLivenessCheckMs to look at it. The
// header also carries the CPU the worker last ran on, which a guest about to
// sleep behind a compute follows (follow_worker()), and the server's heartbeat:
// where the session granted keep-alives, the worker beats it while it computes
// (beat()), and a guest waiting on the ring hears it as the server's liveness.
//
// The host never trusts the shared bytes: it keeps its own count of what it has
// written and read, checks the guest's counts against the ring's capacity before
// use, and copies every frame out of the ring before decoding it.
#pragma once

#include <sys/uio.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "protocol/status.h"
#include "transport/shared_memory.h"
#include "transport/spin_policy.h"
#include "transport/unique_fd.h"

namespace ggml_remote {

// Bytes each direction holds; longer frames stream through in pieces.
constexpr size_t kRingCapacity = 1u << 20;
// Bytes before the rings' data in the memory file.
constexpr size_t kRingHeaderBytes = 4096;
// How often a side that sleeps on a doorbell checks that its peer is still there.
constexpr int kLivenessCheckMs = 100;

class RingChannel {
  public:
    enum class Side { host, guest };

    // Host: creates the memory file (its descriptor goes to the guest).
    static Status create(size_t capacity, UniqueFd *fd, std::unique_ptr<RingChannel> *channel);
    // Guest: maps the memory file the host created.
    static Status attach(int fd, std::unique_ptr<RingChannel> *channel);
    // A ring pair inside a larger region (ivshmem: a VM's memory, see
    // ivshmem_region.h): its RegionHeader at `header_offset`, its data right after
    // kRingHeaderBytes, both inside `region` (the caller checked). The channel keeps
    // `region` mapped. No futex doorbells (a VM's kernel cannot wake the host's
    // threads, nor the host a VM's): a waiting side polls, backing off, and asks
    // `peer_gone` every kLivenessCheckMs; the peer socket passed to read() and
    // write() is not used.
    static std::unique_ptr<RingChannel> in_region(Side side, std::shared_ptr<const Mapping> region,
                                                  size_t header_offset, size_t capacity,
                                                  std::function<bool()> peer_gone);

    // Writes every byte of `parts`, waiting while the ring is full.
    // `peer_socket` is watched for the peer's death while waiting.
    Status write(const iovec *parts, size_t count, int peer_socket);
    // Reads exactly `size` bytes, waiting while the ring is empty.
    Status read(void *data, size_t size, int peer_socket);

    // The next `size` incoming bytes, read where they lie: `take` gets each
    // contiguous piece of the ring in turn (at least `min_piece` bytes unless
    // fewer remain before the end of the data or of the ring), which is released
    // when it returns. The peer may change a piece meanwhile: `take` must use it
    // as data only (a tensor's bytes), never decode it. Counts stay this side's.
    using PieceReader = std::function<void(const uint8_t *piece, size_t size)>;
    Status read_in_place(uint64_t size, size_t min_piece, const PieceReader &take, int peer_socket);
    // The next `size` outgoing bytes, written where they go: `fill` writes each
    // free contiguous piece of the ring in turn (at least `min_piece` bytes unless
    // fewer remain), which is published when it returns.
    using PieceWriter = std::function<void(uint8_t *piece, size_t size)>;
    Status write_in_place(uint64_t size, size_t min_piece, const PieceWriter &fill, int peer_socket);

    size_t capacity() const { return capacity_; }
    // Guest, about to sleep behind a compute (wait() calls it): moves this thread to
    // the CPU the worker last ran on, when it is elsewhere (see the .cpp).
    void follow_worker();
    // The process's options (how to wait, whether to follow the worker).
    void set_options(const WaitOptions &options) {
        spin_.set_options(options);
        follow_worker_ = options.follow_worker;
    }
    // The longest a read or write waits with nothing from the peer (0: no limit);
    // then it fails (a guest's reply timeout).
    void set_silence_limit_ms(int ms) { silence_limit_ns_ = ms > 0 ? uint64_t(ms) * 1000000 : 0; }
    // Guest, where the server keeps the session alive: each beat of the server's
    // heartbeat ends a silence; a wait still fails after `cap_ms` (0: no cap), so
    // that a server that only beats cannot hold the guest for ever.
    void heed_heartbeat(int cap_ms) {
        heeds_heartbeat_ = true;
        wait_cap_ns_ = cap_ms > 0 ? uint64_t(cap_ms) * 1000000 : 0;
    }
    // Host: the worker is alive and working (a keep-alive). Any thread: one atomic
    // add, never a wait, so that a guest that reads nothing costs nothing.
    void beat() { header_->server_heartbeat.fetch_add(1, std::memory_order_relaxed); }
    // See SpinPolicy::set_peer_busy.
    void set_peer_busy(bool busy) { spin_.set_peer_busy(busy); }
    // See SpinPolicy::set_compute_threads.
    void set_compute_threads(int threads) { spin_.set_compute_threads(threads); }
    // See SpinPolicy::set_cores_contended.
    void set_cores_contended(bool contended) { spin_.set_cores_contended(contended); }

    // One direction's shared counters and doorbells, each on its own cache line.
    struct RingState {
        alignas(64) std::atomic<uint64_t> written;
        alignas(64) std::atomic<uint64_t> read;
        alignas(64) std::atomic<uint32_t> data_doorbell;  // rung when bytes arrive and the reader sleeps
        std::atomic<uint32_t> reader_sleeping;
        alignas(64) std::atomic<uint32_t> space_doorbell;  // rung when bytes leave and the writer sleeps
        std::atomic<uint32_t> writer_sleeping;
    };
    // The memory file starts with this; the guest-to-host ring's bytes follow at
    // kRingHeaderBytes, then the host-to-guest ring's.
    struct RegionHeader {
        uint32_t magic;
        uint32_t version;
        uint64_t capacity;
        RingState rings[2];  // [0]: guest to host, [1]: host to guest
        // The CPU the server's worker last ran on (see follow_worker()); a hint
        // the guest reads, never the host.
        alignas(64) std::atomic<int32_t> worker_cpu;
        // The server's keep-alives (beat()); only the guest reads it, and only as a
        // sign of life. Where an older server left it zero it never moves.
        alignas(64) std::atomic<uint64_t> server_heartbeat;
    };

  private:
    RingChannel(Side side, Mapping mapping, size_t capacity);
    RingChannel(Side side, std::shared_ptr<const Mapping> region, size_t header_offset, size_t capacity);
    void locate_rings();
    // A side's view of one direction, with its own copy of the count it owns.
    struct Direction {
        RingState *state = nullptr;
        uint8_t *data = nullptr;
        uint64_t own = 0;  // bytes this side has written (outgoing) or read (incoming)
    };
    // Waits on a doorbell until `ready()` holds, or fails when the peer is gone.
    template <class Ready>
    Status wait(std::atomic<uint32_t> *doorbell, std::atomic<uint32_t> *sleeping, Ready ready, int peer_socket);
    // The next contiguous free piece of the outgoing ring, of at least `want`
    // bytes (at most what is left before the ring's end), once there.
    Status next_free_piece(size_t want, size_t *at, size_t *size, int peer_socket);
    // The next contiguous piece of incoming bytes, at least `want` of them (at
    // most what is left before the ring's end), once there.
    Status next_data_piece(size_t want, size_t *at, size_t *size, int peer_socket);
    void publish_written(size_t bytes);
    void publish_read(size_t bytes);
    // wait() without doorbells (in_region): sleeps between looks, longer and longer.
    template <class Ready>
    Status poll_until(Ready ready, uint64_t start);

    Side side_;
    Mapping mapping_;                        // create(), attach()
    std::shared_ptr<const Mapping> region_;  // in_region()
    RegionHeader *header_ = nullptr;
    std::function<bool()> peer_gone_;  // in_region(): polls instead of doorbells
    size_t capacity_;
    Direction out_, in_;
    SpinPolicy spin_;
    bool follow_worker_ = true;
    uint64_t silence_limit_ns_ = 0;
    bool heeds_heartbeat_ = false;
    uint64_t wait_cap_ns_ = 0;
    // One wait's clocks: since it began, and since the peer was last heard.
    struct Patience {
        uint64_t start = 0;
        uint64_t heard_at = 0;
        uint64_t beats = 0;
    };
    Patience patience_from(uint64_t start) const;
    // Fails once the wait has outlasted the silence limit, or the cap.
    Status check_patience(Patience *patience) const;
    uint64_t last_follow_ns_ = 0;  // guest: when follow_worker() last moved this thread
};

}  // namespace ggml_remote
