#include "host/worker/session/core_schedule.h"

#include <algorithm>
#include <atomic>

#include "transport/spin_policy.h"

namespace ggml_remote::host {

namespace {

constexpr auto kRelaxed = std::memory_order_relaxed;

// The most threads any one session gets (max-min fairness): every want up to it is
// met in full, and the cores left over are split evenly among the larger wants.
int fair_level(int cores, std::vector<int> wants) {
    std::sort(wants.begin(), wants.end());
    int64_t left = cores;
    int64_t sessions = static_cast<int64_t>(wants.size());
    for (int want : wants) {
        if (want * sessions > left) return static_cast<int>(left / sessions);
        left -= want;
        --sessions;
    }
    return wants.empty() ? cores : wants.back();
}

bool active_at(const SessionSlot &slot, uint64_t now_ns) {
    if (slot.cores_computing.load() != 0) return true;
    const uint64_t last = slot.cores_last_compute_ns.load(kRelaxed);
    // (another worker's clock reading may be a little later than ours)
    return last != 0 && (last >= now_ns || now_ns - last <= kActiveWindowNs);
}

}  // namespace

CoreShare share_cores(int cores, int own_want, const std::vector<int> &others_want) {
    cores = std::max(cores, 1);
    own_want = std::clamp(own_want, 0, cores);
    std::vector<int> wants;
    wants.reserve(others_want.size() + 1);
    for (int want : others_want) wants.push_back(std::clamp(want, 0, cores));
    wants.push_back(own_want);
    const int level = fair_level(cores, wants);
    int64_t used = 0;
    for (int want : wants) used += std::min(want, level);
    CoreShare share;
    share.threads = std::max(1, std::min(own_want, level));
    share.contended = !others_want.empty() && used + static_cast<int64_t>(wants.size()) > cores;
    return share;
}

std::vector<int> active_wants(const StatusBoard &board, const SessionSlot *own, uint64_t now_ns, int cores) {
    std::vector<int> wants;
    for (uint32_t i = 0; i < board.slots(); ++i) {
        const SessionSlot *slot = board.slot(i);
        if (slot == own || slot->live.load(kRelaxed) == 0) continue;
        const uint32_t want = slot->cores_wanted.load(kRelaxed);
        if (want == 0 || !active_at(*slot, now_ns)) continue;  // (0: never computed on the CPU)
        wants.push_back(static_cast<int>(std::min<uint32_t>(want, static_cast<uint32_t>(std::max(cores, 1)))));
    }
    return wants;
}

CoreSchedule::CoreSchedule(bool enabled, int cores)
    : enabled_(enabled), cores_(cores > 0 ? cores : SpinPolicy::usable_cpus()) {}

void CoreSchedule::attach(const StatusBoard *board, SessionSlot *own) {
    board_ = board;
    own_ = own;
}

CoreShare CoreSchedule::share_now(int own_want, uint64_t now_ns, bool *others_active) {
    std::vector<int> others;
    if (board_ != nullptr) others = active_wants(*board_, own_, now_ns, cores_);
    *others_active = !others.empty();
    return share_cores(cores_, own_want, others);
}

CoreShare CoreSchedule::begin_compute(int wanted) {
    wanted = std::max(wanted, 1);
    last_want_ = wanted;
    if (own_ != nullptr) {
        own_->cores_wanted.store(static_cast<uint32_t>(wanted), kRelaxed);
        // Published before the others are read (both sequentially consistent): of
        // two sessions that start at once, at least one sees the other.
        own_->cores_computing.store(1);
    }
    const uint64_t now = SpinPolicy::now_ns();
    CoreShare share = share_now(wanted, now, &others_at_begin_);
    if (!enabled_) share = CoreShare{wanted, false};
    contended_ = share.contended;
    contended_checked_ns_ = now;
    if (own_ != nullptr) own_->cores_threads.store(static_cast<uint32_t>(share.threads), kRelaxed);
    return share;
}

void CoreSchedule::end_compute(const CoreShare &share) {
    last_end_ns_ = SpinPolicy::now_ns();
    ++stats_.computes;
    if (others_at_begin_) {
        ++stats_.shared_computes;
        const bool first = stats_.shared_min_threads == 0;
        stats_.shared_min_threads = first ? share.threads : std::min(stats_.shared_min_threads, share.threads);
        stats_.shared_max_threads = std::max(stats_.shared_max_threads, share.threads);
    }
    if (own_ == nullptr) return;
    own_->cores_last_compute_ns.store(last_end_ns_, kRelaxed);
    own_->cores_shared_computes.store(stats_.shared_computes, kRelaxed);
    own_->cores_computing.store(0);
}

bool CoreSchedule::contended() {
    if (!enabled_ || board_ == nullptr) return false;
    const uint64_t now = SpinPolicy::now_ns();
    if (now - contended_checked_ns_ < kRecheckNs) return contended_;
    // A session between two of its own computes still holds its share; one that
    // has not computed lately only has its waits.
    const bool active = last_end_ns_ != 0 && now - last_end_ns_ <= kActiveWindowNs;
    bool others_active = false;
    contended_ = share_now(active ? last_want_ : 0, now, &others_active).contended;
    contended_checked_ns_ = now;
    return contended_;
}

}  // namespace ggml_remote::host
