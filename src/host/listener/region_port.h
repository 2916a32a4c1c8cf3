// RegionPort: the listener's side of one ivshmem region (ivshmem_region.h). It
// creates the memory file QEMU maps into a VM, beats the host's heartbeat, notices
// a guest's claim and hands the region to a worker, and makes the region ready
// for the next session when that worker ends. It never decodes the guest's
// bytes: it reads only guest_claim, compared with a generation it keeps itself.
//
// The file is the listener's own: created exclusively (O_EXCL, mode 0600, or 0660
// with the endpoint's group=), never one that exists already unless the endpoint
// says `reuse`, and then only a regular file of this user's, one link, that no
// other user may open. The listener never maps it: it reads and writes the
// control page with pread and pwrite, after checking the file's size, so a file
// that shrinks (its VM, its worker or another process of its user may truncate it)
// cannot fault the listener. It ends that region's session; the region is sized
// again, wiped, and serves the next one.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <string>

#include "protocol/status.h"
#include "transport/endpoint.h"
#include "transport/ivshmem_region.h"
#include "transport/unique_fd.h"

namespace ggml_remote::host {

class RegionPort {
  public:
    RegionPort() = default;
    RegionPort(RegionPort &&) = default;
    RegionPort &operator=(RegionPort &&) = default;
    ~RegionPort();

    // Creates the memory file at endpoint.path, of endpoint.size bytes, and makes it
    // idle. An existing file is refused, unless endpoint.reuse and it is this user's
    // (above) and of that size or empty.
    static Status open(const Endpoint &endpoint, RegionPort *port);

    enum class Event {
        none,
        claimed,   // a guest claimed the idle region: the caller starts a worker and
                   // calls serving(), or ended(-1) when it could not
        resized,   // the file's size changed under a session: the caller ends its worker
        repaired,  // ... while idle: the region was sized, wiped and made idle again
    };
    // Checks the file, beats the heartbeat and looks for a claim.
    Event poll();
    // The region's session is now the worker `pid`'s.
    void serving(pid_t pid);
    // Ends the session, if `pid` is its worker: the region is wiped (and sized again,
    // when it changed) and waits, idle, under a new generation. False when `pid` is
    // not this region's worker.
    bool ended(pid_t pid);
    // The listener stops: guests see the region closed.
    void close();

    int fd() const { return file_.get(); }
    const std::string &name() const { return name_; }
    pid_t worker() const { return worker_; }
    // The file's size now (-1: fstat failed).
    long long file_size() const;

  private:
    bool intact() const { return file_size() == static_cast<long long>(layout_.region_size); }
    void write_at(size_t offset, const void *data, size_t size) const;
    // Writes the host's fields (magic, layout, generation, state) from our copies.
    void publish() const;
    // The state of a fresh generation: the file at its size, rings and heap zeroed,
    // nobody's claim.
    void make_idle();
    bool claim_made();

    std::string name_;
    UniqueFd file_;
    RegionLayout layout_;
    uint64_t generation_ = 0;  // ours; the copies in the region are only published
    RegionState state_ = kRegionClosed;
    uint64_t heartbeat_ = 0;
    uint64_t odd_claim_ = 0;  // a claim of no generation of ours seen by the last poll
    pid_t worker_ = -1;
    bool claimed_ = false;
    bool resized_ = false;  // reported once per session
};

}  // namespace ggml_remote::host
