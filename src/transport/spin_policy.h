// SpinPolicy: how long a side that waits for its peer spins before it sleeps.
//
// A sleeping side costs its peer a wake-up: microseconds on an idle machine, but up
// to ~100 us in a VM whose idle vCPU the hypervisor has descheduled. So a wait that
// has lately been short (up to WaitOptions::max_spin_ns, default 200 us) is spun
// through, for a quarter longer than the last one. The estimate is the whole wait,
// sleep included: sized only from the spins that succeeded, both sides' spins
// would shrink below each other's wake-up time and stay there, each side always
// waking the other.
//
// A wait for a peer that is busy does not spin at all: the guest's wait behind a
// compute (the host's threads want every core then), and the host's wait for the
// guest's next graph after answering a compute (the guest does its own work
// between graphs, while the compute's other threads still spin on the other
// cores: a spinning worker would leave the guest no core to run on). Unless the
// machine has cores to spare: with at least two more usable CPUs than the compute
// has threads, the waiting side spins there too, as for any other wait. There a
// sleeping side's wake-up lands on an idle vCPU, which in a VM costs tens of
// microseconds a token (figures: docs/BENCHMARKS.md, "a 16-core machine").
// WaitOptions::spin_on_spare_cores false turns that off (then a busy peer's wait
// never spins).
//
// No wait spins while the host's cores are contended: when other sessions compute
// on them too and no core is left for a spinning side (host/core_schedule.h). A
// spin there would take a core from another session's compute.
#pragma once

#include <cstdint>

#include "transport/wait_options.h"

namespace ggml_remote {

class SpinPolicy {
  public:
    // The process's options; before the first set_compute_threads().
    void set_options(const WaitOptions &options) { options_ = options; }
    // How long the next wait may spin, in nanoseconds.
    uint64_t spin_ns() const { return cores_contended_ || (peer_busy_ && !spare_cores_) ? 0 : spin_ns_; }
    // Sizes the next spin from how long this wait took, spin and sleep together.
    void note_wait(uint64_t waited_ns);
    // Set while the peer is known to be busy (see above).
    void set_peer_busy(bool busy) { peer_busy_ = busy; }
    bool peer_busy() const { return peer_busy_; }
    // The threads a compute keeps busy (0: not known, as if every core): decides
    // whether a busy peer leaves cores to spare (see above).
    void set_compute_threads(int threads);
    bool spins_behind_busy_peer() const { return peer_busy_ && spare_cores_; }
    // Set while the host's cores are contended (see above).
    void set_cores_contended(bool contended) { cores_contended_ = contended; }

    // The CPUs this process may run on (its affinity mask when first asked).
    static int usable_cpus();

    static uint64_t now_ns();

  private:
    // Just enough for an answer already on its way.
    static constexpr uint64_t kShortSpinNs = 2000;
    WaitOptions options_;
    uint64_t spin_ns_ = kShortSpinNs;
    bool peer_busy_ = false;
    bool spare_cores_ = false;
    bool cores_contended_ = false;
};

}  // namespace ggml_remote
