// Histograms of durations that sessions report for /metrics, with fixed bucket
// bounds listed once here: a worker counts into its status board slot, and the
// listener renders the counts against the same bounds (the board's layout check
// covers them). Counts are kept per bucket, not cumulative, so that a worker's
// numbers cannot say that a smaller bound holds more than a larger one.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>

namespace ggml_remote::host {

constexpr size_t kHistogramBounds = 12;
// Upper bounds in nanoseconds, increasing; one more bucket holds what is above all.
using HistogramBounds = std::array<uint64_t, kHistogramBounds>;

// A compute, a wait for cores, a token's round trip: 100 us to 10 s.
constexpr HistogramBounds kShortBoundsNs = {100'000,     500'000,     1'000'000,     2'500'000,
                                            5'000'000,   10'000'000,  25'000'000,    50'000'000,
                                            100'000'000, 250'000'000, 1'000'000'000, 10'000'000'000};
// A session: 1 s to a day.
constexpr uint64_t kSecondNs = 1'000'000'000;
constexpr HistogramBounds kSessionBoundsNs = {
    1 * kSecondNs,    10 * kSecondNs,   30 * kSecondNs,    60 * kSecondNs,    300 * kSecondNs,   600 * kSecondNs,
    1800 * kSecondNs, 3600 * kSecondNs, 10800 * kSecondNs, 21600 * kSecondNs, 43200 * kSecondNs, 86400 * kSecondNs};

// What one worker may claim, read back by the listener: more observations per
// bucket, or a longer mean, than a session could make is a forged number.
constexpr uint64_t kMaxBucketCount = uint64_t{1} << 40;
constexpr uint64_t kMaxObservationNs = 7 * 86400 * kSecondNs;

inline uint64_t nanoseconds_since(std::chrono::steady_clock::time_point start) {
    const auto elapsed = std::chrono::steady_clock::now() - start;
    return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed).count());
}

inline uint64_t saturating_add(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

struct HistogramCounts {
    std::array<uint64_t, kHistogramBounds + 1> buckets{};  // the last: above every bound
    uint64_t sum_ns = 0;

    void observe(const HistogramBounds &bounds, uint64_t ns) {
        size_t bucket = 0;
        while (bucket < kHistogramBounds && ns > bounds[bucket]) ++bucket;
        ++buckets[bucket];
        sum_ns = saturating_add(sum_ns, ns);
    }
    uint64_t count() const {
        uint64_t total = 0;
        for (const uint64_t in_bucket : buckets) total = saturating_add(total, in_bucket);
        return total;
    }
    void add(const HistogramCounts &other) {
        for (size_t i = 0; i < buckets.size(); ++i) buckets[i] = saturating_add(buckets[i], other.buckets[i]);
        sum_ns = saturating_add(sum_ns, other.sum_ns);
    }
    // Bounds counts a worker wrote: each bucket at most kMaxBucketCount, the sum at
    // most kMaxObservationNs per observation.
    void clamp() {
        for (uint64_t &in_bucket : buckets) in_bucket = in_bucket < kMaxBucketCount ? in_bucket : kMaxBucketCount;
        const uint64_t observations = count();
        const uint64_t most =
            observations > UINT64_MAX / kMaxObservationNs ? UINT64_MAX : observations * kMaxObservationNs;
        if (sum_ns > most) sum_ns = most;
    }
};

// The histograms each session's worker counts, in /metrics' order.
enum class SessionHistogram : size_t { graph_compute, cores_wait, compute_round_trip };
constexpr size_t kSessionHistograms = 3;

struct HistogramSpec {
    const char *metric;  // after ggml_remote_, without _bucket, _sum, _count
    const HistogramBounds *bounds;
    const char *help;
};

constexpr HistogramSpec kSessionHistogramSpecs[kSessionHistograms] = {
    {"graph_compute_seconds", &kShortBoundsNs, "Time a graph compute took on its device"},
    {"cores_wait_seconds", &kShortBoundsNs,
     "Time a CPU compute waited, stepped aside, for cores that other sessions needed"},
    {"compute_round_trip_seconds", &kShortBoundsNs,
     "Time from a compute request's arrival to the next reply sent (a token's round trip as the server sees it)"},
};

// A session's length, timed by the listener itself.
constexpr HistogramSpec kSessionLengthSpec = {"session_length_seconds", &kSessionBoundsNs,
                                              "How long guest sessions lasted, from admission to their worker's end"};

}  // namespace ggml_remote::host
