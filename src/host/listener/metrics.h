// Metrics: the server's figures in Prometheus' text exposition format (version
// 0.0.4), for the --metrics endpoint (metrics_endpoint.h). The listener takes a
// snapshot of its own counts and of the status board; rendering is a pure function
// of that snapshot.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "host/common/refusals.h"
#include "host/common/session_figures.h"
#include "host/common/session_limits.h"
#include "host/common/status_board.h"
#include "host/common/worker_contract.h"

namespace ggml_remote::host {

// One session's figures (GGML_REMOTE_SESSION_FIGURES), as its worker last wrote
// them to its status board slot, with the listener's own record of who it is.
struct SessionFigures : SessionFigureValues {
    int32_t id = 0;
    std::string peer;
    std::string tenant;  // whom the session's limits count against: "uid 1000", "address 10.0.0.7"
};

// The figures in `slot`; id and peer are left to the caller, who knows them
// without trusting the board (every worker can write it).
SessionFigures read_figures(const SessionSlot &slot);

// The limit figures of a session held against `limits`, resolved as its worker
// resolves them (a mapped_file_quota of 0: the host's physical memory); the rest 0.
SessionFigureValues limit_figures(const SessionLimits &limits);

// Adds the counters of `session` (not its gauges) to `total`: the listener keeps
// the counters of the sessions that ended, so that no total goes down when one does.
void add_counters(const SessionFigures &session, SessionFigures *total);

struct MetricsSnapshot {
    // --metrics-per-session: each live session's own series too, labelled with its
    // id and peer (one series set per session: unbounded over time).
    bool per_session = false;
    // The limits every session is held against (FigureKind::limit*), from the
    // server's own settings: rendered once, unlabelled.
    SessionFigureValues limits;
    std::string version;                // this server's
    std::string ggml_version;           // the ggml it runs with
    std::vector<ProbedDevice> devices;  // as probed at start
    uint64_t sessions_live = 0;
    uint64_t max_sessions = 0;
    uint64_t sessions_started = 0;
    uint64_t unauthenticated = 0;                                 // connections still in their TLS handshake
    std::array<uint64_t, kGuestRefusalReasons> guests_refused{};  // by GuestRefusal
    SessionFigures ended;                                         // counters of the sessions that ended
    HistogramCounts session_lengths;                              // of the guest sessions that ended
    std::vector<SessionFigures> sessions;                         // the live ones
};

// The whole /metrics answer: server figures, the sessions' limits, totals over all
// sessions, then (per_session) each live session's figures labelled with its id and peer.
std::string render_metrics(const MetricsSnapshot &snapshot);

// One histogram family, in seconds: a cumulative _bucket line for each bound (le),
// one for +Inf that equals _count, then _sum and _count.
std::string render_histogram(const HistogramSpec &spec, const HistogramCounts &counts);

// A duration in seconds, written exactly (no float rounding): 0.00025, 10, 1.5.
std::string seconds_text(uint64_t ns);

// A label value as the format wants it: backslash, double quote and newline
// escaped; any other byte that is not printable ASCII becomes '?', so that a
// peer's name never makes the answer invalid UTF-8 or adds a line.
std::string escape_label_value(std::string_view text);

}  // namespace ggml_remote::host
