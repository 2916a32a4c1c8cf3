// ggml-remote-server: the listener. It accepts guests and starts a worker process
// (ggml-remote-worker) for each; it never loads a backend nor decodes a guest's messages.
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

#include "host/common/config_file.h"
#include "host/common/server_log.h"
#include "host/common/serving_flags.h"
#include "host/common/shader_cache.h"
#include "host/listener/device_probe.h"
#include "host/listener/listener.h"
#include "host/listener/server_paths.h"
#include "host/listener/worker_jail.h"
#include "host/worker/jail/sandbox.h"
#include "host/worker/jail/worker_identity.h"
#include "protocol/wire.h"
#include "status_command.h"
#include "transport/endpoint.h"
#include "transport/spin_policy.h"
#include "transport/tls_key.h"

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
         --config FILE          read options from FILE (e.g. /etc/ggml-remote/server.conf)
                                before the command line: one per line, a long flag's
                                name without its dashes, `name = value` or a bare `name`
                                for a switch; a line starting with # is a comment.
                                Flags on the command line come after the file's: the
                                last of a setting wins, repeatable ones add up
  -l,    --listen ENDPOINT      where to listen; repeatable (default: %s, or the
                                sockets systemd passes with socket activation)
                                ENDPOINT is unix:/path/to.sock or tcp://host:port,
                                or ivshmem:/dev/shm/NAME,size=64M: a memory file
                                that QEMU maps into one VM (ivshmem-plain), or
                                vsock://ANY:PORT (or vsock://CID:PORT): AF_VSOCK for
                                VMs on a host with vhost-vsock; for Firecracker,
                                Cloud Hypervisor and vhost-device-vsock listen on
                                unix:UDS_PATH_PORT instead (docs/MICROVMS.md)
         --tls-psk FILE         every tcp:// listener speaks TLS 1.3 and admits only
                                guests that hold a key of FILE (identity:hexkey lines,
                                made with psktool -u NAME -p FILE); guests connect to
                                tls://host:port
         --insecure             allow plain TCP on a non-loopback address (anyone who
                                can reach it can use the host's devices), also for
                                --metrics
         --tensor-peer ENDPOINT another server (tcp://host:port or tls://host:port) this
                                one may connect to, for a guest's tensor-parallel group
                                across machines (llama.cpp -sm tensor); repeatable
                                (default: none: such groups fall back to the guest)
         --metrics ENDPOINT     answer Prometheus scrapes (HTTP GET /metrics) on
                                tcp://host:port or unix:/path.sock; no authentication:
                                keep it on loopback or a unix socket
         --metrics-per-session  also list each live session's own series, labelled
                                with its id and peer (one set per session: the
                                number of series grows with the sessions)
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
         --models DIR           published GGUF models (DIR's *.gguf files): a guest
                                whose model holds a tensor of theirs sends none of
                                its bytes, whatever its tenant; replace files by
                                rename only (see docs/SECURITY.md, "Model library")
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
         --max-starts-per-peer N  session workers one peer may start a second (a
                                burst of 4 x N at once; default: 8): beyond it its
                                connections are refused before any worker starts
         --max-starts N         session workers all peers together may start a
                                second (a burst of 4 x N; default: 32)
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
         --log-format FORMAT    text (default): lines for people; json: one object a
                                line for log collectors, {"time", "level", "message"}
                                and "session" and "peer" where a line concerns one

The directories workers write (--weight-store, --shader-cache,
GGML_REMOTE_RECORD_DIR) must lie apart from each other, from what workers load
(/usr, libraries, backends), and from the key file, sockets and region files;
the server refuses to start otherwise.

signals to the listener:
  SIGUSR2  replace the listener by the program at its path (e.g. after an upgrade),
           with the same arguments; it takes over the sockets and the live sessions
  SIGHUP   re-read the --tls-psk file for new sessions (a bad file keeps the old keys)
  SIGTERM, SIGINT  stop (and end every session, unless --keep-sessions)

status of a running server (its devices, live sessions and their uploads):
  %s status --connect unix:/path/to.sock [--json] [--watch [SECONDS]]

example:
  %s --listen unix:/tmp/ggml-remote.sock --listen tcp://127.0.0.1:50053
  GGML_BACKEND_PATH=/usr/lib/x86_64-linux-gnu/ggml-remote/libggml-remote.so \
  GGML_REMOTE_SERVERS=unix:/tmp/ggml-remote.sock llama-cli -m model.gguf -ngl 99
)";

void print_usage(const char *program) { std::printf(kUsage, program, kDefaultEndpoint, program, program); }

[[noreturn]] void fail(const std::string &message) { host::fail_command_line(message); }

// The worker program, found once; the server cannot serve without it.
std::string worker_program() {
    std::string path;
    if (Status found = host::find_worker_program(&path); !found) fail(found.message());
    return path;
}

// The services program (host/services/services.h), found once; the same.
std::string services_program() {
    std::string path;
    if (Status found = host::find_helper_program("ggml-remote-services", "services", &path); !found) {
        fail(found.message());
    }
    return path;
}

// The host's devices, from the device probe (device_probe.h).
std::vector<host::ProbedDevice> probed_devices(const std::string &worker, const host::ServingOptions &options) {
    std::vector<host::ProbedDevice> devices;
    if (Status status = host::probe_devices(worker, options, &devices); !status) {
        std::fprintf(stderr, "ggml-remote-server: %s\n", status.message().c_str());
        std::exit(1);
    }
    return devices;
}

// Makes the store's directory: the server's own (its store owner, in the services
// process, writes it), never the workers', which reach entries only through the
// owner. The services process removes what earlier owners left half written.
void prepare_weight_store(const host::ListenerOptions &options) {
    const host::WeightStoreOptions &store = options.weight_store;
    if (store.directory.empty()) return;
    if (::mkdir(store.directory.c_str(), 0700) != 0 && errno != EEXIST) {
        fail("--weight-store: mkdir " + store.directory + ": " + std::strerror(errno));
    }
    struct stat st{};
    if (::stat(store.directory.c_str(), &st) == 0 && !S_ISDIR(st.st_mode)) {
        fail("--weight-store: " + store.directory + ": not a directory");
    }
    // An older server gave the directory to --worker-user: it is taken back.
    if (::stat(store.directory.c_str(), &st) == 0 && (st.st_uid != ::geteuid() || (st.st_mode & 077) != 0) &&
        (::chown(store.directory.c_str(), ::geteuid(), ::getegid()) != 0 ||
         ::chmod(store.directory.c_str(), 0700) != 0)) {
        fail("--weight-store: " + store.directory +
             " is not the server's own, and cannot be made so: " + std::strerror(errno));
    }
    host::log_line(
        "weight store: " + store.directory +
        (store.shared_across_tenants ? ", shared by all guests" : ", one part per user, identity or address") +
        (store.max_bytes != 0 ? ", at most " + std::to_string(store.max_bytes >> 20) + " MiB" : ""));
}

// Makes the shader cache's directory, for the workers' user where they run as another,
// and says whether sessions will use it: only where Landlock keeps tenants apart.
void prepare_shader_cache(const host::ListenerOptions &options, const host::WorkerIdentity &identity,
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
        fail("--metrics " + text +
             ": refusing to serve metrics without authentication beyond loopback: use a "
             "loopback address or a unix socket, or --insecure to let anyone who can reach that address read them");
    }
}

int list_devices() {
    std::printf("host devices:\n");
    for (const host::ProbedDevice &device : probed_devices(worker_program(), host::ServingOptions())) {
        std::printf("  %s: %s (%llu MiB, %llu MiB free)\n", device.name.c_str(), device.description.c_str(),
                    static_cast<unsigned long long>(device.total_bytes >> 20),
                    static_cast<unsigned long long>(device.free_bytes >> 20));
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

struct CommandLine {
    host::ListenerOptions options;
    bool insecure = false;
    // The worker's program, then the serving flags (serving_flags.h) as given.
    std::vector<std::string> worker_command;
    // The program, then every flag as given, the --config file's as flags: SIGUSR2
    // starts the listener anew with it.
    std::vector<std::string> listener_command;
};

// A --tensor-peer endpoint: a server of another machine, tcp:// or tls://.
Endpoint tensor_peer(const std::string &text) {
    Endpoint endpoint;
    Status status = parse_endpoint(text, &endpoint);
    if (!status) fail("--tensor-peer " + text + ": " + status.message());
    if (endpoint.kind != Endpoint::Kind::tcp && endpoint.kind != Endpoint::Kind::tls) {
        fail("--tensor-peer " + text + ": a peer server is tcp://host:port or tls://host:port");
    }
    if (!endpoint.psk_file.empty())
        fail("--tensor-peer " + text + ": takes no psk-file= (the group's key is the link's)");
    return endpoint;
}

// Flags only the listener acts on; --weight-store reaches the workers resolved.
bool parse_listener_flag(host::CommandLineCursor &args, CommandLine *line) {
    const std::string flag = args.flag();
    if (flag == "-l" || flag == "--listen") {
        line->options.listen.push_back(args.value());
    } else if (flag == "--tensor-peer") {
        line->options.tensor_peers.push_back(tensor_peer(args.value()));
    } else if (flag == "--metrics") {
        line->options.metrics = args.value();
    } else if (flag == "--metrics-per-session") {
        line->options.metrics_per_session = true;
    } else if (flag == "--insecure") {
        line->insecure = true;
    } else if (flag == "--keep-sessions") {
        line->options.keep_sessions = true;
    } else if (flag == "--weight-store") {
        line->options.weight_store.directory = host::absolute_path(flag, args.value());
    } else if (flag == "--weight-store-size") {
        line->options.weight_store.max_bytes = args.size_value();
        if (line->options.weight_store.max_bytes == 0) fail("--weight-store-size must be at least one byte");
    } else if (flag == "--weight-store-shared") {
        line->options.weight_store.shared_across_tenants = true;
    } else if (flag == "--weight-store-verify") {
        line->options.weight_store.verify_on_use = true;
    } else if (flag == "--max-sessions-per-peer") {
        line->options.max_sessions_per_peer = args.int_value(1);
    } else if (flag == "--max-unauthenticated") {
        line->options.max_unauthenticated = args.int_value(1);
    } else if (flag == "--max-starts-per-peer") {
        line->options.starts.per_peer_per_second = args.int_value(1);
    } else if (flag == "--max-starts") {
        line->options.starts.per_second = args.int_value(1);
    } else if (flag == "--shader-cache") {
        // Workers get the path as the listener resolved it, for their sandbox's rules.
        line->options.shader_cache = host::absolute_path(flag, args.value());
        line->worker_command.insert(line->worker_command.end(), {flag, line->options.shader_cache});
    } else {
        return false;
    }
    return true;
}

// Reads one option (not --help, --version, --list-devices, --config) into *line,
// and records it for the workers and a SIGUSR2 replacement; false if it is none.
bool parse_option(host::CommandLineCursor &args, CommandLine *line) {
    if (parse_listener_flag(args, line)) {
        args.append_given(&line->listener_command);
        return true;
    }
    if (!parse_serving_flag(args, &line->options)) return false;
    args.append_given(&line->worker_command);
    args.append_given(&line->listener_command);
    return true;
}

// Reads the flags of `args` into *line, and the --config file's path into *config;
// an exit status where one answers at once (--help, --version, --list-devices).
std::optional<int> parse_arguments(host::CommandLineCursor &args, const char *program, CommandLine *line,
                                   std::string *config) {
    while (args.next()) {
        const std::string flag = args.flag();
        if (flag == "-h" || flag == "--help") {
            print_usage(program);
            return 0;
        }
        if (flag == "--version") {
            std::printf("ggml-remote-server 0.1.0 (protocol version %u)\n", protocol::kProtocolVersion);
            return 0;
        }
        if (flag == "--list-devices") return list_devices();
        if (flag == "--config") {
            if (!config->empty()) fail("--config given twice");
            *config = args.value();
            if (config->empty()) fail("--config needs a file");
            continue;
        }
        if (!parse_option(args, line)) fail("unknown argument: " + flag);
    }
    return std::nullopt;
}

// The settings of the --config file, each read as the flag it names, before the
// command line's. A SIGUSR2 replacement gets them as flags: it never reads the file.
void apply_config_file(const std::string &path, CommandLine *line) {
    std::vector<host::ConfigArgument> settings;
    // A line's refusal names FILE:LINE; the file's own, --config.
    if (Status read = host::read_config_file(path, &settings); !read) {
        fail(read.code() == Code::bad_request ? read.message() : "--config: " + read.message());
    }
    for (host::ConfigArgument &setting : settings) {
        const host::FlagOrigin origin(setting.origin);
        std::string program = "ggml-remote-server";  // the cursor skips it, as argv[0]
        char *argv[] = {program.data(), setting.argument.data()};
        host::CommandLineCursor args(2, argv);
        (void)args.next();
        if (!parse_option(args, line)) fail("unknown name '" + args.flag().substr(2) + "'");
        (void)args.next();  // refuses a value given to a switch
    }
}

// Reads the command line into *line, after the --config file if it names one.
std::optional<int> parse_command_line(int argc, char **argv, CommandLine *line) {
    std::string config;
    line->listener_command.assign(argv, argv + 1);
    host::CommandLineCursor args(argc, argv);
    if (const std::optional<int> answered = parse_arguments(args, argv[0], line, &config)) return answered;
    if (config.empty()) return std::nullopt;
    // Read again after the file, so that its flags win over the file's.
    *line = CommandLine();
    line->listener_command.assign(argv, argv + 1);
    apply_config_file(config, line);
    host::CommandLineCursor again(argc, argv);
    config.clear();
    (void)parse_arguments(again, argv[0], line, &config);
    return std::nullopt;
}

// Each --listen endpoint, or the default one; authentication beyond loopback.
void check_listen_endpoints(host::ListenerOptions *options, bool insecure) {
    // Under systemd socket activation the sockets come from systemd (LISTEN_FDS).
    if (options->listen.empty() && std::getenv("LISTEN_FDS") == nullptr) options->listen.push_back(kDefaultEndpoint);
    for (const std::string &text : options->listen) {
        Endpoint endpoint;
        Status status = parse_endpoint(text, &endpoint);
        if (!status) fail(status.message());
        if (!endpoint.psk_file.empty()) {
            fail("--listen " + text + ": psk-file= is for guests; a server takes its keys from --tls-psk FILE");
        }
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
void check_key_file(const host::ListenerOptions &options) {
    std::vector<PreSharedKey> keys;
    Status status = read_psk_file(options.tls_psk_file, &keys);
    if (!status) fail("--tls-psk: " + status.message());
    for (PreSharedKey &key : keys) ::explicit_bzero(key.key.data(), key.key.size());
    if (options.sandbox &&
        host::policy_lets_read(host::worker_filesystem_policy(host::worker_paths(options)), options.tls_psk_file)) {
        host::log_warning("the key file " + options.tls_psk_file +
                          " lies where session workers may read (their sandbox allows it); move it, e.g. to "
                          "/etc/ggml-remote/");
    }
    if (psk_file_readable_by_others(options.tls_psk_file)) {
        host::log_warning("every user of this machine can read the key file " + options.tls_psk_file +
                          " (chmod o-r it)");
    }
}

// The --worker-user's identity; returns the start-up words for it ("" without one).
std::string resolve_worker_user(const host::ListenerOptions &options, host::WorkerIdentity *identity) {
    if (options.worker_user.empty()) return "";
    if (::geteuid() != 0) fail("--worker-user needs the server to start as root");
    Status status = host::find_worker_identity(options.worker_user, identity);
    if (!status) fail(status.message());
    return ", as " + identity->user + " (uid " + std::to_string(identity->uid) + ")";
}

// Fails early on a --device that does not exist, and says what is served; the
// devices stay in `options` for /metrics.
void announce_devices(const std::string &worker, host::ListenerOptions *options) {
    options->devices = probed_devices(worker, *options);
    for (const host::ProbedDevice &device : options->devices) {
        host::log_line("serving " + device.name + ": " + device.description);
    }
}

// A sandbox that cannot work here is found now, once, rather than by every guest.
// Whether Landlock will confine the workers' files.
bool announce_sandbox(const host::ListenerOptions &options, const std::string &worker_identity) {
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

// --models must name a directory the listener can read; it indexes it once serving.
void check_models_directory(const host::ListenerOptions &options) {
    if (options.models.empty()) return;
    struct stat st{};
    if (::stat(options.models.c_str(), &st) != 0) fail("--models " + options.models + ": " + std::strerror(errno));
    if (!S_ISDIR(st.st_mode)) fail("--models " + options.models + ": not a directory");
    host::log_line("models: " + options.models + ", shared by all guests; indexing its *.gguf files");
}

// The listener: checks its configuration, says what it serves, then serves.
int serve(CommandLine *line) {
    host::ListenerOptions &options = line->options;
    check_listen_endpoints(&options, line->insecure);
    if (!options.metrics.empty()) check_metrics_endpoint(options.metrics, line->insecure);
    if (!options.tls_psk_file.empty()) check_key_file(options);
    // Before anything is made or given to the workers' user.
    if (Status paths = host::check_server_paths(options); !paths) fail(paths.message());
    host::WorkerIdentity identity;
    const std::string worker_identity = resolve_worker_user(options, &identity);
    line->worker_command.insert(line->worker_command.begin(), worker_program());
    options.services_program = services_program();
    prepare_weight_store(options);
    check_models_directory(options);
    announce_devices(line->worker_command.front(), &options);
    prepare_shader_cache(options, identity, announce_sandbox(options, worker_identity));
    host::log_line(describe_core_scheduling(options.limits));
    return host::run_listener(options, line->worker_command, line->listener_command);
}

}  // namespace

int main(int argc, char **argv) {
    if (argc > 1 && std::strcmp(argv[1], "status") == 0) return run_status_command(argc - 1, argv + 1);
    CommandLine line;
    if (const std::optional<int> answered = parse_command_line(argc, argv, &line)) return *answered;
    host::set_log_format(line.options.log_format);
    // Read once, here; the listener names a malformed value, its workers keep quiet.
    const Status environment = host::read_server_environment(&line.options);
    if (!environment) host::log_warning(environment.message());
    return serve(&line);
}
