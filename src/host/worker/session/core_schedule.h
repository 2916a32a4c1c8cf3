// CoreSchedule: the host's cores shared among the sessions that compute at once.
//
// Why: each worker used to size its CPU computes to the whole host. ggml's compute
// threads meet at a barrier after every node (OpenMP's in Debian's builds, a
// spinning one in others) and spin a while for the next graph; with several busy
// guests their threads outnumber the cores, a thread the kernel preempts holds up
// its teammates at the barrier while they spin, and the spinners take the cores
// the computing threads need: four guests at once made a small fraction of one
// guest's tokens (docs/MANY-GUESTS.md has the figures).
//
// How: each worker publishes in its status-board slot (shared memory that the
// listener created) whether it is computing on the CPU, when it last did, and how
// many threads its guest wants. Before each CPU compute it reads the board: the
// sessions that compute or did within kActiveWindowNs are active, and each gets
// its max-min fair share of the cores (share_cores): the same number of threads
// unless it wants fewer, with what those leave shared among the rest, never more
// than its guest asked for and at least one. Every worker computes the shares from
// the same board, so together they use no more threads than cores; with more
// sessions than cores each computes with one thread, which never waits at a
// barrier, and the kernel's scheduler shares the cores fairly among them.
//
// The cores are contended when the shares plus one waiting side per session (a
// guest or worker that spins for its peer) need more than all of them. Then
// nothing spins: not the worker's waits for its guest, not the guest's waits (a
// reply flag tells a guest on this machine), not ggml's own thread pool between
// graphs (paused after each compute). A lone session keeps every spin it had.
//
// Light sessions first (docs/MANY-GUESTS.md). A session that computes less than half its time (a guest
// generating for someone who reads, a chat between prompts) is light; one that
// computes back to back (a batch of prompts) is heavy. Each worker measures its
// own session's pace (SessionPace): the share of its time it computed over the
// last seconds, and the guest's own work between two computes, which sizes how
// long the session still counts as active after a compute (a few of those gaps,
// not a constant tuned on one CPU). Threads stay each session's fair share, light
// or not: a light compute with more threads would wait at every barrier for a
// heavy one's thread. Where the shares take every core (two cores, one light
// guest and three batch ones), three things put the light one first:
// - a heavy compute of one thread runs in the kernel's idle class while light
//   sessions are about and leave half the cores (IdleComputeThread), so a light
//   thread that wakes takes its core at once;
// - a heavy compute of one thread steps aside: after each node it looks (every
//   kYieldCheckNs) whether a light session is active, and sleeps while one is.
//   (With more threads, its other threads would wait at ggml's next barrier
//   meanwhile, some of them spinning.) Bounded, so that
//   no session starves whatever others publish: a compute sleeps at most as long
//   as it has run, plus kYieldAllowanceNs.
// - a light session's thread asks the kernel for a short time slice, so that it
//   runs first when it wakes, also within a heavy compute's node, where nothing
//   steps aside (Linux 6.12 and later; older kernels ignore it).
//
// Why shares and not turns (one compute at a time with every core): a turn would
// let a guest's large graph hold every core while the others wait, and a worker
// that died holding the turn would block them all. Shares need no lock: a worker
// that dies only leaves a slot that stops looking active (the listener clears it
// when it reaps the worker). A compute that is already running keeps its threads
// until it ends, so a newcomer shares the cores fully from the next compute on.
// A slot is written by its own worker only, but every worker can write the whole
// board: a compromised worker can skew the shares, which costs no more than the
// cores it could burn anyway.
#pragma once

#include <cstdint>
#include <vector>

#include "host/common/status_board.h"

namespace ggml_remote::host {

// A session counts as active for this long after its last CPU compute until its
// pace says otherwise: longer than a guest's own work between two tokens' graphs,
// short enough that a guest that pauses gives its cores back within a blink.
constexpr uint64_t kActiveWindowNs = 50'000'000;
// The window from a measured pace: kWindowGaps of the guest's gaps, within these.
constexpr uint64_t kMinActiveWindowNs = 5'000'000;
constexpr uint64_t kMaxActiveWindowNs = 100'000'000;
constexpr uint64_t kWindowGaps = 4;
// The duty is averaged over about this long (an exponential average).
constexpr uint64_t kDutyAverageNs = 2'000'000'000;
// A light session turns heavy above kHeavyDutyMilli, a heavy one light below
// kLightDutyMilli: the margin keeps a session near half its time from flipping.
constexpr uint32_t kLightDutyMilli = 400;
constexpr uint32_t kHeavyDutyMilli = 600;
// A heavy compute that steps aside looks at the board this often, and sleeps at
// most as long as it has run plus this allowance.
constexpr uint64_t kYieldCheckNs = 100'000;
constexpr uint64_t kYieldAllowanceNs = 20'000'000;
// A light session's thread asks the kernel for this time slice (the shortest Linux
// 6.12 takes), so that it runs first when it wakes beside heavy ones.
constexpr uint64_t kLightSliceNs = 100'000;

// Sets the calling thread's time slice in the kernel's fair class (0: the default).
// Linux 6.12 and later read it; older kernels ignore it.
bool set_own_time_slice(uint64_t slice_ns);
// The calling thread's slice as the kernel reports it (0 where it has none).
uint64_t own_time_slice();

// A session's pace, measured by its worker from its own CPU computes.
class SessionPace {
  public:
    // A CPU compute that ran from `begin_ns` to `end_ns` (CLOCK_MONOTONIC).
    void note_compute(uint64_t begin_ns, uint64_t end_ns);
    // The share of its time the session computed lately, in thousandths.
    uint32_t duty_milli() const { return static_cast<uint32_t>(duty_ * 1000.0 + 0.5); }
    bool light() const { return light_; }
    // How long after a compute the session still counts as active.
    uint64_t active_window_ns() const;

  private:
    // A new session starts heavy, at half its time: it earns its priority by its
    // pace, or a guest could take it by connecting anew.
    double duty_ = 0.5;
    double gap_ns_ = 0;  // average of the gaps under kMaxActiveWindowNs
    bool gaps_measured_ = false;
    uint64_t last_end_ns_ = 0;
    bool light_ = false;
};

struct CoreShare {
    int threads = 1;           // for this session's compute: at least 1
    bool contended = false;    // nothing may spin (see above)
    bool steps_aside = false;  // it sleeps while a light session is active (see above)
    bool idle_class = false;   // it runs in the kernel's idle class (see above)
};

// Another active session, as this one's worker reads it from the board.
struct ActiveSession {
    int want = 0;  // threads
    bool light = false;
};

// This session's fair share of `cores` when it wants `own_want` threads (0: it only
// waits for its guest) and is `own_light`, beside other active sessions.
CoreShare share_cores(int cores, int own_want, bool own_light, const std::vector<ActiveSession> &others);
// The same where every session is of one kind.
CoreShare share_cores(int cores, int own_want, const std::vector<int> &others_want);

// The other sessions of `board` that are active at `now_ns` (`own` is left out;
// wants are clamped to 1..cores and windows to their bounds: every worker can
// write the board).
std::vector<ActiveSession> active_sessions(const StatusBoard &board, const SessionSlot *own, uint64_t now_ns,
                                           int cores);
// Only what they want.
std::vector<int> active_wants(const StatusBoard &board, const SessionSlot *own, uint64_t now_ns, int cores);
// Whether a light session other than `own` is active at `now_ns`.
bool light_session_active(const StatusBoard &board, const SessionSlot *own, uint64_t now_ns);
// Whether light sessions other than `own` computed within kDutyAverageNs before
// `now_ns`, and what they compute leaves at least half the `cores` to the others.
bool light_sessions_about(const StatusBoard &board, const SessionSlot *own, uint64_t now_ns, int cores);

// What a session's computes got, for its closing log line.
struct CoreStats {
    uint64_t computes = 0;         // CPU computes
    uint64_t shared_computes = 0;  // of those, while other sessions were active
    int shared_min_threads = 0;    // threads of those (0: none)
    int shared_max_threads = 0;
    uint64_t stepped_aside = 0;     // sleeps while a light session was active
    uint64_t stepped_aside_ns = 0;  // and their time
};

// One worker's side of the schedule.
class CoreSchedule {
  public:
    // `cores` 0: the CPUs this process may run on. Not `enabled`: every compute
    // gets what its guest wants and waits spin as they would alone (the board is
    // still written, for status).
    CoreSchedule(bool enabled, int cores);

    // Publishes in `own` and reads the other sessions from `board`.
    void attach(const StatusBoard *board, SessionSlot *own);

    // Before a CPU compute whose guest wants `wanted` threads: the share it gets.
    CoreShare begin_compute(int wanted);
    // After it, with the threads it used.
    void end_compute(const CoreShare &share);
    // Whether this session's waits must not spin now (read from the board at most
    // every kRecheckNs).
    bool contended();
    // Between two nodes of a compute that steps aside: sleeps while a light session
    // is active, within the bounds above.
    void between_nodes();
    const SessionPace &pace() const { return pace_; }

    int cores() const { return cores_; }
    bool enabled() const { return enabled_; }
    const CoreStats &stats() const { return stats_; }
    // How long the current or last CPU compute slept for a light session.
    uint64_t waited_ns() const { return slept_ns_; }

  private:
    static constexpr uint64_t kRecheckNs = 1'000'000;
    // This session's share now: `own_want` threads of its own compute (0: none).
    CoreShare share_now(int own_want, uint64_t now_ns, bool *others_active);
    // Sleeps while a light session is active, for at most `budget_ns`; the time slept.
    uint64_t step_aside(uint64_t budget_ns);

    bool enabled_;
    int cores_;
    const StatusBoard *board_ = nullptr;
    SessionSlot *own_ = nullptr;
    int last_want_ = 0;
    uint64_t last_end_ns_ = 0;
    bool contended_ = false;
    uint64_t contended_checked_ns_ = 0;
    bool others_at_begin_ = false;
    SessionPace pace_;
    // The CPU compute now running (if `computing_`): when it began, when it last
    // looked at the board, and how long it has slept.
    bool computing_ = false;
    int compute_threads_ = 0;
    uint64_t begin_ns_ = 0;
    uint64_t yield_checked_ns_ = 0;
    uint64_t slept_ns_ = 0;
    bool short_slice_ = false;  // the thread has kLightSliceNs
    CoreStats stats_;
};

}  // namespace ggml_remote::host
