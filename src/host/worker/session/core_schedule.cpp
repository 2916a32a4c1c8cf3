#include "host/worker/session/core_schedule.h"

#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>

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

// The threads a session of one kind gets at `level` (one at least, to compute at all).
int threads_at(int want, int level) { return want == 0 ? 0 : std::max(1, std::min(want, level)); }

// How long `slot`'s session counts as active after a compute (a forged window is
// held to the bounds).
uint64_t window_of(const SessionSlot &slot) {
    const uint64_t window = slot.cores_window_ns.load(kRelaxed);
    return window == 0 ? kActiveWindowNs : std::clamp(window, kMinActiveWindowNs, kMaxActiveWindowNs);
}

bool active_at(const SessionSlot &slot, uint64_t now_ns) {
    if (slot.cores_computing.load() != 0) return true;
    const uint64_t last = slot.cores_last_compute_ns.load(kRelaxed);
    // (another worker's clock reading may be a little later than ours)
    return last != 0 && (last >= now_ns || now_ns - last <= window_of(slot));
}

bool other_live(const SessionSlot *slot, const SessionSlot *own) {
    return slot != own && slot->live.load(kRelaxed) != 0 && slot->cores_wanted.load(kRelaxed) != 0;
}

// The kernel's struct sched_attr, first version (glibc's own declaration is newer
// than some sysroots).
struct ThreadSchedAttr {
    uint32_t size, policy;
    uint64_t flags;
    int32_t nice;
    uint32_t priority;
    uint64_t runtime, deadline, period;
};

bool own_sched_attr(ThreadSchedAttr *attr) {
    *attr = ThreadSchedAttr{};
    return ::syscall(SYS_sched_getattr, 0, attr, sizeof(*attr), 0) == 0;
}

}  // namespace

bool set_own_time_slice(uint64_t slice_ns) {
    ThreadSchedAttr attr;
    if (!own_sched_attr(&attr) || attr.policy != SCHED_OTHER) return false;
    attr.size = sizeof(attr);
    attr.flags = 0;
    attr.runtime = slice_ns;
    return ::syscall(SYS_sched_setattr, 0, &attr, 0) == 0;
}

uint64_t own_time_slice() {
    ThreadSchedAttr attr;
    return own_sched_attr(&attr) ? attr.runtime : 0;
}

void SessionPace::note_compute(uint64_t begin_ns, uint64_t end_ns) {
    end_ns = std::max(end_ns, begin_ns + 1);
    const uint64_t since = last_end_ns_ != 0 && begin_ns >= last_end_ns_ ? end_ns - last_end_ns_ : end_ns - begin_ns;
    // An exponential average over time: a long pause weighs as much as it lasted.
    const double kept = std::exp(-static_cast<double>(since) / static_cast<double>(kDutyAverageNs));
    const double busy = static_cast<double>(end_ns - begin_ns) / static_cast<double>(since);
    duty_ = duty_ * kept + busy * (1.0 - kept);
    if (last_end_ns_ != 0 && begin_ns >= last_end_ns_ && begin_ns - last_end_ns_ < kMaxActiveWindowNs) {
        const double gap = static_cast<double>(begin_ns - last_end_ns_);
        gap_ns_ = gaps_measured_ ? gap_ns_ + (gap - gap_ns_) / 8 : gap;
        gaps_measured_ = true;
    }
    last_end_ns_ = end_ns;
    const uint32_t duty = duty_milli();
    if (light_ && duty > kHeavyDutyMilli) light_ = false;
    if (!light_ && duty < kLightDutyMilli) light_ = true;
}

uint64_t SessionPace::active_window_ns() const {
    if (!gaps_measured_) return kActiveWindowNs;
    return std::clamp(static_cast<uint64_t>(gap_ns_) * kWindowGaps, kMinActiveWindowNs, kMaxActiveWindowNs);
}

CoreShare share_cores(int cores, int own_want, bool own_light, const std::vector<ActiveSession> &others) {
    cores = std::max(cores, 1);
    own_want = std::clamp(own_want, 0, cores);
    std::vector<int> wants{own_want};
    bool light_other = false;
    for (const ActiveSession &other : others) {
        wants.push_back(std::clamp(other.want, 0, cores));
        light_other = light_other || other.light;
    }
    // Every session's threads are its fair share of all the cores, light or not: a
    // heavy compute steps aside only between two nodes, and a light compute with
    // more threads than that would have them wait at every barrier meanwhile.
    const int level = fair_level(cores, wants);
    int64_t used = 0;
    for (int want : wants) used += threads_at(want, level);
    CoreShare share;
    share.threads = std::max(1, std::min(own_want, level));
    share.contended = !others.empty() && used + static_cast<int64_t>(wants.size()) > cores;
    // Where the shares leave no core to spare, a light session's compute would wait
    // for a heavy one's time slice.
    share.steps_aside = !own_light && light_other && used >= cores;
    return share;
}

CoreShare share_cores(int cores, int own_want, const std::vector<int> &others_want) {
    std::vector<ActiveSession> others;
    for (int want : others_want) others.push_back(ActiveSession{want, false});
    return share_cores(cores, own_want, false, others);
}

std::vector<ActiveSession> active_sessions(const StatusBoard &board, const SessionSlot *own, uint64_t now_ns,
                                           int cores) {
    std::vector<ActiveSession> sessions;
    for (uint32_t i = 0; i < board.slots(); ++i) {
        const SessionSlot *slot = board.slot(i);
        // (a want of 0: it never computed on the CPU)
        if (!other_live(slot, own) || !active_at(*slot, now_ns)) continue;
        const uint32_t want = std::min<uint32_t>(slot->cores_wanted.load(kRelaxed), std::max(cores, 1));
        sessions.push_back(ActiveSession{static_cast<int>(want), slot->cores_light.load(kRelaxed) != 0});
    }
    return sessions;
}

std::vector<int> active_wants(const StatusBoard &board, const SessionSlot *own, uint64_t now_ns, int cores) {
    std::vector<int> wants;
    for (const ActiveSession &session : active_sessions(board, own, now_ns, cores)) wants.push_back(session.want);
    return wants;
}

bool light_session_active(const StatusBoard &board, const SessionSlot *own, uint64_t now_ns) {
    for (uint32_t i = 0; i < board.slots(); ++i) {
        const SessionSlot *slot = board.slot(i);
        if (other_live(slot, own) && slot->cores_light.load(kRelaxed) != 0 && active_at(*slot, now_ns)) return true;
    }
    return false;
}

bool light_sessions_about(const StatusBoard &board, const SessionSlot *own, uint64_t now_ns, int cores) {
    bool found = false;
    uint64_t demand_milli = 0;  // thousandths of a core
    for (uint32_t i = 0; i < board.slots(); ++i) {
        const SessionSlot *slot = board.slot(i);
        if (!other_live(slot, own) || slot->cores_light.load(kRelaxed) == 0) continue;
        const uint64_t last = slot->cores_last_compute_ns.load(kRelaxed);
        if (slot->cores_computing.load(kRelaxed) == 0 &&
            (last == 0 || (last < now_ns && now_ns - last > kDutyAverageNs)))
            continue;
        found = true;
        // (a forged figure is held to what a light session can be)
        const uint64_t duty = std::min<uint64_t>(slot->cores_duty_milli.load(kRelaxed), kHeavyDutyMilli);
        const uint64_t threads = std::clamp<uint64_t>(slot->cores_threads.load(kRelaxed), 1, std::max(cores, 1));
        demand_milli += duty * threads;
    }
    return found && demand_milli * 2 <= static_cast<uint64_t>(std::max(cores, 1)) * 1000;
}

CoreSchedule::CoreSchedule(bool enabled, int cores)
    : enabled_(enabled), cores_(cores > 0 ? cores : SpinPolicy::usable_cpus()) {}

void CoreSchedule::attach(const StatusBoard *board, SessionSlot *own) {
    board_ = board;
    own_ = own;
    if (own_ != nullptr) own_->cores_light.store(pace_.light() ? 1 : 0, kRelaxed);
}

CoreShare CoreSchedule::share_now(int own_want, uint64_t now_ns, bool *others_active) {
    std::vector<ActiveSession> others;
    if (board_ != nullptr) others = active_sessions(*board_, own_, now_ns, cores_);
    *others_active = !others.empty();
    return share_cores(cores_, own_want, pace_.light(), others);
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
    share.idle_class =
        !pace_.light() && share.threads == 1 && board_ != nullptr && light_sessions_about(*board_, own_, now, cores_);
    if (!enabled_) share = CoreShare{wanted, false, false, false};
    contended_ = share.contended;
    contended_checked_ns_ = now;
    computing_ = true;
    compute_threads_ = share.threads;
    begin_ns_ = yield_checked_ns_ = now;
    slept_ns_ = 0;
    if (own_ != nullptr) own_->cores_threads.store(static_cast<uint32_t>(share.threads), kRelaxed);
    return share;
}

void CoreSchedule::end_compute(const CoreShare &share) {
    last_end_ns_ = SpinPolicy::now_ns();
    computing_ = false;
    // Time spent asleep for a light session is not the session's own computing.
    pace_.note_compute(std::min(begin_ns_ + slept_ns_, last_end_ns_), last_end_ns_);
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
    if (enabled_ && pace_.light() != short_slice_) {
        short_slice_ = pace_.light();
        set_own_time_slice(short_slice_ ? kLightSliceNs : 0);
    }
    own_->cores_light.store(pace_.light() ? 1 : 0, kRelaxed);
    own_->cores_duty_milli.store(pace_.duty_milli(), kRelaxed);
    own_->cores_window_ns.store(pace_.active_window_ns(), kRelaxed);
    own_->cores_computing.store(0);
}

bool CoreSchedule::contended() {
    if (!enabled_ || board_ == nullptr) return false;
    const uint64_t now = SpinPolicy::now_ns();
    if (now - contended_checked_ns_ < kRecheckNs) return contended_;
    // A session between two of its own computes still holds its share; one that
    // has not computed lately only has its waits.
    const bool active = last_end_ns_ != 0 && now - last_end_ns_ <= pace_.active_window_ns();
    bool others_active = false;
    contended_ = share_now(active ? last_want_ : 0, now, &others_active).contended;
    contended_checked_ns_ = now;
    return contended_;
}

void CoreSchedule::between_nodes() {
    // (With more threads, ggml's others would wait at the next barrier meanwhile, some
    // of them spinning.)
    if (!computing_ || compute_threads_ != 1 || !enabled_ || board_ == nullptr || pace_.light()) return;
    const uint64_t now = SpinPolicy::now_ns();
    if (now - yield_checked_ns_ < kYieldCheckNs) return;
    yield_checked_ns_ = now;
    // A light session may have become active since the compute began. (Looked for
    // first: the shares, which build a list, are only needed when there is one.)
    if (!light_session_active(*board_, own_, now)) return;
    bool others_active = false;
    if (!share_now(last_want_, now, &others_active).steps_aside) return;
    // Asleep at most as long as the compute has run, plus the allowance.
    const uint64_t ran = now - begin_ns_ - slept_ns_;
    const uint64_t limit = ran + kYieldAllowanceNs;
    if (slept_ns_ >= limit) return;
    const uint64_t slept = step_aside(limit - slept_ns_);
    if (slept == 0) return;
    slept_ns_ += slept;
    ++stats_.stepped_aside;
    stats_.stepped_aside_ns += slept;
    yield_checked_ns_ = SpinPolicy::now_ns();
}

uint64_t CoreSchedule::step_aside(uint64_t budget_ns) {
    const uint64_t start = SpinPolicy::now_ns();
    uint64_t now = start;
    bool slept = false;
    while (now - start < budget_ns && light_session_active(*board_, own_, now)) {
        const timespec pause{0, static_cast<long>(kYieldCheckNs)};
        ::nanosleep(&pause, nullptr);
        slept = true;
        now = SpinPolicy::now_ns();
    }
    return slept ? now - start : 0;
}

}  // namespace ggml_remote::host
