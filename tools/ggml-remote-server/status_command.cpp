#include "status_command.h"

#include <cstdio>
#include <cstring>
#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "guest/session/remote_session.h"
#include "protocol/printable.h"
#include "transport/endpoint.h"

using namespace ggml_remote;
using namespace ggml_remote::protocol;

namespace {

std::string json_string(const char *text) {
    std::string out = "\"";
    for (const char *c = text; *c != '\0'; ++c) {
        if (*c == '"' || *c == '\\') {
            out += '\\';
            out += *c;
        } else if (static_cast<unsigned char>(*c) < 0x20) {
            char escaped[8];
            std::snprintf(escaped, sizeof(escaped), "\\u%04x", *c);
            out += escaped;
        } else {
            out += *c;
        }
    }
    return out + "\"";
}

std::string mib(uint64_t bytes) {
    char text[32];
    std::snprintf(text, sizeof(text), "%.1f", bytes / double(1 << 20));
    return text;
}

constexpr const char *kStatusUsage =
    "usage: ggml-remote-server status --connect unix:/path/to.sock [--json]\n"
    "Prints the server's devices and live sessions (commands, bytes, computes, memory),\n"
    "each session's memory, buffers, backends and mapped files against its limits,\n"
    "and its share of the host's cores.\n"
    "Answered to the server's own user (or root) on its unix socket.\n";

// What a running server answered: its reply and the tables in the reply's tail.
struct ServerReport {
    ServerStatus::Reply reply{};
    std::vector<StatusDevice> devices;
    std::vector<StatusSession> sessions;
};

int complain(const std::string &message, int exit_status) {
    std::fprintf(stderr, "ggml-remote-server status: %s\n", message.c_str());
    return exit_status;
}

// Reads the flags; an exit status where they answer at once (--help, a mistake).
std::optional<int> parse_status_arguments(int argc, char **argv, std::string *endpoint_text, bool *json) {
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        if ((arg == "--connect" || arg == "-c") && i + 1 < argc) {
            *endpoint_text = argv[++i];
        } else if (arg == "--json") {
            *json = true;
        } else if (arg == "-h" || arg == "--help") {
            std::printf("%s", kStatusUsage);
            return 0;
        } else {
            return complain("unknown argument " + arg + " (see --help)", 2);
        }
    }
    if (endpoint_text->empty()) return complain("--connect unix:/path/to.sock is required", 2);
    return std::nullopt;
}

// Splits the reply's tail into its tables; false where it does not hold them exactly.
bool read_tables(const std::vector<uint8_t> &tail, ServerReport *report) {
    const size_t expected =
        report->reply.n_devices * sizeof(StatusDevice) + report->reply.n_sessions * sizeof(StatusSession);
    if (tail.size() != expected) return false;
    std::vector<StatusDevice> &devices = report->devices;
    std::vector<StatusSession> &sessions = report->sessions;
    devices.resize(report->reply.n_devices);
    sessions.resize(report->reply.n_sessions);
    if (!devices.empty()) std::memcpy(devices.data(), tail.data(), devices.size() * sizeof(StatusDevice));
    if (!sessions.empty()) {
        std::memcpy(sessions.data(), tail.data() + devices.size() * sizeof(StatusDevice),
                    sessions.size() * sizeof(StatusSession));
    }
    // Every worker can write the status board: its strings end where their fields do.
    for (StatusDevice &d : devices) {
        d.name[sizeof(d.name) - 1] = '\0';
        d.description[sizeof(d.description) - 1] = '\0';
    }
    for (StatusSession &s : sessions) s.peer[sizeof(s.peer) - 1] = '\0';
    return true;
}

// Asks the server at `endpoint` for its status; an exit status where that fails.
std::optional<int> query_server(const Endpoint &endpoint, const guest::GuestOptions &options, ServerReport *report) {
    std::unique_ptr<guest::RemoteSession> session;
    Status status = guest::RemoteSession::open(endpoint, options, &session);
    std::vector<uint8_t> tail;
    if (status) status = session->call<ServerStatus>({0}).reply(&report->reply).reply_tail(&tail).run();
    if (!status) return complain(status.message(), 1);
    if (!read_tables(tail, report)) return complain("malformed reply", 1);
    return std::nullopt;
}

void print_json(const Endpoint &endpoint, const ServerReport &report, int64_t now) {
    std::printf("{\"server\": {\"pid\": %u, \"endpoint\": %s, \"max_sessions\": %u},\n \"devices\": [",
                report.reply.server_pid, json_string(endpoint.to_string().c_str()).c_str(), report.reply.max_sessions);
    for (size_t i = 0; i < report.devices.size(); ++i) {
        const StatusDevice &d = report.devices[i];
        std::printf("%s\n  {\"name\": %s, \"description\": %s, \"memory_free\": %llu, \"memory_total\": %llu}",
                    i ? "," : "", json_string(d.name).c_str(), json_string(d.description).c_str(),
                    (unsigned long long)d.memory_free, (unsigned long long)d.memory_total);
    }
    std::printf("],\n \"sessions\": [");
    for (size_t i = 0; i < report.sessions.size(); ++i) {
        const StatusSession &s = report.sessions[i];
        std::printf(
            "%s\n  {\"id\": %d, \"worker_pid\": %d, \"peer\": %s, \"uptime_s\": %lld, \"commands\": %llu, "
            "\"bytes_received\": %llu, \"bytes_sent\": %llu, \"graph_computes\": %llu, "
            "\"memory_bytes\": %llu, \"buffers\": %llu, \"backends\": %llu, \"mapped_file_bytes\": %llu, "
            "\"memory_quota\": %llu, \"max_buffers\": %llu, \"max_backends\": %llu, "
            "\"mapped_file_quota\": %llu, \"cpu_threads\": %llu, \"shared_computes\": %llu}",
            i ? "," : "", s.id, s.pid, json_string(s.peer).c_str(), (long long)(now - s.started_unix),
            (unsigned long long)s.commands, (unsigned long long)s.bytes_received, (unsigned long long)s.bytes_sent,
            (unsigned long long)s.graph_computes, (unsigned long long)s.memory_in_use, (unsigned long long)s.buffers,
            (unsigned long long)s.backends, (unsigned long long)s.mapped_file_bytes, (unsigned long long)s.memory_quota,
            (unsigned long long)s.max_buffers, (unsigned long long)s.max_backends,
            (unsigned long long)s.mapped_file_quota, (unsigned long long)s.cores_threads,
            (unsigned long long)s.cores_shared_computes);
    }
    std::printf("]}\n");
}

void print_device_table(const std::vector<StatusDevice> &devices) {
    std::printf("%-8s %-40s %12s %12s\n", "DEVICE", "DESCRIPTION", "FREE MiB", "TOTAL MiB");
    for (const StatusDevice &d : devices) {
        std::printf("%-8s %-40.40s %12s %12s\n", printable(d.name).c_str(),
                    printable(d.description, sizeof(d.description)).c_str(), mib(d.memory_free).c_str(),
                    mib(d.memory_total).c_str());
    }
}

// One session's row, and below it its figures against its limits.
void print_session_rows(const StatusSession &s, int64_t now) {
    // The endpoint is in the heading: show who is connected ("pid N uid M").
    const char *who = std::strstr(s.peer, " pid ");
    std::printf("%-4d %-8d %-34.34s %8lld %10llu %9llu %10s %10s %11s %7llu\n", s.id, s.pid,
                printable(who != nullptr ? who + 1 : s.peer, sizeof(s.peer)).c_str(), (long long)(now - s.started_unix),
                (unsigned long long)s.commands, (unsigned long long)s.graph_computes, mib(s.bytes_received).c_str(),
                mib(s.bytes_sent).c_str(), mib(s.memory_in_use).c_str(), (unsigned long long)s.buffers);
    const std::string quota = s.memory_quota != 0 ? "of " + mib(s.memory_quota) + " MiB" : "(no quota)";
    std::printf(
        "     limits: memory %s MiB %s, buffers %llu of %llu, backends %llu of %llu, "
        "mapped files %s of %s MiB\n",
        mib(s.memory_in_use).c_str(), quota.c_str(), (unsigned long long)s.buffers, (unsigned long long)s.max_buffers,
        (unsigned long long)s.backends, (unsigned long long)s.max_backends, mib(s.mapped_file_bytes).c_str(),
        mib(s.mapped_file_quota).c_str());
    if (s.cores_threads != 0) {
        std::printf("     cores: its last CPU compute used %llu thread%s; %llu computes shared the cores\n",
                    (unsigned long long)s.cores_threads, s.cores_threads == 1 ? "" : "s",
                    (unsigned long long)s.cores_shared_computes);
    }
}

void print_tables(const Endpoint &endpoint, const ServerReport &report, int64_t now) {
    std::printf("ggml-remote-server pid %u at %s: %zu of %u sessions\n\n", report.reply.server_pid,
                endpoint.to_string().c_str(), report.sessions.size(), report.reply.max_sessions);
    print_device_table(report.devices);
    std::printf("\n%-4s %-8s %-34s %8s %10s %9s %10s %10s %11s %7s\n", "ID", "WORKER", "PEER", "UPTIME_S", "COMMANDS",
                "COMPUTES", "IN_MIB", "OUT_MIB", "MEMORY_MIB", "BUFFERS");
    for (const StatusSession &s : report.sessions) print_session_rows(s, now);
}

}  // namespace

int run_status_command(int argc, char **argv) {
    std::string endpoint_text;
    bool json = false;
    if (const std::optional<int> answered = parse_status_arguments(argc, argv, &endpoint_text, &json)) {
        return *answered;
    }
    Endpoint endpoint;
    const Status status = parse_endpoint(endpoint_text, &endpoint);
    guest::GuestOptions options = guest::read_guest_options();
    options.connect_timeout_ms = 5000;
    if (!status) return complain(status.message(), 1);
    ServerReport report;
    if (const std::optional<int> failed = query_server(endpoint, options, &report)) return *failed;
    const int64_t now = static_cast<int64_t>(std::time(nullptr));
    if (json) {
        print_json(endpoint, report, now);
    } else {
        print_tables(endpoint, report, now);
    }
    return 0;
}
