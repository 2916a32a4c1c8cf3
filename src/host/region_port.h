// RegionPort: the listener's side of one ivshmem region (ivshmem_region.h). It
// creates the memory file QEMU maps into a VM, beats the host's heartbeat, notices
// a guest's claim and hands the region to a worker, and makes the region ready
// for the next session when that worker ends. It never decodes the guest's
// bytes: it reads only guest_claim, compared with a generation it keeps itself.
#pragma once

#include "protocol/status.h"
#include "transport/endpoint.h"
#include "transport/ivshmem_region.h"
#include "transport/shared_memory.h"
#include "transport/unique_fd.h"

#include <sys/types.h>

#include <string>

namespace ggml_remote::host {

class RegionPort {
  public:
    RegionPort() = default;
    RegionPort(RegionPort &&) = default;
    RegionPort &operator=(RegionPort &&) = default;
    ~RegionPort();

    // Creates (or takes over, when it has the same size) the memory file at
    // endpoint.path, of endpoint.size bytes, and makes it idle. A file of another
    // size is refused: QEMU may map it, and resizing would fault its pages.
    static Status open(const Endpoint &endpoint, RegionPort *port);

    // Beats the heartbeat; true when a guest claimed the idle region (the caller
    // then starts a worker and calls serving(), or ends() when it could not).
    bool poll();
    // The region's session is now the worker `pid`'s.
    void serving(pid_t pid);
    // Ends the session, if `pid` is its worker: the region is wiped and waits, idle,
    // under a new generation. False when `pid` is not this region's worker.
    bool ended(pid_t pid);
    // The listener stops: guests see the region closed.
    void close();

    int fd() const { return file_.get(); }
    const std::string &name() const { return name_; }
    pid_t worker() const { return worker_; }

  private:
    RegionControl *control() const { return static_cast<RegionControl *>(mapping_.data()); }
    // Writes the host's fields (magic, layout, generation, state) from our copies.
    void publish();
    // The state of a fresh generation: rings and heap zeroed, nobody's claim.
    void make_idle();

    std::string name_;
    UniqueFd file_;
    Mapping mapping_;
    RegionLayout layout_;
    uint64_t generation_ = 0;  // ours; the copies in the region are only published
    RegionState state_ = kRegionClosed;
    pid_t worker_ = -1;
    bool claimed_ = false;
};

}  // namespace ggml_remote::host
