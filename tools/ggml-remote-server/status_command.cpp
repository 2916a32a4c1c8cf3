#include "status_command.h"

#include <ggml.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "guest/session/remote_session.h"
#include "status_view.h"
#include "transport/endpoint.h"

using namespace ggml_remote;
using namespace ggml_remote::protocol;
using ggml_remote::status::ServerReport;

namespace {

// The packaged server's socket (packaging/systemd/ggml-remote.socket): status asks
// it when no --connect says otherwise.
constexpr const char *kPackagedSocket = "unix:/run/ggml-remote/ggml-remote.sock";

constexpr const char *kStatusUsage =
    "usage: ggml-remote-server status [--connect ENDPOINT] [--json] [--watch [SECONDS]]\n"
    "Asks the server at ENDPOINT (default unix:/run/ggml-remote/ggml-remote.sock, the\n"
    "packaged server's socket).\n"
    "Prints the server's devices and live sessions (commands, bytes, computes, memory),\n"
    "each session's memory, buffers, backends and mapped files against its limits,\n"
    "its share of the host's cores, and how far the upload of its weights has come.\n"
    "--watch redraws it every SECONDS (default 1) until interrupted; it holds one\n"
    "session of the server while it runs.\n"
    "Answered to the server's own user (or root) on its unix socket.\n";

// The longest --watch interval: a day.
constexpr double kMaxWatchSeconds = 86400;

struct StatusArguments {
    std::string endpoint;
    bool packaged_socket = false;  // no --connect: the packaged server's socket
    bool json = false;
    bool watch = false;
    double watch_seconds = 1;
};

int complain(const std::string &message, int exit_status) {
    std::fprintf(stderr, "ggml-remote-server status: %s\n", message.c_str());
    return exit_status;
}

// --watch's optional SECONDS, when argv[i] is one; false with *seconds untouched when not.
bool watch_seconds(const char *text, double *seconds) {
    char *end = nullptr;
    errno = 0;
    const double value = std::strtod(text, &end);
    if (end == text || *end != '\0' || errno != 0 || !std::isfinite(value)) return false;
    *seconds = value;
    return true;
}

// Reads the flags; an exit status where they answer at once (--help, a mistake).
std::optional<int> parse_status_arguments(int argc, char **argv, StatusArguments *arguments) {
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        if ((arg == "--connect" || arg == "-c") && i + 1 < argc) {
            arguments->endpoint = argv[++i];
        } else if (arg.rfind("--connect=", 0) == 0) {
            arguments->endpoint = arg.substr(10);
        } else if (arg == "--json") {
            arguments->json = true;
        } else if (arg == "--watch") {
            arguments->watch = true;
            if (i + 1 < argc && watch_seconds(argv[i + 1], &arguments->watch_seconds)) ++i;
            if (!(arguments->watch_seconds > 0 && arguments->watch_seconds <= kMaxWatchSeconds)) {
                return complain("--watch SECONDS must be above 0 and at most a day", 2);
            }
        } else if (arg == "-h" || arg == "--help") {
            std::printf("%s", kStatusUsage);
            return 0;
        } else {
            return complain("unknown argument " + arg + " (see --help)", 2);
        }
    }
    if (arguments->endpoint.empty()) {
        arguments->endpoint = kPackagedSocket;
        arguments->packaged_socket = true;
    }
    return std::nullopt;
}

// Asks the server for its status through `session`; an error where that fails.
Status query_server(guest::RemoteSession &session, ServerReport *report) {
    // The upload table: a server from before it leaves it out (the view shows "?").
    const ServerStatus::Request request{kStatusUploads};
    std::vector<uint8_t> tail;
    Status status = session.call<ServerStatus>(request).reply(&report->reply).reply_tail(&tail).run();
    if (status && !status::read_tables(request, tail, report)) status = error(Code::error, "malformed reply");
    return status;
}

std::string view(const Endpoint &endpoint, const ServerReport &report, bool json) {
    const int64_t now = static_cast<int64_t>(std::time(nullptr));
    return json ? status::status_json(endpoint.to_string(), report, now)
                : status::status_text(endpoint.to_string(), report, now);
}

volatile std::sig_atomic_t g_watch_stopped = 0;
void stop_watching(int) { g_watch_stopped = 1; }

// SIGINT and SIGTERM end the watch between two views; without SA_RESTART they
// also cut its sleep short.
void stop_watching_on_signals() {
    struct sigaction action{};
    action.sa_handler = stop_watching;
    sigemptyset(&action.sa_mask);
    sigaction(SIGINT, &action, nullptr);
    sigaction(SIGTERM, &action, nullptr);
}

void sleep_unless_stopped(double seconds) {
    struct timespec left{};
    left.tv_sec = static_cast<time_t>(seconds);
    left.tv_nsec = static_cast<long>((seconds - static_cast<double>(left.tv_sec)) * 1e9);
    while (!g_watch_stopped && nanosleep(&left, &left) != 0 && errno == EINTR) {
    }
}

// Shows the view anew: over the last on a terminal, else after it.
void show(const std::string &text, bool terminal, bool first) {
    if (terminal) {
        std::fputs("\033[H\033[2J", stdout);  // cursor home, clear the screen
    } else if (!first) {
        std::fputc('\n', stdout);
    }
    std::fputs(text.c_str(), stdout);
    std::fflush(stdout);
}

// Redraws the view every arguments.watch_seconds until a signal; the server going
// away ends it with an error. A session the server ended (--idle-timeout) is
// opened again once.
int watch_server(const Endpoint &endpoint, const guest::GuestOptions &options, const StatusArguments &arguments,
                 std::unique_ptr<guest::RemoteSession> session) {
    stop_watching_on_signals();
    const bool terminal = ::isatty(STDOUT_FILENO) == 1;
    for (bool first = true; !g_watch_stopped; first = false) {
        ServerReport report;
        Status status = query_server(*session, &report);
        if (!status && !g_watch_stopped) {
            session.reset();
            status = guest::RemoteSession::open(endpoint, options, &session);
            if (status) status = query_server(*session, &report);
        }
        if (g_watch_stopped) break;
        if (!status) return complain("the server at " + endpoint.to_string() + " went away: " + status.message(), 1);
        show(view(endpoint, report, arguments.json), terminal, first);
        sleep_unless_stopped(arguments.watch_seconds);
    }
    return 0;
}

// The plugin's own log lines (a lost connection, ...): the command says what failed itself.
void quiet_log(ggml_log_level, const char *, void *) {}

}  // namespace

int run_status_command(int argc, char **argv) {
    StatusArguments arguments;
    if (const std::optional<int> answered = parse_status_arguments(argc, argv, &arguments)) return *answered;
    Endpoint endpoint;
    const Status parsed = parse_endpoint(arguments.endpoint, &endpoint);
    if (!parsed) return complain(parsed.message(), 1);
    ggml_log_set(quiet_log, nullptr);
    guest::GuestOptions options = guest::read_guest_options();
    options.connect_timeout_ms = 5000;
    // A lost server is told at once, not hidden behind attempts to reconnect.
    options.reconnect = false;
    std::unique_ptr<guest::RemoteSession> session;
    Status status = guest::RemoteSession::open(endpoint, options, &session);
    if (!status && arguments.packaged_socket) {
        return complain(status.message() + " (the packaged server's socket; --connect ENDPOINT names another)", 1);
    }
    if (!status) return complain(status.message(), 1);
    if (arguments.watch) return watch_server(endpoint, options, arguments, std::move(session));
    ServerReport report;
    status = query_server(*session, &report);
    if (!status) return complain(status.message(), 1);
    std::fputs(view(endpoint, report, arguments.json).c_str(), stdout);
    return 0;
}
