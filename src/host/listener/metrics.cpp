#include "host/listener/metrics.h"

#include <cstdio>
#include <map>

namespace ggml_remote::host {

namespace {

constexpr const char *kPrefix = "ggml_remote_";
constexpr const char *kSessionPrefix = "ggml_remote_session_";

const char *type_name(FigureKind kind) { return kind == FigureKind::counter ? "counter" : "gauge"; }
bool is_limit(FigureKind kind) { return kind == FigureKind::limit || kind == FigureKind::limit_or_none; }

std::string value_text(uint64_t value, FigureKind kind) {
    return kind == FigureKind::limit_or_none && value == 0 ? "+Inf" : std::to_string(value);
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

void render_build(const MetricsSnapshot &snapshot, Exposition *out) {
    const std::string name = std::string(kPrefix) + "build_info";
    out->family(name, "gauge", "Always 1, labelled with the server's version and the ggml version it runs with");
    out->sample(name, label("version", snapshot.version) + "," + label("ggml", snapshot.ggml_version), "1");
}

void render_devices(const std::vector<ProbedDevice> &devices, Exposition *out) {
    const struct {
        const char *metric;
        uint64_t ProbedDevice::*value;
        const char *help;
    } figures[] = {
        {"device_memory_total_bytes", &ProbedDevice::total_bytes, "Memory of each device served, in bytes"},
        {"device_memory_free_bytes", &ProbedDevice::free_bytes,
         "Free memory of each device served, in bytes, as the server found it at start"},
    };
    for (const auto &figure : figures) {
        const std::string name = std::string(kPrefix) + figure.metric;
        out->family(name, "gauge", figure.help);
        for (const ProbedDevice &device : devices) {
            out->sample(name, label("device", device.name), std::to_string(device.*figure.value));
        }
    }
}

void render_histogram_to(const HistogramSpec &spec, const HistogramCounts &counts, Exposition *out) {
    const std::string name = std::string(kPrefix) + spec.metric;
    out->family(name, "histogram", spec.help);
    uint64_t cumulative = 0;
    for (size_t bucket = 0; bucket < kHistogramBounds; ++bucket) {
        cumulative = saturating_add(cumulative, counts.buckets[bucket]);
        out->sample(name + "_bucket", label("le", seconds_text((*spec.bounds)[bucket])), std::to_string(cumulative));
    }
    out->sample(name + "_bucket", label("le", "+Inf"), std::to_string(counts.count()));
    out->sample(name + "_sum", "", seconds_text(counts.sum_ns));
    out->sample(name + "_count", "", std::to_string(counts.count()));
}

// Totals over all sessions, ended ones included.
void render_histograms(const MetricsSnapshot &snapshot, Exposition *out) {
    for (size_t h = 0; h < kSessionHistograms; ++h) {
        HistogramCounts total = snapshot.ended.histograms[h];
        for (const SessionFigures &session : snapshot.sessions) total.add(session.histograms[h]);
        render_histogram_to(kSessionHistogramSpecs[h], total, out);
    }
    render_histogram_to(kSessionLengthSpec, snapshot.session_lengths, out);
}

void render_limits(const SessionFigureValues &limits, Exposition *out) {
    for (const SessionFigure &figure : kSessionFigures) {
        if (!is_limit(figure.kind)) continue;
        const std::string name = std::string(kPrefix) + figure.metric;
        out->family(name, "gauge", std::string(figure.help) + ", per session");
        out->sample(name, "", value_text(limits.*figure.value, figure.kind));
    }
}

void render_totals(const MetricsSnapshot &snapshot, Exposition *out) {
    for (const SessionFigure &figure : kSessionFigures) {
        if (is_limit(figure.kind)) continue;
        const bool counter = figure.kind == FigureKind::counter;
        uint64_t total = counter ? snapshot.ended.*figure.value : 0;
        for (const SessionFigures &session : snapshot.sessions) total += session.*figure.value;
        const std::string name = std::string(kPrefix) + figure.metric;
        out->family(name, type_name(figure.kind),
                    std::string(figure.help) + (counter ? ", all sessions (ended ones included)" : ", live sessions"));
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

// Live sessions and their device memory by tenant: as many series as tenants
// being served, at most --max-sessions, and none once they have gone.
void render_tenants(const std::vector<SessionFigures> &sessions, Exposition *out) {
    std::map<std::string, std::pair<uint64_t, uint64_t>> tenants;  // sessions, memory
    for (const SessionFigures &session : sessions) {
        auto &[count, memory] = tenants[session.tenant];
        ++count;
        memory = saturating_add(memory, session.memory_in_use);
    }
    const std::string live = std::string(kPrefix) + "tenant_sessions_live";
    out->family(live, "gauge",
                "Sessions being served, by tenant: a unix socket's user, a TCP or TLS address, a VM's CID or region");
    for (const auto &[tenant, figures] : tenants)
        out->sample(live, label("tenant", tenant), std::to_string(figures.first));
    const std::string memory = std::string(kPrefix) + "tenant_memory_bytes";
    out->family(memory, "gauge", "Device memory in use, in bytes, by tenant, live sessions");
    for (const auto &[tenant, figures] : tenants)
        out->sample(memory, label("tenant", tenant), std::to_string(figures.second));
}

void render_sessions(const std::vector<SessionFigures> &sessions, Exposition *out) {
    for (const SessionFigure &figure : kSessionFigures) {
        if (is_limit(figure.kind)) continue;  // the same for all: render_limits
        const std::string name = std::string(kSessionPrefix) + figure.metric;
        out->family(name, type_name(figure.kind), std::string(figure.help) + ", per session");
        for (const SessionFigures &session : sessions) {
            out->sample(name, session_labels(session), std::to_string(session.*figure.value));
        }
    }
    const std::string refused = std::string(kSessionPrefix) + "commands_refused_total";
    out->family(refused, "counter", "Commands answered with an error, per session, by reason");
    for (const SessionFigures &session : sessions) {
        for (size_t reason = 0; reason < kCommandRefusalReasons; ++reason) {
            out->sample(
                refused,
                session_labels(session) + "," + label("reason", refusal_name(static_cast<CommandRefusal>(reason))),
                std::to_string(session.commands_refused[reason]));
        }
    }
}

}  // namespace

SessionFigures read_figures(const SessionSlot &slot) {
    SessionFigures figures;
    static_cast<SessionFigureValues &>(figures) = load_figures(slot);
    return figures;
}

SessionFigureValues limit_figures(const SessionLimits &limits) {
    SessionLimits limits_ = limits;  // the name the list's `from` expressions use
    if (limits_.mapped_file_quota == 0) limits_.mapped_file_quota = physical_memory();
    SessionFigureValues figures;
#define GGML_REMOTE_FIGURE_LIMIT(field, kind, reply, metric, from, help) \
    GGML_REMOTE_FIGURE_IF_LIMIT_##kind(figures.field = (from);)
    GGML_REMOTE_SESSION_FIGURES(GGML_REMOTE_FIGURE_LIMIT)
#undef GGML_REMOTE_FIGURE_LIMIT
    return figures;
}

void add_counters(const SessionFigures &session, SessionFigures *total) {
    for (const SessionFigure &figure : kSessionFigures) {
        if (figure.kind == FigureKind::counter) total->*figure.value += session.*figure.value;
    }
    for (size_t reason = 0; reason < kCommandRefusalReasons; ++reason) {
        total->commands_refused[reason] += session.commands_refused[reason];
    }
    for (size_t h = 0; h < kSessionHistograms; ++h) total->histograms[h].add(session.histograms[h]);
}

std::string render_histogram(const HistogramSpec &spec, const HistogramCounts &counts) {
    Exposition out;
    render_histogram_to(spec, counts, &out);
    return out.take();
}

std::string seconds_text(uint64_t ns) {
    const std::string whole = std::to_string(ns / kSecondNs);
    const uint64_t fraction = ns % kSecondNs;
    if (fraction == 0) return whole;
    char digits[16];
    std::snprintf(digits, sizeof(digits), "%09llu", static_cast<unsigned long long>(fraction));
    std::string decimals(digits);
    while (decimals.back() == '0') decimals.pop_back();
    return whole + "." + decimals;
}

std::string render_metrics(const MetricsSnapshot &snapshot) {
    Exposition out;
    render_build(snapshot, &out);
    render_server(snapshot, &out);
    render_devices(snapshot.devices, &out);
    render_limits(snapshot.limits, &out);
    render_totals(snapshot, &out);
    render_histograms(snapshot, &out);
    render_tenants(snapshot.sessions, &out);
    if (snapshot.per_session) render_sessions(snapshot.sessions, &out);
    return out.take();
}

std::string escape_label_value(std::string_view text) {
    std::string escaped;
    escaped.reserve(text.size());
    for (const char c : text) {
        if (c == '\\')
            escaped += "\\\\";
        else if (c == '"')
            escaped += "\\\"";
        else if (c == '\n')
            escaped += "\\n";
        else if (c < 0x20 || c > 0x7e)
            escaped += '?';
        else
            escaped += c;
    }
    return escaped;
}

}  // namespace ggml_remote::host
