#include "transport/spin_policy.h"

#include <sched.h>
#include <time.h>

#include <algorithm>

namespace ggml_remote {

void SpinPolicy::set_compute_threads(int threads) {
    spare_cores_ = options_.spin_on_spare_cores && threads > 0 && usable_cpus() >= threads + 2;
}

uint64_t SpinPolicy::now_ns() {
    timespec ts;
    ::clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

int SpinPolicy::usable_cpus() {
    static const int count = [] {
        cpu_set_t set;
        CPU_ZERO(&set);
        return ::sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
    }();
    return count;
}

void SpinPolicy::note_wait(uint64_t waited_ns) {
    if (spin_ns() == 0) return;  // a wait that could not spin says nothing about short waits
    const uint64_t wanted = waited_ns + waited_ns / 4;
    spin_ns_ = wanted <= options_.max_spin_ns ? std::max(wanted, kShortSpinNs) : kShortSpinNs;
}

}  // namespace ggml_remote
