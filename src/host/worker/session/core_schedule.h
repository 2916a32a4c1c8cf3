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

// A session counts as active for this long after its last CPU compute: longer than
// a guest's own work between two tokens' graphs, short enough that a guest that
// pauses gives its cores back within a blink.
constexpr uint64_t kActiveWindowNs = 50'000'000;

struct CoreShare {
    int threads = 1;         // for this session's compute: at least 1
    bool contended = false;  // nothing may spin (see above)
};

// This session's fair share of `cores` when it wants `own_want` threads (0: it only
// waits for its guest) beside other active sessions that want `others_want`.
CoreShare share_cores(int cores, int own_want, const std::vector<int> &others_want);

// What the other sessions of `board` that are active at `now_ns` want (`own` is
// left out; wants are clamped to 1..cores: every worker can write the board).
std::vector<int> active_wants(const StatusBoard &board, const SessionSlot *own, uint64_t now_ns, int cores);

// What a session's computes got, for its closing log line.
struct CoreStats {
    uint64_t computes = 0;         // CPU computes
    uint64_t shared_computes = 0;  // of those, while other sessions were active
    int shared_min_threads = 0;    // threads of those (0: none)
    int shared_max_threads = 0;
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

    int cores() const { return cores_; }
    bool enabled() const { return enabled_; }
    const CoreStats &stats() const { return stats_; }

  private:
    static constexpr uint64_t kRecheckNs = 1'000'000;
    // This session's share now: `own_want` threads of its own compute (0: none).
    CoreShare share_now(int own_want, uint64_t now_ns, bool *others_active);

    bool enabled_;
    int cores_;
    const StatusBoard *board_ = nullptr;
    SessionSlot *own_ = nullptr;
    int last_want_ = 0;
    uint64_t last_end_ns_ = 0;
    bool contended_ = false;
    uint64_t contended_checked_ns_ = 0;
    bool others_at_begin_ = false;
    CoreStats stats_;
};

}  // namespace ggml_remote::host
