// RateBucket: a token bucket, the listener's one way to bound something over time
// (worker starts per peer, dials per session). It holds at most `burst` tokens and
// gains `per_second` a second; a spend takes one, or is refused when none is left.
#pragma once

#include <algorithm>
#include <chrono>

namespace ggml_remote::host {

class RateBucket {
  public:
    using Clock = std::chrono::steady_clock;

    // Starts full: a peer that was quiet may do a burst at once.
    RateBucket(double burst, double per_second, Clock::time_point now)
        : burst_(burst), per_second_(per_second), tokens_(burst), last_(now) {}

    // Whether a token is left at `now`; spends none.
    bool can_spend(Clock::time_point now) {
        refill(now);
        return tokens_ >= 1.0;
    }
    // Spends one token if one is left.
    bool spend(Clock::time_point now) {
        if (!can_spend(now)) return false;
        tokens_ -= 1.0;
        return true;
    }
    // Full again at `now`: as if it had never been used, so it may be forgotten.
    bool full(Clock::time_point now) {
        refill(now);
        return tokens_ >= burst_;
    }
    // How long until one token is left (zero: now).
    Clock::duration until_next(Clock::time_point now) {
        refill(now);
        if (tokens_ >= 1.0 || per_second_ <= 0) return Clock::duration::zero();
        return std::chrono::duration_cast<Clock::duration>(
            std::chrono::duration<double>((1.0 - tokens_) / per_second_));
    }

  private:
    void refill(Clock::time_point now) {
        if (now <= last_) return;
        const double seconds = std::chrono::duration<double>(now - last_).count();
        tokens_ = std::min(burst_, tokens_ + seconds * per_second_);
        last_ = now;
    }

    double burst_;
    double per_second_;
    double tokens_;
    Clock::time_point last_;
};

}  // namespace ggml_remote::host
