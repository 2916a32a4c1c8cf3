#include "host/worker.h"

#include "transport/connection.h"

#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>

namespace ggml_remote::host {

namespace {

std::string human_bytes(uint64_t bytes) {
    char text[32];
    if (bytes >= (1ull << 30)) std::snprintf(text, sizeof(text), "%.2f GiB", bytes / double(1ull << 30));
    else if (bytes >= (1ull << 20)) std::snprintf(text, sizeof(text), "%.2f MiB", bytes / double(1ull << 20));
    else if (bytes >= 1024) std::snprintf(text, sizeof(text), "%.1f KiB", bytes / 1024.0);
    else std::snprintf(text, sizeof(text), "%llu B", static_cast<unsigned long long>(bytes));
    return text;
}

}  // namespace

int run_worker(int client_fd, int session_id, const std::string &peer, const ServerOptions &options) {
    const auto started = std::chrono::steady_clock::now();
    const std::string label = "session " + std::to_string(session_id) + " (" + peer + ")";
    FramedStream stream(UniqueFd(client_fd), peer);

    load_host_backends(options.verbose);
    std::vector<ggml_backend_dev_t> devices;
    Status status = select_devices(options, &devices);
    if (!status) {
        log_line(label + ": " + status.message());
        return 1;
    }

    Status outcome;
    SessionCounters counters;
    {
        Session session(devices, options.limits);
        int domain = 0;
        socklen_t length = sizeof(domain);
        bool trusted_local_peer = false;
        if (::getsockopt(client_fd, SOL_SOCKET, SO_DOMAIN, &domain, &length) == 0 && domain == AF_UNIX) {
            session.allow_shared_memory();  // a guest on this machine: memory files can be passed
            ucred credentials{};
            socklen_t size = sizeof(credentials);
            trusted_local_peer = ::getsockopt(client_fd, SOL_SOCKET, SO_PEERCRED, &credentials, &size) == 0 &&
                                 (credentials.uid == 0 || credentials.uid == ::geteuid());
        }
        StatusBoard board;
        if (options.status_fd >= 0 && StatusBoard::attach(options.status_fd, &board).ok()) {
            session.attach_status(&board, board.slot(static_cast<uint32_t>(options.status_slot)), trusted_local_peer,
                                  static_cast<uint32_t>(options.max_sessions));
        }
        // GGML_REMOTE_RECORD_DIR: keep every frame of the session, for the fuzzers' seeds.
        FrameRecorder recorder;
        const char *record_dir = std::getenv("GGML_REMOTE_RECORD_DIR");
        if (record_dir != nullptr && *record_dir != '\0') {
            Status recording = FrameRecorder::open(record_dir, &recorder);
            if (recording) {
                session.record_frames(&recorder);
            } else {
                log_line(label + ": " + recording.message());
            }
        }
        outcome = session.serve(stream);
        counters = session.counters();
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    char totals[256];
    std::snprintf(totals, sizeof(totals), "%.1f s, %llu commands, %llu graph computes, %s in, %s out", seconds,
                  static_cast<unsigned long long>(counters.commands),
                  static_cast<unsigned long long>(counters.graph_computes),
                  human_bytes(counters.bytes_received).c_str(), human_bytes(counters.bytes_sent).c_str());
    if (outcome.ok()) {
        log_line(label + ": disconnected after " + totals);
        return 0;
    }
    log_line(label + ": closed by the server: " + outcome.message() + " (after " + totals + ")");
    return 2;
}

}  // namespace ggml_remote::host
