#include "transport/spin_policy.h"

#include <sched.h>
#include <time.h>

#include <algorithm>
#include <cstdlib>
#include <string_view>

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

bool spin_on_spare_cores() {
    static const bool on = [] {
        const char *text = std::getenv("GGML_REMOTE_SPIN_SPARE");
        return text == nullptr || std::string_view(text) != "0";
    }();
    return on;
}

}  // namespace

void SpinPolicy::set_compute_threads(int threads) {
    spare_cores_ = spin_on_spare_cores() && threads > 0 && usable_cpus() >= threads + 2;
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
    spin_ns_ = wanted <= max_spin_ns() ? std::max(wanted, kShortSpinNs) : kShortSpinNs;
}

}  // namespace ggml_remote
