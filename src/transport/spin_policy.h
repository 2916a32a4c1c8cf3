// SpinPolicy: how long a side that waits for its peer spins before it sleeps.
//
// A sleeping side costs its peer a wake-up: microseconds on an idle machine, but up
// to ~100 us in a VM whose idle vCPU the hypervisor has descheduled. So a wait that
// has lately been short (up to GGML_REMOTE_RING_SPIN_US, default 200 us) is spun
// through, for a quarter longer than the last one. The estimate is the whole wait,
// sleep included: sized only from the spins that succeeded, both sides' spins
// would shrink below each other's wake-up time and stay there, each side always
// waking the other. A wait behind a compute (the guest's, for its reply) spins
// only briefly: the host's threads want every core then.
#pragma once

#include <cstdint>

namespace ggml_remote {

class SpinPolicy {
  public:
    // How long the next wait may spin, in nanoseconds.
    uint64_t spin_ns() const { return peer_computing_ ? kShortSpinNs : spin_ns_; }
    // Sizes the next spin from how long this wait took, spin and sleep together.
    void note_wait(uint64_t waited_ns);
    // Set by the guest while the reply it waits for is behind a compute.
    void set_peer_computing(bool computing) { peer_computing_ = computing; }

    static uint64_t now_ns();

  private:
    // Just enough for an answer already on its way.
    static constexpr uint64_t kShortSpinNs = 2000;
    uint64_t spin_ns_ = kShortSpinNs;
    bool peer_computing_ = false;
};

}  // namespace ggml_remote
