// StatusBoard: what every live session is doing, in shared memory that the
// listener creates and each worker writes its own slot of, so that a status
// query (ggml-remote-server status) sees all sessions without asking each worker.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>

#include "host/common/refusals.h"
#include "host/common/session_figures.h"
#include "protocol/status.h"
#include "transport/shared_memory.h"
#include "transport/unique_fd.h"

namespace ggml_remote::host {

struct SessionSlot {
    std::atomic<uint32_t> live;  // 0: free
    int32_t id;
    int32_t pid;
    int64_t started_unix;
    char peer[112];
    // GGML_REMOTE_SESSION_FIGURES, written by the worker after every command (its
    // limits too: they never change, and one path is simpler than two).
#define GGML_REMOTE_FIGURE_ATOMIC(field, kind, reply, metric, from, help) std::atomic<uint64_t> field;
    GGML_REMOTE_SESSION_FIGURES(GGML_REMOTE_FIGURE_ATOMIC)
#undef GGML_REMOTE_FIGURE_ATOMIC
    // Commands answered with an error, by CommandRefusal.
    std::atomic<uint64_t> commands_refused[kCommandRefusalReasons];
    // By SessionHistogram (figure_histograms.h): the count in each bucket, and the sum.
    std::atomic<uint64_t> histogram_buckets[kSessionHistograms][kHistogramBounds + 1];
    std::atomic<uint64_t> histogram_sum_ns[kSessionHistograms];
    // GuestRefusal + 1 when the worker turned its guest away before the handshake
    // completed; 0 when it did not. The listener reads it when it reaps the worker.
    std::atomic<uint32_t> turned_away;
    // 1 once the worker handled a command that is neither the handshake nor a status
    // query: a guest's session, for sessions_started_total (the listener, which never
    // decodes guest bytes, cannot tell a status query from a guest).
    std::atomic<uint32_t> guest_session;
    // Core scheduling (host/core_schedule.h), written by the session's worker and
    // read by every other one before each of their CPU computes.
    std::atomic<uint32_t> cores_computing;        // 1 while a CPU compute runs
    std::atomic<uint32_t> cores_wanted;           // threads its guest wants for its computes
    std::atomic<uint64_t> cores_last_compute_ns;  // CLOCK_MONOTONIC end of its last CPU compute
    std::atomic<uint32_t> cores_threads;          // threads its current or last CPU compute used
    std::atomic<uint64_t> cores_shared_computes;  // CPU computes while other sessions were active
    std::atomic<uint32_t> cores_light;            // 1: it computes less than half the time (SessionPace)
    std::atomic<uint32_t> cores_duty_milli;       // the share of its time it computes, in thousandths
    std::atomic<uint64_t> cores_window_ns;        // how long it counts as active after a compute (0: default)
};

// Zeroes every figure a worker writes (not `live`), before the slot's next session.
void clear_figures(SessionSlot *slot);
// The worker's publication of its session's figures, and anyone's reading of them.
// What is read was written by a worker, which its guest may have taken over: each
// figure is any number, but for the histograms, clamped (HistogramCounts::clamp).
void store_figures(SessionSlot *slot, const SessionFigureValues &figures);
SessionFigureValues load_figures(const SessionSlot &slot);
// A new session's slot starts idle, whatever its last worker left there.
void clear_core_fields(SessionSlot *slot);
// The worker's record that it turned its guest away, and the listener's reading of
// it: a reason outside the list (a worker writes the board) reads as none.
void record_turned_away(SessionSlot *slot, GuestRefusal reason);
std::optional<GuestRefusal> turned_away(const SessionSlot &slot);
// The worker's mark that its session is a guest's, and the listener's reading of it.
void mark_guest_session(SessionSlot *slot);
bool is_guest_session(const SessionSlot &slot);

class StatusBoard {
  public:
    // The listener's board with room for `slots` sessions.
    static Status create(uint32_t slots, StatusBoard *board);
    // A worker's view of the listener's board, or a new listener's of the board of the
    // listener it replaces; an error for a board of another layout (another version),
    // or one whose size is not sealed. Its number of slots comes from its size.
    static Status attach(int fd, StatusBoard *board);

    int fd() const { return fd_.get(); }
    uint32_t slots() const { return slots_; }
    SessionSlot *slot(uint32_t index) const;
    // A free slot, or -1.
    int find_free() const;

  private:
    UniqueFd fd_;
    Mapping mapping_;
    uint32_t slots_ = 0;
};

}  // namespace ggml_remote::host
