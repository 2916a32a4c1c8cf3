#include "host/listener/metrics.h"

namespace ggml_remote::host {

namespace {

// counter: only grows, summed over ended and live sessions for the total.
// gauge: the present value, summed over live sessions for the total.
// limit: per session only. limit_or_none: a limit where 0 means none (+Inf).
enum class Kind { counter, gauge, limit, limit_or_none };

struct SessionMetric {
    const char *name;  // after ggml_remote_session_ (per session) or ggml_remote_ (total)
    Kind kind;
    uint64_t SessionFigures::*field;
    const char *help;  // the figure; each family adds what it sums over
};

// One table for rendering and for keeping the counters of ended sessions.
constexpr SessionMetric kSessionMetrics[] = {
    {"commands_total", Kind::counter, &SessionFigures::commands, "Commands handled"},
    {"graph_computes_total", Kind::counter, &SessionFigures::graph_computes, "Graphs computed"},
    {"received_bytes_total", Kind::counter, &SessionFigures::bytes_received, "Bytes received from guests"},
    {"sent_bytes_total", Kind::counter, &SessionFigures::bytes_sent, "Bytes sent to guests"},
    {"memory_bytes", Kind::gauge, &SessionFigures::memory_in_use, "Device memory in use, in bytes"},
    {"memory_quota_bytes", Kind::limit_or_none, &SessionFigures::memory_quota,
     "Device memory quota (--memory-quota), +Inf: none"},
    {"buffers", Kind::gauge, &SessionFigures::buffers, "Buffers held"},
    {"buffers_max", Kind::limit, &SessionFigures::max_buffers, "Buffers allowed (--max-buffers)"},
    {"backends", Kind::gauge, &SessionFigures::backends, "Backends held"},
    {"backends_max", Kind::limit, &SessionFigures::max_backends, "Backends allowed (--max-backends)"},
    {"mapped_file_bytes", Kind::gauge, &SessionFigures::mapped_file_bytes, "Bytes of guests' files mapped"},
    {"mapped_file_quota_bytes", Kind::limit, &SessionFigures::mapped_file_quota,
     "Bytes of guests' files a session may map (--mapped-file-quota)"},
    {"store_hits_total", Kind::counter, &SessionFigures::store_hits, "Weights found in the host's weight store"},
    {"store_misses_total", Kind::counter, &SessionFigures::store_misses, "Weights not in the host's weight store"},
    {"store_saved_bytes_total", Kind::counter, &SessionFigures::store_bytes_saved,
     "Bytes not loaded thanks to the host's weight store"},
};

constexpr const char *kPrefix = "ggml_remote_";
constexpr const char *kSessionPrefix = "ggml_remote_session_";

const char *type_name(Kind kind) { return kind == Kind::counter ? "counter" : "gauge"; }
bool is_limit(Kind kind) { return kind == Kind::limit || kind == Kind::limit_or_none; }

std::string value_text(uint64_t value, Kind kind) {
    return kind == Kind::limit_or_none && value == 0 ? "+Inf" : std::to_string(value);
}

// The text being rendered, one family at a time.
class Exposition {
  public:
    void family(const std::string &name, const char *type, const std::string &help) {
        text_ += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
    }
    void sample(const std::string &name, const std::string &labels, const std::string &value) {
        text_ += name + (labels.empty() ? "" : "{" + labels + "}") + " " + value + "\n";
    }
    std::string take() { return std::move(text_); }

  private:
    std::string text_;
};

std::string label(const char *name, std::string_view value) {
    return std::string(name) + "=\"" + escape_label_value(value) + "\"";
}

std::string session_labels(const SessionFigures &session) {
    return label("session", std::to_string(session.id)) + "," + label("peer", session.peer);
}

void render_server(const MetricsSnapshot &snapshot, Exposition *out) {
    const struct {
        const char *name;
        const char *type;
        uint64_t value;
        const char *help;
    } figures[] = {
        {"sessions_live", "gauge", snapshot.sessions_live, "Sessions being served"},
        {"sessions_max", "gauge", snapshot.max_sessions, "Sessions the server serves at once (--max-sessions)"},
        {"sessions_started_total", "counter", snapshot.sessions_started, "Sessions the server admitted"},
        {"unauthenticated_connections", "gauge", snapshot.unauthenticated,
         "Connections still in their TLS handshake (--max-unauthenticated)"},
    };
    for (const auto &figure : figures) {
        const std::string name = std::string(kPrefix) + figure.name;
        out->family(name, figure.type, figure.help);
        out->sample(name, "", std::to_string(figure.value));
    }
    const std::string refused = std::string(kPrefix) + "guests_refused_total";
    out->family(refused, "counter", "Guests turned away without a session, or in their handshake, by reason");
    for (size_t reason = 0; reason < kGuestRefusalReasons; ++reason) {
        out->sample(refused, label("reason", refusal_name(static_cast<GuestRefusal>(reason))),
                    std::to_string(snapshot.guests_refused[reason]));
    }
}

void render_totals(const MetricsSnapshot &snapshot, Exposition *out) {
    for (const SessionMetric &metric : kSessionMetrics) {
        if (is_limit(metric.kind)) continue;
        const bool counter = metric.kind == Kind::counter;
        uint64_t total = counter ? snapshot.ended.*metric.field : 0;
        for (const SessionFigures &session : snapshot.sessions) total += session.*metric.field;
        const std::string name = std::string(kPrefix) + metric.name;
        out->family(name, type_name(metric.kind),
                    std::string(metric.help) + (counter ? ", all sessions (ended ones included)" : ", live sessions"));
        out->sample(name, "", std::to_string(total));
    }
    const std::string refused = std::string(kPrefix) + "commands_refused_total";
    out->family(refused, "counter", "Commands answered with an error, all sessions (ended ones included), by reason");
    for (size_t reason = 0; reason < kCommandRefusalReasons; ++reason) {
        uint64_t total = snapshot.ended.commands_refused[reason];
        for (const SessionFigures &session : snapshot.sessions) total += session.commands_refused[reason];
        out->sample(refused, label("reason", refusal_name(static_cast<CommandRefusal>(reason))), std::to_string(total));
    }
}

void render_sessions(const std::vector<SessionFigures> &sessions, Exposition *out) {
    for (const SessionMetric &metric : kSessionMetrics) {
        const std::string name = std::string(kSessionPrefix) + metric.name;
        out->family(name, type_name(metric.kind), std::string(metric.help) + ", per session");
        for (const SessionFigures &session : sessions) {
            out->sample(name, session_labels(session), value_text(session.*metric.field, metric.kind));
        }
    }
    const std::string refused = std::string(kSessionPrefix) + "commands_refused_total";
    out->family(refused, "counter", "Commands answered with an error, per session, by reason");
    for (const SessionFigures &session : sessions) {
        for (size_t reason = 0; reason < kCommandRefusalReasons; ++reason) {
            out->sample(refused,
                        session_labels(session) + "," +
                            label("reason", refusal_name(static_cast<CommandRefusal>(reason))),
                        std::to_string(session.commands_refused[reason]));
        }
    }
}

}  // namespace

SessionFigures read_figures(const SessionSlot &slot) {
    constexpr auto relaxed = std::memory_order_relaxed;
    SessionFigures figures;
    figures.commands = slot.commands.load(relaxed);
    figures.graph_computes = slot.graph_computes.load(relaxed);
    figures.bytes_received = slot.bytes_received.load(relaxed);
    figures.bytes_sent = slot.bytes_sent.load(relaxed);
    figures.memory_in_use = slot.memory_in_use.load(relaxed);
    figures.memory_quota = slot.memory_quota.load(relaxed);
    figures.buffers = slot.buffers.load(relaxed);
    figures.max_buffers = slot.max_buffers.load(relaxed);
    figures.backends = slot.backends.load(relaxed);
    figures.max_backends = slot.max_backends.load(relaxed);
    figures.mapped_file_bytes = slot.mapped_file_bytes.load(relaxed);
    figures.mapped_file_quota = slot.mapped_file_quota.load(relaxed);
    figures.store_hits = slot.store_hits.load(relaxed);
    figures.store_misses = slot.store_misses.load(relaxed);
    figures.store_bytes_saved = slot.store_bytes_saved.load(relaxed);
    for (size_t reason = 0; reason < kCommandRefusalReasons; ++reason) {
        figures.commands_refused[reason] = slot.commands_refused[reason].load(relaxed);
    }
    return figures;
}

void add_counters(const SessionFigures &session, SessionFigures *total) {
    for (const SessionMetric &metric : kSessionMetrics) {
        if (metric.kind == Kind::counter) total->*metric.field += session.*metric.field;
    }
    for (size_t reason = 0; reason < kCommandRefusalReasons; ++reason) {
        total->commands_refused[reason] += session.commands_refused[reason];
    }
}

std::string render_metrics(const MetricsSnapshot &snapshot) {
    Exposition out;
    render_server(snapshot, &out);
    render_totals(snapshot, &out);
    render_sessions(snapshot.sessions, &out);
    return out.take();
}

std::string escape_label_value(std::string_view text) {
    std::string escaped;
    escaped.reserve(text.size());
    for (const char c : text) {
        if (c == '\\') escaped += "\\\\";
        else if (c == '"') escaped += "\\\"";
        else if (c == '\n') escaped += "\\n";
        else if (c < 0x20 || c > 0x7e) escaped += '?';
        else escaped += c;
    }
    return escaped;
}

}  // namespace ggml_remote::host
