// An ivshmem region: one memory file that the server creates and QEMU maps into a
// virtual machine as the BAR2 of an ivshmem-plain PCI device. Everything a session
// needs lives in it, since there is no socket and no descriptor passing into a VM:
//
//   [0, 4 KiB)        RegionControl: layout, session generation and state, heartbeats
//   [4 KiB, 8 KiB)    the ring pair's header (RingChannel::RegionHeader)
//   [8 KiB, +2 rings) the guest-to-host and host-to-guest rings' bytes
//   [heap_offset, end) the heap: buffers in CPU memory (2 MiB aligned)
//
// One session at a time. The listener keeps the state machine on its own side
// (idle -> serving -> idle with the next generation) and only publishes it here;
// a guest asks for a session by writing the idle generation into guest_claim. A
// guest that vanishes is noticed by its heartbeat going quiet; a server that
// vanishes, by its own. The host reads nothing of the region's layout back: it
// computes it from the region's size (layout_for), so a guest that scribbles over
// the control page changes only what the guest itself reads.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "protocol/status.h"
#include "transport/endpoint.h"
#include "transport/shared_memory.h"
#include "transport/shared_ring.h"
#include "transport/unique_fd.h"

namespace ggml_remote {

constexpr uint32_t kRegionMagic = 0x56494752;  // "RGIV"
constexpr uint32_t kRegionVersion = 1;
constexpr size_t kRegionControlBytes = 4096;
constexpr size_t kRegionHeapAlignment = 2u << 20;
// The smallest region: the rings and a 2 MiB heap; QEMU wants a power of two.
constexpr uint64_t kRegionMinBytes = 8u << 20;
// A side whose heartbeat has not moved for this long is gone.
constexpr int kRegionSilenceMs = 3000;
// How often a side beats.
constexpr int kRegionHeartbeatMs = 100;

enum RegionState : uint32_t { kRegionClosed = 0, kRegionIdle = 1, kRegionServing = 2 };

struct RegionLayout {
    uint64_t region_size = 0;
    uint64_t ring_offset = 0;  // the RingChannel::RegionHeader; its data follows kRingHeaderBytes later
    uint64_t ring_capacity = 0;
    uint64_t heap_offset = 0;
    uint64_t heap_size = 0;
};

// The region's first page. The host writes the layout, generation, state and its
// heartbeat; the guest writes the three guest_ fields. Neither trusts the other's.
struct RegionControl {
    uint32_t magic;
    uint32_t version;
    RegionLayout layout;
    alignas(64) std::atomic<uint64_t> generation;  // the session the region serves, or waits to serve
    std::atomic<uint32_t> state;                   // RegionState
    std::atomic<uint64_t> host_heartbeat;
    alignas(64) std::atomic<uint64_t> guest_claim;  // the idle generation the guest asks to start
    std::atomic<uint64_t> guest_heartbeat;
    std::atomic<uint64_t> guest_closed;  // nonzero: the guest ended its session
};

// The layout of a region of `size` bytes (a power of two, at least
// kRegionMinBytes), or an error saying why not.
Status layout_for(uint64_t size, RegionLayout *layout);
// Whether a layout read from a region of `mapped` bytes is one layout_for makes
// (the guest's check of what it maps).
Status check_layout(const RegionLayout &layout, uint64_t mapped);

// Notices a heartbeat that stopped: the time is this side's own clock, so the two
// sides never compare clocks.
class HeartbeatWatch {
  public:
    // Whether `value` has not changed for `silence_ms` (counted from the first look).
    bool silent(uint64_t value, int silence_ms);

  private:
    bool started_ = false;
    uint64_t last_value_ = 0;
    uint64_t changed_ns_ = 0;
};

// The host's side of the worker's session: the ring pair at its place, which says
// the guest is gone when it closes, when its heartbeat stops, or when
// `ended_socket` (-1: none) is shut down (the watchdog's way to end a wait). `fd`
// is the region the listener created; its layout comes from its size.
Status serve_region_rings(int fd, int ended_socket, std::unique_ptr<RingChannel> *ring,
                          std::shared_ptr<const Mapping> *region, RegionLayout *layout);

// The guest's session on a region: mapped, claimed, and kept alive by a heartbeat
// thread until destroyed, which tells the host the session is over.
class GuestRegion {
  public:
    ~GuestRegion();
    // Maps the endpoint's region (a PCI device's BAR2 or, on the host, the file),
    // checks it, and claims a session within `timeout_ms`.
    static Status open(const Endpoint &endpoint, int timeout_ms, std::shared_ptr<GuestRegion> *region);
    // The ring pair, which fails its waits once the server is gone. It keeps this
    // region open.
    static std::unique_ptr<RingChannel> rings(const std::shared_ptr<GuestRegion> &region);
    // A descriptor of the mapped file, for the stream that carries the rings.
    UniqueFd duplicate_fd() const;
    const RegionLayout &layout() const { return layout_; }
    uint8_t *base() const { return static_cast<uint8_t *>(mapping_->data()); }
    // Whether the server ended this session (its heartbeat stopped, or it reset the region).
    bool server_gone();
    // Stops the heartbeat and tells the server the session is over; once.
    void close();

  private:
    GuestRegion() = default;
    Status map(const Endpoint &endpoint);
    Status claim(int timeout_ms);
    RegionControl *control() const { return static_cast<RegionControl *>(mapping_->data()); }

    std::string name_;
    UniqueFd fd_;
    std::shared_ptr<const Mapping> mapping_;
    RegionLayout layout_;
    uint64_t generation_ = 0;
    HeartbeatWatch server_watch_;
    std::atomic<bool> stopping_{false};
    std::thread heartbeat_;
    std::mutex closing_;
    bool closed_ = false;
};

}  // namespace ggml_remote
