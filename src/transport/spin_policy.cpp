#include "transport/spin_policy.h"

#include <time.h>

#include <algorithm>
#include <cstdlib>

namespace ggml_remote {

namespace {

constexpr uint64_t kDefaultMaxSpinNs = 200000;

uint64_t max_spin_ns() {
    static const uint64_t value = [] {
        const char *text = std::getenv("GGML_REMOTE_RING_SPIN_US");
        if (text == nullptr || *text == '\0') return kDefaultMaxSpinNs;
        char *end = nullptr;
        const unsigned long long us = std::strtoull(text, &end, 10);
        if (end == text || *end != '\0' || us > 100000) return kDefaultMaxSpinNs;
        return static_cast<uint64_t>(us) * 1000;
    }();
    return value;
}

}  // namespace

uint64_t SpinPolicy::now_ns() {
    timespec ts;
    ::clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

void SpinPolicy::note_wait(uint64_t waited_ns) {
    if (peer_busy_) return;  // says nothing about short waits
    const uint64_t wanted = waited_ns + waited_ns / 4;
    spin_ns_ = wanted <= max_spin_ns() ? std::max(wanted, kShortSpinNs) : kShortSpinNs;
}

}  // namespace ggml_remote
