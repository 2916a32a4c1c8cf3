// ggml-remote-server: serves the host's ggml devices to ggml-remote guests.
#include "host/listener.h"
#include "host/sandbox.h"
#include "host/server_options.h"
#include "host/server_paths.h"
#include "host/shader_cache.h"
#include "status_command.h"
#include "host/worker.h"
#include "host/worker_identity.h"
#include "host/store_owner.h"
#include "protocol/wire.h"
#include "transport/endpoint.h"
#include "transport/spin_policy.h"
#include "transport/tls_key.h"

#include <ggml-backend.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

using namespace ggml_remote;

namespace {

constexpr const char *kDefaultEndpoint = "tcp://127.0.0.1:50053";

// printf format: the program name, the default endpoint, the program name twice.
constexpr const char *kUsage = R"(usage: %s [options]

Serves this machine's ggml devices (CPU, GPUs) to applications that load the
libggml-remote.so backend plugin (GGML_REMOTE_SERVERS=<endpoint>).
Each guest is served by a worker process of its own.

options:
  -h,    --help                 show this help and exit
         --version              show the version and protocol version and exit
  -l,    --listen ENDPOINT      where to listen; repeatable (default: %s, or the
                                sockets systemd passes with socket activation)
                                ENDPOINT is unix:/path/to.sock or tcp://host:port,
                                or ivshmem:/dev/shm/NAME,size=64M: a memory file
                                that QEMU maps into one VM (ivshmem-plain)
         --tls-psk FILE         every tcp:// listener speaks TLS 1.3 and admits only
                                guests that hold a key of FILE (identity:hexkey lines,
                                made with psktool -u NAME -p FILE); guests connect to
                                tls://host:port
         --insecure             allow plain TCP on a non-loopback address (anyone who
                                can reach it can use the host's devices), also for
                                --metrics
         --metrics ENDPOINT     answer Prometheus scrapes (HTTP GET /metrics) on
                                tcp://host:port or unix:/path.sock; no authentication:
                                keep it on loopback or a unix socket
  -d,    --device NAME          expose only this host device; repeatable (default: all)
         --list-devices         print the host devices and exit
  -t,    --threads N            threads of each CPU backend (default: all cores)
         --poll 0..100          how long CPU threads spin for the next graph before they
                                sleep (ggml's poll level; default 50; 0: sleep at once)
         --cores N              cores the sessions that compute at once share (default:
                                the CPUs the server may run on); each gets a fair share
                                of them as threads, and while they are contended no
                                waiting side spins (see docs/MANY-GUESTS.md)
         --no-core-scheduling   every session computes with the threads its guest asks
                                for and spins as if it were alone (for comparison)
         --no-repack            compute with a guest's mapped weights as they are (by
                                default a CPU device repacks them into its fastest
                                layouts, as llama.cpp does locally)
         --weight-store DIR     keep guests' weights by content in DIR: a guest that
                                loads weights the store holds sends no bytes, and
                                sessions share one copy of them (see docs/SECURITY.md)
         --weight-store-size SIZE  the most the store holds; the least recently used
                                entries go first (default: a quarter of DIR's disk)
         --weight-store-shared  one store for all guests (default: one per user on a
                                unix socket, TLS identity, or address on plain TCP)
         --weight-store-verify  hash an entry again each time a session uses it
         --shader-cache DIR     keep what GPU drivers compile in DIR, one directory
                                per user on a unix socket or address on plain TCP
                                that only its own sessions may write (needs Landlock;
                                TLS guests compile anew; see docs/SECURITY.md)
         --max-sessions N       guests served at once (default: 64)
         --max-sessions-per-peer N  sessions one peer may hold: a user on a unix
                                socket (the server's own user and root: no limit), an
                                address on TCP (default: a quarter of --max-sessions)
         --max-unauthenticated N  TLS connections still in their handshake (default:
                                16; they never take one of --max-sessions, and when
                                all N are taken the oldest is ended)
         --memory-quota SIZE    device memory per session, e.g. 8G (default: no limit)
         --max-buffers N        buffers per session (default: 65536)
         --max-backends N       backends per session (default: 16)
         --mapped-file-quota SIZE  bytes of guests' files (models) a session may map
                                (default: the host's physical memory)
         --max-message-size SIZE  largest message accepted (default: 256M)
         --handshake-timeout S  a guest must complete the handshake within S seconds
                                of connecting (default: 10; 0: no limit)
         --frame-timeout S      a frame must arrive, and a reply be taken, within S
                                seconds plus one per MiB (default: 60; 0: no limit)
         --idle-timeout S       end a session that sends nothing for S seconds
                                (default: 0, never: llama-server idles between requests)
         --worker-user USER     a server started as root runs its session workers as
                                USER (recommended there: see docs/SECURITY.md)
         --no-sandbox           workers without their sandbox: seccomp, Landlock, no
                                capabilities (for debugging;
                                see docs/SECURITY.md)
         --keep-sessions        SIGTERM and SIGINT stop only the listener: live
                                sessions go on in their workers until their guests
                                leave (what ggml-remote.service uses, so that a
                                restart ends no session)
  -v,    --verbose              also log ggml's informational messages

The directories workers write (--weight-store, --shader-cache,
GGML_REMOTE_RECORD_DIR) must lie apart from each other, from what workers load
(/usr, libraries, backends), and from the key file, sockets and region files;
the server refuses to start otherwise.

signals to the listener:
  SIGUSR2  replace the listener by the program at its path (e.g. after an upgrade),
           with the same arguments; it takes over the sockets and the live sessions
  SIGHUP   re-read the --tls-psk file for new sessions (a bad file keeps the old keys)
  SIGTERM, SIGINT  stop (and end every session, unless --keep-sessions)

status of a running server (its devices and live sessions):
  %s status --connect unix:/path/to.sock [--json]

example:
  %s --listen unix:/tmp/ggml-remote.sock --listen tcp://127.0.0.1:50053
  GGML_BACKEND_PATH=/usr/lib/x86_64-linux-gnu/ggml-remote/libggml-remote.so \
  GGML_REMOTE_SERVERS=unix:/tmp/ggml-remote.sock llama-cli -m model.gguf -ngl 99
)";

void print_usage(const char *program) { std::printf(kUsage, program, kDefaultEndpoint, program, program); }

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
std::string absolute_path(const std::string &flag, const std::string &path) {
    if (path.empty()) fail(flag + " needs a directory");
    if (path[0] == '/') return path;
    char cwd[PATH_MAX];
    if (::getcwd(cwd, sizeof(cwd)) == nullptr) fail("cannot resolve " + path + ": no working directory");
    return std::string(cwd) + "/" + path;
}

// Makes the store's directory: the listener's own (its store owner writes it), never
// the workers', which reach entries only through the owner.
void prepare_weight_store(const host::ServerOptions &options) {
    const host::WeightStoreOptions &store = options.weight_store;
    if (store.directory.empty()) return;
    Status status = host::StoreOwner::prepare(store);
    if (!status) fail("--weight-store: " + status.message());
    // An older server gave the directory to --worker-user: it is taken back.
    struct stat st {};
    if (::stat(store.directory.c_str(), &st) == 0 && (st.st_uid != ::geteuid() || (st.st_mode & 077) != 0) &&
        (::chown(store.directory.c_str(), ::geteuid(), ::getegid()) != 0 || ::chmod(store.directory.c_str(), 0700) != 0)) {
        fail("--weight-store: " + store.directory + " is not the server's own, and cannot be made so: " +
             std::strerror(errno));
    }
    host::log_line("weight store: " + store.directory +
                   (store.shared_across_tenants ? ", shared by all guests" : ", one part per user, identity or address") +
                   (store.max_bytes != 0 ? ", at most " + std::to_string(store.max_bytes >> 20) + " MiB" : ""));
}

// Makes the shader cache's directory, for the workers' user where they run as another,
// and says whether sessions will use it: only where Landlock keeps tenants apart.
void prepare_shader_cache(const host::ServerOptions &options, const host::WorkerIdentity &identity,
                          bool files_confined) {
    if (options.shader_cache.empty()) return;
    if (!files_confined) {
        host::log_line("shader cache: off: session workers' files are not confined (" +
                       std::string(options.sandbox ? "no Landlock" : "--no-sandbox") +
                       "), so nothing would keep one guest from planting code in another's cache");
        return;
    }
    const bool other_user = !options.worker_user.empty();
    Status status = host::prepare_shader_cache_root(options.shader_cache, other_user ? identity.uid : uid_t(-1),
                                                    other_user ? identity.gid : gid_t(-1));
    if (!status) fail("--shader-cache: " + status.message());
    host::log_line("shader cache: " + options.shader_cache +
                   ", one directory per user or address, written only by its own sessions (TLS guests: none)");
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

// The command line, walked flag by flag; a flag's value is the argument after it.
class Arguments {
  public:
    Arguments(int argc, char **argv) : argc_(argc), argv_(argv) {}

    // Moves to the next flag; false past the last.
    bool next() {
        first_ = ++last_;
        return first_ < argc_;
    }
    std::string flag() const { return argv_[first_]; }
    std::string value() {
        if (last_ + 1 >= argc_) fail(flag() + " needs a value");
        return argv_[++last_];
    }
    int int_value(int min) { return parse_int(flag(), value(), min); }
    uint64_t size_value() { return parse_size(flag(), value()); }
    // The flag and the value it took, as given: what the workers are passed.
    void append_given(std::vector<std::string> *command) const {
        command->insert(command->end(), argv_ + first_, argv_ + last_ + 1);
    }

  private:
    int argc_;
    char **argv_;
    int first_ = 0, last_ = 0;
};

// What the listener tells each worker it starts (host/worker.h).
struct WorkerArguments {
    int fd = -1;  // the guest's socket; -1: this process is the listener
    int session_id = 0;
    std::string peer;
};

struct CommandLine {
    host::ServerOptions options;
    bool insecure = false;
    WorkerArguments worker;
    // Everything but the worker-only flags is passed on to the workers.
    std::vector<std::string> worker_command;
    // All of argv: SIGUSR2 starts the listener anew with it.
    std::vector<std::string> listener_command;
};

int parse_poll(Arguments &args) {
    const int poll = args.int_value(0);
    if (poll > 100) {
        std::fprintf(stderr, "ggml-remote-server: --poll takes 0 to 100\n");
        std::exit(2);
    }
    return poll;
}

// Flags of each session's limits; false for a flag of another kind.
bool parse_session_limit(Arguments &args, host::SessionLimits *limits) {
    const std::string flag = args.flag();
    if (flag == "-t" || flag == "--threads") {
        limits->default_threads = args.int_value(1);
    } else if (flag == "--poll") {
        limits->cpu_poll = parse_poll(args);
    } else if (flag == "--cores") {
        limits->cores = args.int_value(1);
    } else if (flag == "--no-core-scheduling") {
        limits->schedule_cores = false;
    } else if (flag == "--memory-quota") {
        limits->memory_quota = args.size_value();
    } else if (flag == "--max-buffers") {
        limits->max_buffers = static_cast<uint32_t>(args.int_value(1));
    } else if (flag == "--max-backends") {
        limits->max_backends = static_cast<uint32_t>(args.int_value(1));
    } else if (flag == "--mapped-file-quota") {
        limits->mapped_file_quota = args.size_value();
        if (limits->mapped_file_quota == 0) fail("--mapped-file-quota must be at least one byte");
    } else if (flag == "--max-message-size") {
        limits->max_message_size = args.size_value();
    } else if (flag == "--handshake-timeout") {
        limits->handshake_timeout_s = args.int_value(0);
    } else if (flag == "--frame-timeout") {
        limits->frame_timeout_s = args.int_value(0);
    } else if (flag == "--idle-timeout") {
        limits->idle_timeout_s = args.int_value(0);
    } else if (flag == "--no-repack") {
        limits->repack_weights = false;
    } else {
        return false;
    }
    return true;
}

// Flags of what is served, to whom and how; false for a flag of another kind.
bool parse_serving_flag(Arguments &args, host::ServerOptions *options) {
    const std::string flag = args.flag();
    if (flag == "--tls-psk") {
        options->tls_psk_file = args.value();
    } else if (flag == "-d" || flag == "--device") {
        options->devices.push_back(args.value());
    } else if (flag == "--weight-store-size") {
        options->weight_store.max_bytes = args.size_value();
        if (options->weight_store.max_bytes == 0) fail("--weight-store-size must be at least one byte");
    } else if (flag == "--weight-store-shared") {
        options->weight_store.shared_across_tenants = true;
    } else if (flag == "--weight-store-verify") {
        options->weight_store.verify_on_use = true;
    } else if (flag == "--max-sessions") {
        options->max_sessions = args.int_value(1);
    } else if (flag == "--max-sessions-per-peer") {
        options->max_sessions_per_peer = args.int_value(1);
    } else if (flag == "--max-unauthenticated") {
        options->max_unauthenticated = args.int_value(1);
    } else if (flag == "--worker-user") {
        options->worker_user = args.value();
    } else if (flag == "--no-sandbox") {
        options->sandbox = false;
    } else if (flag == "-v" || flag == "--verbose") {
        options->verbose = true;
    } else {
        return parse_session_limit(args, &options->limits);
    }
    return true;
}

// Flags only the listener acts on; --weight-store reaches the workers resolved.
bool parse_listener_flag(Arguments &args, CommandLine *line) {
    const std::string flag = args.flag();
    if (flag == "-l" || flag == "--listen") {
        line->options.listen.push_back(args.value());
    } else if (flag == "--metrics") {
        line->options.metrics = args.value();
    } else if (flag == "--insecure") {
        line->insecure = true;
    } else if (flag == "--keep-sessions") {
        line->options.keep_sessions = true;
    } else if (flag == "--weight-store") {
        line->options.weight_store.directory = absolute_path(flag, args.value());
        line->worker_command.insert(line->worker_command.end(), {flag, line->options.weight_store.directory});
    } else if (flag == "--shader-cache") {
        line->options.shader_cache = absolute_path(flag, args.value());
        line->worker_command.insert(line->worker_command.end(), {flag, line->options.shader_cache});
    } else {
        return false;
    }
    return true;
}

// Flags the listener passes to a worker it starts, and only to it.
bool parse_worker_flag(Arguments &args, CommandLine *line) {
    const std::string flag = args.flag();
    if (flag == "--worker-fd") {
        line->worker.fd = args.int_value(0);
    } else if (flag == "--session-id") {
        line->worker.session_id = args.int_value(0);
    } else if (flag == "--peer") {
        line->worker.peer = args.value();
    } else if (flag == "--status-fd") {
        line->options.status_fd = args.int_value(0);
    } else if (flag == "--status-slot") {
        line->options.status_slot = args.int_value(0);
    } else if (flag == "--admission-fd") {
        line->options.admission_fd = args.int_value(0);
    } else if (flag == "--tls-psk-fd") {
        line->options.tls_psk_fd = args.int_value(0);
    } else if (flag == "--store-fd") {
        line->options.store_fd = args.int_value(0);
    } else {
        return false;
    }
    return true;
}

// Reads the flags into *line; an exit status where one answers at once (--help,
// --version, --list-devices).
std::optional<int> parse_command_line(int argc, char **argv, CommandLine *line) {
    line->worker_command = {argv[0]};
    line->listener_command.assign(argv, argv + argc);
    Arguments args(argc, argv);
    while (args.next()) {
        const std::string flag = args.flag();
        if (flag == "-h" || flag == "--help") {
            print_usage(argv[0]);
            return 0;
        }
        if (flag == "--version") {
            std::printf("ggml-remote-server 0.1.0 (protocol version %u)\n", protocol::kProtocolVersion);
            return 0;
        }
        if (flag == "--list-devices") return list_devices();
        if (parse_listener_flag(args, line) || parse_worker_flag(args, line)) continue;
        if (!parse_serving_flag(args, &line->options)) fail("unknown argument: " + flag);
        args.append_given(&line->worker_command);
    }
    return std::nullopt;
}

// Each --listen endpoint, or the default one; authentication beyond loopback.
void check_listen_endpoints(host::ServerOptions *options, bool insecure) {
    // Under systemd socket activation the sockets come from systemd (LISTEN_FDS).
    if (options->listen.empty() && std::getenv("LISTEN_FDS") == nullptr) options->listen.push_back(kDefaultEndpoint);
    for (const std::string &text : options->listen) {
        Endpoint endpoint;
        Status status = parse_endpoint(text, &endpoint);
        if (!status) fail(status.message());
        if (endpoint.uses_tls() && options->tls_psk_file.empty()) {
            fail("--listen " + text + " needs --tls-psk FILE (the pre-shared key guests must hold)");
        }
        if (!endpoint.is_loopback() && !insecure && options->tls_psk_file.empty()) {
            fail("refusing to listen on " + endpoint.to_string() +
                 " without authentication: pass --tls-psk FILE for TLS with a pre-shared key (psktool -u NAME -p "
                 "FILE makes one), or --insecure to accept anyone who can reach that address");
        }
    }
}

// The --tls-psk file must parse; a warning where others, or the workers, could read it.
void check_key_file(const host::ServerOptions &options) {
    std::vector<PreSharedKey> keys;
    Status status = read_psk_file(options.tls_psk_file, &keys);
    if (!status) fail("--tls-psk: " + status.message());
    for (PreSharedKey &key : keys) ::explicit_bzero(key.key.data(), key.key.size());
    if (options.sandbox &&
        host::policy_lets_read(host::worker_filesystem_policy(host::worker_paths(options)), options.tls_psk_file)) {
        host::log_line("warning: the key file " + options.tls_psk_file +
                       " lies where session workers may read (their sandbox allows it); move it, e.g. to "
                       "/etc/ggml-remote/");
    }
    if (psk_file_readable_by_others(options.tls_psk_file)) {
        host::log_line("warning: every user of this machine can read the key file " + options.tls_psk_file +
                       " (chmod o-r it)");
    }
}

// The --worker-user's identity; returns the start-up words for it ("" without one).
std::string resolve_worker_user(const host::ServerOptions &options, host::WorkerIdentity *identity) {
    if (options.worker_user.empty()) return "";
    if (::geteuid() != 0) fail("--worker-user needs the server to start as root");
    Status status = host::find_worker_identity(options.worker_user, identity);
    if (!status) fail(status.message());
    return ", as " + identity->user + " (uid " + std::to_string(identity->uid) + ")";
}

// Fails early on a --device that does not exist, and says what is served.
void announce_devices(const host::ServerOptions &options) {
    host::load_host_backends(options.verbose);
    std::vector<ggml_backend_dev_t> devices;
    Status status = host::select_devices(options, &devices);
    if (!status) fail(status.message());
    for (ggml_backend_dev_t device : devices) {
        host::log_line(std::string("serving ") + ggml_backend_dev_name(device) + ": " +
                       ggml_backend_dev_description(device));
    }
}

// A sandbox that cannot work here is found now, once, rather than by every guest.
// Whether Landlock will confine the workers' files.
bool announce_sandbox(const host::ServerOptions &options, const std::string &worker_identity) {
    if (!options.sandbox) {
        host::log_line("session workers: NOT sandboxed (--no-sandbox)" + worker_identity);
        return false;
    }
    host::SandboxReport report;
    Status status = host::probe_sandbox(host::worker_filesystem_policy(host::worker_paths(options)), &report);
    if (!status) {
        fail("cannot sandbox session workers on this system: " + status.message() +
             "; --no-sandbox serves without (see docs/SECURITY.md)");
    }
    host::log_line("session workers: " + host::describe_sandbox(report) + worker_identity);
    return report.filesystem_confined;
}

// The listener: checks its configuration, says what it serves, then serves.
int serve(CommandLine *line) {
    host::ServerOptions &options = line->options;
    check_listen_endpoints(&options, line->insecure);
    if (!options.metrics.empty()) check_metrics_endpoint(options.metrics, line->insecure);
    if (!options.tls_psk_file.empty()) check_key_file(options);
    // Before anything is made or given to the workers' user.
    if (Status paths = host::check_server_paths(options); !paths) fail(paths.message());
    host::WorkerIdentity identity;
    const std::string worker_identity = resolve_worker_user(options, &identity);
    prepare_weight_store(options);
    announce_devices(options);
    prepare_shader_cache(options, identity, announce_sandbox(options, worker_identity));
    host::log_line(describe_core_scheduling(options.limits));
    return host::run_listener(options, line->worker_command, line->listener_command);
}

}  // namespace

int main(int argc, char **argv) {
    if (argc > 1 && std::strcmp(argv[1], "status") == 0) return run_status_command(argc - 1, argv + 1);
    CommandLine line;
    if (const std::optional<int> answered = parse_command_line(argc, argv, &line)) return *answered;
    // Read once, here; the listener names a malformed value, its workers keep quiet.
    const Status environment = host::read_server_environment(&line.options);
    const WorkerArguments &worker = line.worker;
    if (worker.fd >= 0) return host::run_worker(worker.fd, worker.session_id, worker.peer, line.options);
    if (!environment) host::log_line("warning: " + environment.message());
    return serve(&line);
}
