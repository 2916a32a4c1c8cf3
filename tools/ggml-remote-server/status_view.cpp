#include "status_view.h"

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstring>

#include "protocol/printable.h"
#include "protocol/reply_rules.h"

namespace ggml_remote::status {

using namespace protocol;

namespace {

// printf onto the end of *out.
__attribute__((format(printf, 2, 3))) void appendf(std::string *out, const char *format, ...) {
    va_list arguments;
    va_start(arguments, format);
    va_list again;
    va_copy(again, arguments);
    const int size = std::vsnprintf(nullptr, 0, format, arguments);
    va_end(arguments);
    if (size > 0) {
        const size_t at = out->size();
        out->resize(at + static_cast<size_t>(size) + 1);
        std::vsnprintf(&(*out)[at], static_cast<size_t>(size) + 1, format, again);
        out->resize(at + static_cast<size_t>(size));
    }
    va_end(again);
}

std::string mib(uint64_t bytes) {
    char text[32];
    std::snprintf(text, sizeof(text), "%.1f", bytes / double(1 << 20));
    return text;
}

unsigned long long ull(uint64_t value) { return static_cast<unsigned long long>(value); }

// Bytes of the upload that are there, sent or found (a buffer counts at most its
// size, so the sum stays within what was expected).
uint64_t upload_done(const StatusUpload &upload) {
    return std::min(upload.weights_expected, upload.weights_received + upload.weights_found);
}

// A session's upload for the JSON document: its three figures, or nulls when the
// server does not count them.
std::string upload_json(const ServerReport &report, size_t session) {
    if (session >= report.uploads.size()) {
        return "\"weights_expected_bytes\": null, \"weights_received_bytes\": null, \"weights_found_bytes\": null";
    }
    const StatusUpload &u = report.uploads[session];
    std::string out;
    appendf(&out, "\"weights_expected_bytes\": %llu, \"weights_received_bytes\": %llu, \"weights_found_bytes\": %llu",
            ull(u.weights_expected), ull(u.weights_received), ull(u.weights_found));
    return out;
}

void append_session_json(const ServerReport &report, size_t i, int64_t now, std::string *out) {
    const StatusSession &s = report.sessions[i];
    appendf(out,
            "%s\n  {\"id\": %d, \"worker_pid\": %d, \"peer\": %s, \"uptime_s\": %lld, \"commands\": %llu, "
            "\"bytes_received\": %llu, \"bytes_sent\": %llu, \"graph_computes\": %llu, "
            "\"memory_bytes\": %llu, \"buffers\": %llu, \"backends\": %llu, \"mapped_file_bytes\": %llu, "
            "\"memory_quota\": %llu, \"max_buffers\": %llu, \"max_backends\": %llu, "
            "\"mapped_file_quota\": %llu, \"cpu_threads\": %llu, \"shared_computes\": %llu, %s}",
            i ? "," : "", s.id, s.pid, json_string(s.peer).c_str(), static_cast<long long>(now - s.started_unix),
            ull(s.commands), ull(s.bytes_received), ull(s.bytes_sent), ull(s.graph_computes), ull(s.memory_in_use),
            ull(s.buffers), ull(s.backends), ull(s.mapped_file_bytes), ull(s.memory_quota), ull(s.max_buffers),
            ull(s.max_backends), ull(s.mapped_file_quota), ull(s.cores_threads), ull(s.cores_shared_computes),
            upload_json(report, i).c_str());
}

void append_device_table(const std::vector<StatusDevice> &devices, std::string *out) {
    appendf(out, "%-8s %-40s %12s %12s\n", "DEVICE", "DESCRIPTION", "FREE MiB", "TOTAL MiB");
    for (const StatusDevice &d : devices) {
        appendf(out, "%-8s %-40.40s %12s %12s\n", printable(d.name).c_str(),
                printable(d.description, sizeof(d.description)).c_str(), mib(d.memory_free).c_str(),
                mib(d.memory_total).c_str());
    }
}

// One session's row, and below it its figures against its limits and its upload.
// `upload` is null when the server does not count uploads.
void append_session_rows(const StatusSession &s, const StatusUpload *upload, int64_t now, std::string *out) {
    // The endpoint is in the heading: show who is connected ("pid N uid M").
    const char *who = std::strstr(s.peer, " pid ");
    appendf(out, "%-4d %-8d %-34.34s %8lld %10llu %9llu %10s %10s %11s %7llu %6s\n", s.id, s.pid,
            printable(who != nullptr ? who + 1 : s.peer, sizeof(s.peer)).c_str(),
            static_cast<long long>(now - s.started_unix), ull(s.commands), ull(s.graph_computes),
            mib(s.bytes_received).c_str(), mib(s.bytes_sent).c_str(), mib(s.memory_in_use).c_str(), ull(s.buffers),
            upload != nullptr ? upload_cell(*upload).c_str() : "?");
    const std::string quota = s.memory_quota != 0 ? "of " + mib(s.memory_quota) + " MiB" : "(no quota)";
    appendf(out,
            "     limits: memory %s MiB %s, buffers %llu of %llu, backends %llu of %llu, "
            "mapped files %s of %s MiB\n",
            mib(s.memory_in_use).c_str(), quota.c_str(), ull(s.buffers), ull(s.max_buffers), ull(s.backends),
            ull(s.max_backends), mib(s.mapped_file_bytes).c_str(), mib(s.mapped_file_quota).c_str());
    if (s.cores_threads != 0) {
        appendf(out, "     cores: its last CPU compute used %llu thread%s; %llu computes shared the cores\n",
                ull(s.cores_threads), s.cores_threads == 1 ? "" : "s", ull(s.cores_shared_computes));
    }
    if (upload != nullptr && upload->weights_expected != 0) appendf(out, "     %s\n", upload_line(*upload).c_str());
}

// The next `rows` rows of the tail, from *at on (the caller checked its size).
template <class Row>
void copy_table(const std::vector<uint8_t> &tail, size_t rows, size_t *at, std::vector<Row> *table) {
    table->resize(rows);
    if (rows != 0) std::memcpy(table->data(), tail.data() + *at, rows * sizeof(Row));
    *at += rows * sizeof(Row);
}

}  // namespace

bool read_tables(const ServerStatus::Request &request, const std::vector<uint8_t> &tail, ServerReport *report) {
    const bool with_uploads = status_reply_has_uploads(request, report->reply, tail.size());
    const size_t n_devices = report->reply.n_devices, n_sessions = report->reply.n_sessions;
    const size_t expected = n_devices * sizeof(StatusDevice) + n_sessions * sizeof(StatusSession) +
                            (with_uploads ? n_sessions * sizeof(StatusUpload) : 0);
    if (tail.size() != expected) return false;
    size_t at = 0;
    copy_table(tail, n_devices, &at, &report->devices);
    copy_table(tail, n_sessions, &at, &report->sessions);
    copy_table(tail, with_uploads ? n_sessions : 0, &at, &report->uploads);
    // Every worker can write the status board: its strings end where their fields do.
    for (StatusDevice &d : report->devices) {
        d.name[sizeof(d.name) - 1] = '\0';
        d.description[sizeof(d.description) - 1] = '\0';
    }
    for (StatusSession &s : report->sessions) s.peer[sizeof(s.peer) - 1] = '\0';
    return true;
}

std::string upload_cell(const StatusUpload &upload) {
    if (upload.weights_expected == 0) return "-";
    // Whole percents, rounded down: 100% only once every byte is there.
    const auto percent =
        static_cast<uint64_t>(static_cast<unsigned __int128>(upload_done(upload)) * 100 / upload.weights_expected);
    return std::to_string(percent) + "%";
}

std::string upload_line(const StatusUpload &upload) {
    if (upload.weights_expected == 0) return "";
    const uint64_t left = upload.weights_expected - upload_done(upload);
    return "weights: " + mib(upload.weights_received) + " of " + mib(upload.weights_expected) + " MiB sent, " +
           mib(upload.weights_found) + " MiB found in the weight store; " +
           (left == 0 ? std::string("all there") : mib(left) + " MiB to come");
}

std::string status_text(const std::string &endpoint, const ServerReport &report, int64_t now) {
    std::string out;
    appendf(&out, "ggml-remote-server pid %u at %s: %zu of %u sessions\n\n", report.reply.server_pid, endpoint.c_str(),
            report.sessions.size(), report.reply.max_sessions);
    append_device_table(report.devices, &out);
    appendf(&out, "\n%-4s %-8s %-34s %8s %10s %9s %10s %10s %11s %7s %6s\n", "ID", "WORKER", "PEER", "UPTIME_S",
            "COMMANDS", "COMPUTES", "IN_MIB", "OUT_MIB", "MEMORY_MIB", "BUFFERS", "UPLOAD");
    for (size_t i = 0; i < report.sessions.size(); ++i) {
        const StatusUpload *upload = i < report.uploads.size() ? &report.uploads[i] : nullptr;
        append_session_rows(report.sessions[i], upload, now, &out);
    }
    return out;
}

std::string status_json(const std::string &endpoint, const ServerReport &report, int64_t now) {
    std::string out;
    appendf(&out, "{\"server\": {\"pid\": %u, \"endpoint\": %s, \"max_sessions\": %u},\n \"devices\": [",
            report.reply.server_pid, json_string(endpoint.c_str()).c_str(), report.reply.max_sessions);
    for (size_t i = 0; i < report.devices.size(); ++i) {
        const StatusDevice &d = report.devices[i];
        appendf(&out, "%s\n  {\"name\": %s, \"description\": %s, \"memory_free\": %llu, \"memory_total\": %llu}",
                i ? "," : "", json_string(d.name).c_str(), json_string(d.description).c_str(), ull(d.memory_free),
                ull(d.memory_total));
    }
    out += "],\n \"sessions\": [";
    for (size_t i = 0; i < report.sessions.size(); ++i) append_session_json(report, i, now, &out);
    out += "]}\n";
    return out;
}

}  // namespace ggml_remote::status
