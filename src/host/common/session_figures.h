// The figures every session reports, listed once. The worker's totals
// (SessionCounters), the status board's slot (SessionSlot), the listener's copy
// (SessionFigures), the ServerStatus reply's copy and the /metrics families are
// all derived from GGML_REMOTE_SESSION_FIGURES, so that a new figure is one line
// here plus the code that counts it.
#pragma once

#include <array>
#include <cstdint>

#include "host/common/figure_histograms.h"
#include "host/common/refusals.h"

namespace ggml_remote::host {

// counter: only grows; the listener keeps the sum over the sessions that ended, so
//          that no total goes down when one does.
// gauge: what the session holds now; totals sum the live sessions.
// limit: what the session is held against; the same for every session, so /metrics
//        shows it once, from the server's settings (limit_figures).
// limit_or_none: a limit where 0 means none (+Inf in /metrics).
enum class FigureKind { counter, gauge, limit, limit_or_none };

// X(field, kind, reply, metric, from, help), in the order /metrics lists them:
//   field   the member's name in SessionFigureValues and SessionSlot (and in
//           StatusSession when `reply` is in_reply)
//   kind    a FigureKind
//   reply   in_reply: also in the ServerStatus reply's StatusSession, whose layout
//           is the wire protocol's (adding one there is a protocol change);
//           in_upload_table: in its StatusUpload instead, a table that only a guest
//           that asks for it gets (kStatusUploads), so that older peers are
//           unaffected; not_in_reply: not
//   metric  the family's name after ggml_remote_ (totals) or ggml_remote_session_
//   from    the expression in the worker's Session that gives the figure now
//   help    the family's HELP text; each family adds what it sums over
#define GGML_REMOTE_SESSION_FIGURES(X)                                                                              \
    X(commands, counter, in_reply, "commands_total", counters_.commands, "Commands handled")                        \
    X(graph_computes, counter, in_reply, "graph_computes_total", counters_.graph_computes, "Graphs computed")       \
    X(bytes_received, counter, in_reply, "received_bytes_total", counters_.bytes_received,                          \
      "Bytes received from guests")                                                                                 \
    X(bytes_sent, counter, in_reply, "sent_bytes_total", counters_.bytes_sent, "Bytes sent to guests")              \
    X(memory_in_use, gauge, in_reply, "memory_bytes", memory_in_use_, "Device memory in use, in bytes")             \
    X(memory_quota, limit_or_none, in_reply, "memory_quota_bytes", limits_.memory_quota,                            \
      "Device memory quota (--memory-quota), +Inf: none")                                                           \
    X(buffers, gauge, in_reply, "buffers", buffers_.size(), "Buffers held")                                         \
    X(max_buffers, limit, in_reply, "buffers_max", limits_.max_buffers, "Buffers allowed (--max-buffers)")          \
    X(backends, gauge, in_reply, "backends", backends_.size(), "Backends held")                                     \
    X(max_backends, limit, in_reply, "backends_max", limits_.max_backends, "Backends allowed (--max-backends)")     \
    X(mapped_file_bytes, gauge, in_reply, "mapped_file_bytes", mapped_file_bytes_, "Bytes of guests' files mapped") \
    X(mapped_file_quota, limit, in_reply, "mapped_file_quota_bytes", limits_.mapped_file_quota,                     \
      "Bytes of guests' files a session may map (--mapped-file-quota)")                                             \
    X(weights_expected, gauge, in_upload_table, "weights_expected_bytes", weight_upload_.expected(),                \
      "Bytes of weights guests upload: the size of the buffers they flagged as weights")                            \
    X(weights_received, gauge, in_upload_table, "weights_received_bytes", weight_upload_.received(),                \
      "Bytes of weights guests sent into their weights buffers")                                                    \
    X(weights_found, gauge, in_upload_table, "weights_found_bytes", weight_upload_.found(),                         \
      "Bytes of weights found in the host's weight store instead of sent")                                          \
    X(store_hits, counter, not_in_reply, "store_hits_total", store_fill_.counters().hits,                           \
      "Weights found in the host's weight store")                                                                   \
    X(store_misses, counter, not_in_reply, "store_misses_total", store_fill_.counters().misses,                     \
      "Weights not in the host's weight store")                                                                     \
    X(store_bytes_saved, counter, not_in_reply, "store_saved_bytes_total", store_fill_.counters().bytes_saved,      \
      "Bytes not loaded thanks to the host's weight store")

// GGML_REMOTE_FIGURE_IF_##reply(code): `code` only for the figures in StatusSession;
// GGML_REMOTE_FIGURE_IF_UPLOAD_##reply(code): only for those in StatusUpload.
#define GGML_REMOTE_FIGURE_IF_in_reply(...) __VA_ARGS__
#define GGML_REMOTE_FIGURE_IF_in_upload_table(...)
#define GGML_REMOTE_FIGURE_IF_not_in_reply(...)
#define GGML_REMOTE_FIGURE_IF_UPLOAD_in_reply(...)
#define GGML_REMOTE_FIGURE_IF_UPLOAD_in_upload_table(...) __VA_ARGS__
#define GGML_REMOTE_FIGURE_IF_UPLOAD_not_in_reply(...)

// GGML_REMOTE_FIGURE_IF_LIMIT_##kind(code): `code` only for the limits.
#define GGML_REMOTE_FIGURE_IF_LIMIT_counter(...)
#define GGML_REMOTE_FIGURE_IF_LIMIT_gauge(...)
#define GGML_REMOTE_FIGURE_IF_LIMIT_limit(...) __VA_ARGS__
#define GGML_REMOTE_FIGURE_IF_LIMIT_limit_or_none(...) __VA_ARGS__

// One session's figures as plain numbers.
struct SessionFigureValues {
#define GGML_REMOTE_FIGURE_VALUE(field, kind, reply, metric, from, help) uint64_t field = 0;
    GGML_REMOTE_SESSION_FIGURES(GGML_REMOTE_FIGURE_VALUE)
#undef GGML_REMOTE_FIGURE_VALUE
    // By CommandRefusal: one counter per reason rather than a line of the list,
    // since every place that handles them loops over the reasons.
    std::array<uint64_t, kCommandRefusalReasons> commands_refused{};
    // By SessionHistogram: counters too (the listener keeps those of ended sessions).
    std::array<HistogramCounts, kSessionHistograms> histograms{};
};

// A line of the list, for the code that walks it at run time.
struct SessionFigure {
    const char *metric;
    FigureKind kind;
    uint64_t SessionFigureValues::*value;
    const char *help;
};

constexpr SessionFigure kSessionFigures[] = {
#define GGML_REMOTE_FIGURE_ROW(field, kind, reply, metric, from, help) \
    {metric, FigureKind::kind, &SessionFigureValues::field, help},
    GGML_REMOTE_SESSION_FIGURES(GGML_REMOTE_FIGURE_ROW)
#undef GGML_REMOTE_FIGURE_ROW
};

// The list's fields and kinds as one string, for the board's layout check: two
// builds whose lists differ in order, name or kind never share a board.
constexpr char kSessionFiguresLayout[] =
#define GGML_REMOTE_FIGURE_LAYOUT(field, kind, reply, metric, from, help) #field ":" #kind ","
    GGML_REMOTE_SESSION_FIGURES(GGML_REMOTE_FIGURE_LAYOUT);
#undef GGML_REMOTE_FIGURE_LAYOUT

}  // namespace ggml_remote::host
