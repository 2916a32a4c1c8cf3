// ggml-remote-server: serves the host's ggml devices to ggml-remote guests.
#include "host/listener.h"
#include "host/sandbox.h"
#include "host/server_options.h"
#include "status_command.h"
#include "host/worker.h"
#include "host/worker_identity.h"
#include "host/weight_store.h"
#include "protocol/wire.h"
#include "transport/endpoint.h"
#include "transport/spin_policy.h"
#include "transport/tls_key.h"

#include <ggml-backend.h>

#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

using namespace ggml_remote;

namespace {

constexpr const char *kDefaultEndpoint = "tcp://127.0.0.1:50053";

void print_usage(const char *program) {
    std::printf(
        "usage: %s [options]\n"
        "\n"
        "Serves this machine's ggml devices (CPU, GPUs) to applications that load the\n"
        "libggml-remote.so backend plugin (GGML_REMOTE_SERVERS=<endpoint>).\n"
        "Each guest is served by a worker process of its own.\n"
        "\n"
        "options:\n"
        "  -h,    --help                 show this help and exit\n"
        "         --version              show the version and protocol version and exit\n"
        "  -l,    --listen ENDPOINT      where to listen; repeatable (default: %s, or the\n"
        "                                sockets systemd passes with socket activation)\n"
        "                                ENDPOINT is unix:/path/to.sock or tcp://host:port\n"
        "         --tls-psk FILE         every tcp:// listener speaks TLS 1.3 and admits only\n"
        "                                guests that hold a key of FILE (identity:hexkey lines,\n"
        "                                made with psktool -u NAME -p FILE); guests connect to\n"
        "                                tls://host:port\n"
        "         --insecure             allow plain TCP on a non-loopback address (anyone who\n"
        "                                can reach it can use the host's devices), also for\n"
        "                                --metrics\n"
        "         --metrics ENDPOINT     answer Prometheus scrapes (HTTP GET /metrics) on\n"
        "                                tcp://host:port or unix:/path.sock; no authentication:\n"
        "                                keep it on loopback or a unix socket\n"
        "  -d,    --device NAME          expose only this host device; repeatable (default: all)\n"
        "         --list-devices         print the host devices and exit\n"
        "  -t,    --threads N            threads of each CPU backend (default: all cores)\n"
        "         --poll 0..100          how long CPU threads spin for the next graph before they\n"
        "                                sleep (ggml's poll level; default 50; 0: sleep at once)\n"
        "         --cores N              cores the sessions that compute at once share (default:\n"
        "                                the CPUs the server may run on); each gets a fair share\n"
        "                                of them as threads, and while they are contended no\n"
        "                                waiting side spins (see docs/MANY-GUESTS.md)\n"
        "         --no-core-scheduling   every session computes with the threads its guest asks\n"
        "                                for and spins as if it were alone (for comparison)\n"
        "         --no-repack            compute with a guest's mapped weights as they are (by\n"
        "                                default a CPU device repacks them into its fastest\n"
        "                                layouts, as llama.cpp does locally)\n"
        "         --weight-store DIR     keep guests' weights by content in DIR: a guest that\n"
        "                                loads weights the store holds sends no bytes, and\n"
        "                                sessions share one copy of them (see docs/SECURITY.md)\n"
        "         --weight-store-size SIZE  the most the store holds; the least recently used\n"
        "                                entries go first (default: a quarter of DIR's disk)\n"
        "         --weight-store-shared  one store for all guests (default: one per user on a\n"
        "                                unix socket, TLS identity, or address on plain TCP)\n"
        "         --weight-store-verify  hash an entry again each time a session uses it\n"
        "         --max-sessions N       guests served at once (default: 64)\n"
        "         --max-sessions-per-peer N  sessions one peer may hold: a user on a unix\n"
        "                                socket (the server's own user and root: no limit), an\n"
        "                                address on TCP (default: a quarter of --max-sessions)\n"
        "         --max-unauthenticated N  TLS connections still in their handshake (default:\n"
        "                                16; they never take one of --max-sessions, and when\n"
        "                                all N are taken the oldest is ended)\n"
        "         --memory-quota SIZE    device memory per session, e.g. 8G (default: no limit)\n"
        "         --max-buffers N        buffers per session (default: 65536)\n"
        "         --max-backends N       backends per session (default: 16)\n"
        "         --mapped-file-quota SIZE  bytes of guests' files (models) a session may map\n"
        "                                (default: the host's physical memory)\n"
        "         --max-message-size SIZE  largest message accepted (default: 256M)\n"
        "         --handshake-timeout S  a guest must complete the handshake within S seconds\n"
        "                                of connecting (default: 10; 0: no limit)\n"
        "         --frame-timeout S      a frame must arrive, and a reply be taken, within S\n"
        "                                seconds plus one per MiB (default: 60; 0: no limit)\n"
        "         --idle-timeout S       end a session that sends nothing for S seconds\n"
        "                                (default: 0, never: llama-server idles between requests)\n"
        "         --worker-user USER     a server started as root runs its session workers as\n"
        "                                USER (recommended there: see docs/SECURITY.md)\n"
        "         --no-sandbox           workers without their sandbox: seccomp, Landlock, no\n"
        "                                capabilities (for debugging;\n"
        "                                see docs/SECURITY.md)\n"
        "  -v,    --verbose              also log ggml's informational messages\n"
        "\n"
        "status of a running server (its devices and live sessions):\n"
        "  %s status --connect unix:/path/to.sock [--json]\n"
        "\n"
        "example:\n"
        "  %s --listen unix:/tmp/ggml-remote.sock --listen tcp://127.0.0.1:50053\n"
        "  GGML_BACKEND_PATH=/usr/lib/x86_64-linux-gnu/ggml-remote/libggml-remote.so \\\n"
        "  GGML_REMOTE_SERVERS=unix:/tmp/ggml-remote.sock llama-cli -m model.gguf -ngl 99\n",
        program, kDefaultEndpoint, program, program);
}

[[noreturn]] void fail(const std::string &message) {
    std::fprintf(stderr, "ggml-remote-server: %s (see --help)\n", message.c_str());
    std::exit(2);
}

uint64_t parse_size(const std::string &flag, const std::string &text) {
    char *end = nullptr;
    errno = 0;
    const unsigned long long value = std::strtoull(text.c_str(), &end, 10);
    if (text.empty() || end == text.c_str() || errno != 0 || text[0] == '-') fail(flag + ": not a size: " + text);
    uint64_t multiplier = 1;
    const std::string suffix = end;
    if (suffix == "K" || suffix == "k") multiplier = 1ull << 10;
    else if (suffix == "M" || suffix == "m") multiplier = 1ull << 20;
    else if (suffix == "G" || suffix == "g") multiplier = 1ull << 30;
    else if (suffix == "T" || suffix == "t") multiplier = 1ull << 40;
    else if (!suffix.empty()) fail(flag + ": unknown size suffix '" + suffix + "' (use K, M, G or T)");
    uint64_t result = 0;
    if (__builtin_mul_overflow(static_cast<uint64_t>(value), multiplier, &result)) fail(flag + ": too large: " + text);
    return result;
}

int parse_int(const std::string &flag, const std::string &text, int min) {
    char *end = nullptr;
    const long value = std::strtol(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0' || value < min || value > 1 << 30) {
        fail(flag + ": expected a whole number >= " + std::to_string(min) + ", got '" + text + "'");
    }
    return static_cast<int>(value);
}

// Workers get the path as the listener resolved it, for their sandbox's rules.
std::string absolute_path(const std::string &path) {
    if (path.empty()) fail("--weight-store needs a directory");
    if (path[0] == '/') return path;
    char cwd[PATH_MAX];
    if (::getcwd(cwd, sizeof(cwd)) == nullptr) fail("cannot resolve " + path + ": no working directory");
    return std::string(cwd) + "/" + path;
}

// Makes the store's directory, for the workers' user where they run as another.
void prepare_weight_store(const host::ServerOptions &options, const host::WorkerIdentity &identity) {
    const host::WeightStoreOptions &store = options.weight_store;
    if (store.directory.empty()) return;
    Status status = host::WeightStore::prepare(store);
    if (!status) fail("--weight-store: " + status.message());
    if (!options.worker_user.empty() && ::chown(store.directory.c_str(), identity.uid, identity.gid) != 0) {
        fail("--weight-store: cannot give " + store.directory + " to " + identity.user + ": " + std::strerror(errno));
    }
    host::log_line("weight store: " + store.directory +
                   (store.shared_across_tenants ? ", shared by all guests" : ", one part per user, identity or address") +
                   (store.max_bytes != 0 ? ", at most " + std::to_string(store.max_bytes >> 20) + " MiB" : ""));
}

// The metrics endpoint has no authentication: plain TCP beyond loopback only with --insecure.
void check_metrics_endpoint(const std::string &text, bool insecure) {
    Endpoint endpoint;
    Status status = parse_endpoint(text, &endpoint);
    if (!status) fail("--metrics: " + status.message());
    if (endpoint.kind != Endpoint::Kind::unix_socket && endpoint.kind != Endpoint::Kind::tcp) {
        fail("--metrics " + text + ": use tcp://host:port or unix:/path.sock (plain HTTP, no TLS)");
    }
    if (!endpoint.is_loopback() && !insecure) {
        fail("--metrics " + text + ": refusing to serve metrics without authentication beyond loopback: use a "
             "loopback address or a unix socket, or --insecure to let anyone who can reach that address read them");
    }
}

int list_devices() {
    host::load_host_backends(false);
    host::ServerOptions all;
    std::vector<ggml_backend_dev_t> devices;
    Status status = host::select_devices(all, &devices);
    if (!status) {
        std::fprintf(stderr, "ggml-remote-server: %s\n", status.message().c_str());
        return 1;
    }
    std::printf("host devices:\n");
    for (ggml_backend_dev_t device : devices) {
        size_t free = 0, total = 0;
        ggml_backend_dev_memory(device, &free, &total);
        std::printf("  %s: %s (%zu MiB, %zu MiB free)\n", ggml_backend_dev_name(device),
                    ggml_backend_dev_description(device), total >> 20, free >> 20);
    }
    return 0;
}

// The start-up line on how sessions share the cores (host/core_schedule.h).
std::string describe_core_scheduling(const host::SessionLimits &limits) {
    if (!limits.schedule_cores) {
        return "core scheduling: off (--no-core-scheduling): every session computes as if alone";
    }
    const int cores = limits.cores > 0 ? limits.cores : SpinPolicy::usable_cpus();
    return "core scheduling: the sessions that compute at once share " + std::to_string(cores) +
           (cores == 1 ? " core" : " cores");
}

}  // namespace

int main(int argc, char **argv) {
    if (argc > 1 && std::strcmp(argv[1], "status") == 0) return run_status_command(argc - 1, argv + 1);
    host::ServerOptions options;
    bool insecure = false;
    int worker_fd = -1, session_id = 0;
    std::string peer;
    // Everything but the worker-only flags is passed on to the workers.
    std::vector<std::string> worker_command{argv[0]};

    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) fail(arg + " needs a value");
            return argv[++i];
        };
        const int first = i;
        if (arg == "-h" || arg == "--help") {
            print_usage(argv[0]);
            return 0;
        } else if (arg == "--version") {
            std::printf("ggml-remote-server 0.1.0 (protocol version %u)\n", protocol::kProtocolVersion);
            return 0;
        } else if (arg == "--list-devices") {
            return list_devices();
        } else if (arg == "-l" || arg == "--listen") {
            options.listen.push_back(value());
            continue;
        } else if (arg == "--tls-psk") {
            options.tls_psk_file = value();
        } else if (arg == "--metrics") {
            options.metrics = value();
            continue;
        } else if (arg == "--insecure") {
            insecure = true;
            continue;
        } else if (arg == "-d" || arg == "--device") {
            options.devices.push_back(value());
        } else if (arg == "-t" || arg == "--threads") {
            options.limits.default_threads = parse_int(arg, value(), 1);
        } else if (arg == "--poll") {
            options.limits.cpu_poll = parse_int(arg, value(), 0);
            if (options.limits.cpu_poll > 100) {
                std::fprintf(stderr, "ggml-remote-server: --poll takes 0 to 100\n");
                return 2;
            }
        } else if (arg == "--weight-store") {
            options.weight_store.directory = absolute_path(value());
            worker_command.insert(worker_command.end(), {arg, options.weight_store.directory});
            continue;
        } else if (arg == "--weight-store-size") {
            options.weight_store.max_bytes = parse_size(arg, value());
            if (options.weight_store.max_bytes == 0) fail("--weight-store-size must be at least one byte");
        } else if (arg == "--weight-store-shared") {
            options.weight_store.shared_across_tenants = true;
        } else if (arg == "--weight-store-verify") {
            options.weight_store.verify_on_use = true;
        } else if (arg == "--cores") {
            options.limits.cores = parse_int(arg, value(), 1);
        } else if (arg == "--no-core-scheduling") {
            options.limits.schedule_cores = false;
        } else if (arg == "--max-sessions") {
            options.max_sessions = parse_int(arg, value(), 1);
        } else if (arg == "--max-sessions-per-peer") {
            options.max_sessions_per_peer = parse_int(arg, value(), 1);
        } else if (arg == "--max-unauthenticated") {
            options.max_unauthenticated = parse_int(arg, value(), 1);
        } else if (arg == "--memory-quota") {
            options.limits.memory_quota = parse_size(arg, value());
        } else if (arg == "--max-buffers") {
            options.limits.max_buffers = static_cast<uint32_t>(parse_int(arg, value(), 1));
        } else if (arg == "--max-backends") {
            options.limits.max_backends = static_cast<uint32_t>(parse_int(arg, value(), 1));
        } else if (arg == "--mapped-file-quota") {
            options.limits.mapped_file_quota = parse_size(arg, value());
            if (options.limits.mapped_file_quota == 0) fail("--mapped-file-quota must be at least one byte");
        } else if (arg == "--max-message-size") {
            options.limits.max_message_size = parse_size(arg, value());
        } else if (arg == "--handshake-timeout") {
            options.limits.handshake_timeout_s = parse_int(arg, value(), 0);
        } else if (arg == "--frame-timeout") {
            options.limits.frame_timeout_s = parse_int(arg, value(), 0);
        } else if (arg == "--idle-timeout") {
            options.limits.idle_timeout_s = parse_int(arg, value(), 0);
        } else if (arg == "--no-repack") {
            options.limits.repack_weights = false;
        } else if (arg == "--worker-user") {
            options.worker_user = value();
        } else if (arg == "--no-sandbox") {
            options.sandbox = false;
        } else if (arg == "-v" || arg == "--verbose") {
            options.verbose = true;
        } else if (arg == "--worker-fd") {
            worker_fd = parse_int(arg, value(), 0);
            continue;
        } else if (arg == "--session-id") {
            session_id = parse_int(arg, value(), 0);
            continue;
        } else if (arg == "--peer") {
            peer = value();
            continue;
        } else if (arg == "--status-fd") {
            options.status_fd = parse_int(arg, value(), 0);
            continue;
        } else if (arg == "--status-slot") {
            options.status_slot = parse_int(arg, value(), 0);
            continue;
        } else if (arg == "--admission-fd") {
            options.admission_fd = parse_int(arg, value(), 0);
            continue;
        } else {
            fail("unknown argument: " + arg);
        }
        // Forward the flag (and its value, if it took one) to the workers.
        for (int j = first; j <= i; ++j) worker_command.push_back(argv[j]);
    }

    // Read once, here; the listener names a malformed value, its workers keep quiet.
    const Status environment = host::read_server_environment(&options);
    if (worker_fd >= 0) return host::run_worker(worker_fd, session_id, peer, options);
    if (!environment) host::log_line("warning: " + environment.message());

    // Under systemd socket activation the sockets come from systemd (LISTEN_FDS).
    if (options.listen.empty() && std::getenv("LISTEN_FDS") == nullptr) options.listen.push_back(kDefaultEndpoint);
    for (const std::string &text : options.listen) {
        Endpoint endpoint;
        Status status = parse_endpoint(text, &endpoint);
        if (!status) fail(status.message());
        if (endpoint.uses_tls() && options.tls_psk_file.empty()) {
            fail("--listen " + text + " needs --tls-psk FILE (the pre-shared key guests must hold)");
        }
        if (!endpoint.is_loopback() && !insecure && options.tls_psk_file.empty()) {
            fail("refusing to listen on " + endpoint.to_string() +
                 " without authentication: pass --tls-psk FILE for TLS with a pre-shared key (psktool -u NAME -p "
                 "FILE makes one), or --insecure to accept anyone who can reach that address");
        }
    }
    if (!options.metrics.empty()) check_metrics_endpoint(options.metrics, insecure);
    if (!options.tls_psk_file.empty()) {
        std::vector<PreSharedKey> keys;
        Status status = read_psk_file(options.tls_psk_file, &keys);
        if (!status) fail("--tls-psk: " + status.message());
        for (PreSharedKey &key : keys) ::explicit_bzero(key.key.data(), key.key.size());
        if (options.sandbox && host::policy_lets_read(host::worker_filesystem_policy(host::worker_paths(options)),
                                                    options.tls_psk_file)) {
            host::log_line("warning: the key file " + options.tls_psk_file +
                           " lies where session workers may read (their sandbox allows it); move it, e.g. to "
                           "/etc/ggml-remote/");
        }
        if (psk_file_readable_by_others(options.tls_psk_file)) {
            host::log_line("warning: every user of this machine can read the key file " + options.tls_psk_file +
                           " (chmod o-r it)");
        }
    }
    std::string worker_identity;
    host::WorkerIdentity identity;
    if (!options.worker_user.empty()) {
        if (::geteuid() != 0) fail("--worker-user needs the server to start as root");
        Status status = host::find_worker_identity(options.worker_user, &identity);
        if (!status) fail(status.message());
        worker_identity = ", as " + identity.user + " (uid " + std::to_string(identity.uid) + ")";
    }
    prepare_weight_store(options, identity);
    // Fail early on a --device that does not exist, and say what is served.
    host::load_host_backends(options.verbose);
    std::vector<ggml_backend_dev_t> devices;
    Status status = host::select_devices(options, &devices);
    if (!status) fail(status.message());
    for (ggml_backend_dev_t device : devices) {
        host::log_line(std::string("serving ") + ggml_backend_dev_name(device) + ": " +
                       ggml_backend_dev_description(device));
    }
    // A sandbox that cannot work here is found now, once, rather than by every guest.
    if (options.sandbox) {
        host::SandboxReport report;
        status = host::probe_sandbox(host::worker_filesystem_policy(host::worker_paths(options)), &report);
        if (!status) {
            fail("cannot sandbox session workers on this system: " + status.message() +
                 "; --no-sandbox serves without (see docs/SECURITY.md)");
        }
        host::log_line("session workers: " + host::describe_sandbox(report) + worker_identity);
    } else {
        host::log_line("session workers: NOT sandboxed (--no-sandbox)" + worker_identity);
    }
    host::log_line(describe_core_scheduling(options.limits));
    return host::run_listener(options, worker_command);
}
