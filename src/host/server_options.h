// The server's options, shared by the listener and its session workers.
#pragma once

#include "host/landlock.h"
#include "host/session.h"
#include "host/weight_store.h"
#include "transport/socket.h"
#include "transport/wait_options.h"

#include <string>
#include <vector>

namespace ggml_remote::host {

struct ServerOptions {
    std::vector<std::string> listen;   // endpoints
    std::vector<std::string> devices;  // host device names to expose; empty = all
    SessionLimits limits;
    int max_sessions = 64;
    // --max-sessions-per-peer; 0: the default, a quarter of max_sessions (peer_limits.h).
    int max_sessions_per_peer = 0;
    // Connections that have not authenticated yet (TLS guests in their handshake);
    // they never hold one of max_sessions (see admission.h).
    int max_unauthenticated = 16;
    // --metrics: where the listener answers Prometheus scrapes (metrics_endpoint.h); empty: nowhere.
    std::string metrics;
    // --keep-sessions: SIGTERM and SIGINT stop only the listener; live sessions go on
    // in their workers until their guests leave (a service manager's restart).
    bool keep_sessions = false;
    bool verbose = false;
    bool sandbox = true;
    // --worker-user: a server started as root runs its workers as this user.
    std::string worker_user;  // workers enter the seccomp sandbox (sandbox.h); --no-sandbox
    // --tls-psk: every TCP listener speaks TLS with a key from this file (read by
    // the listener at start-up and on SIGHUP; each TLS worker reads the listener's checked copy).
    std::string tls_psk_file;
    // --weight-store DIR and its limits (weight_store.h).
    WeightStoreOptions weight_store;
    // --shader-cache DIR: each tenant's GPU shader cache in a directory of its own
    // beneath DIR (shader_cache.h); empty: workers keep no shader cache.
    std::string shader_cache;
    // From the environment (read_server_environment): how a worker waits for its
    // guest (GGML_REMOTE_RING_SPIN_US, GGML_REMOTE_SPIN_SPARE), where it keeps
    // every frame of its session for the fuzzers' seeds (GGML_REMOTE_RECORD_DIR),
    // and the backend ggml loads besides its own directory's (GGML_BACKEND_PATH,
    // which its sandbox lets it read).
    WaitOptions waiting;
    std::string record_dir;
    std::string backend_path;
    // Worker only: the listener's status board and this session's slot in it.
    int status_fd = -1;
    int status_slot = -1;
    // Worker only (TLS): where it asks the listener for a session place after its handshake.
    int admission_fd = -1;
    // Worker only (TLS): the listener's checked copy of the key file, read instead of it.
    int tls_psk_fd = -1;
    // Worker only: its channel to the weight store's owner in the listener
    // (store_channel.h), or -1: no store.
    int store_fd = -1;
};

// Reads the server's environment variables into `options`, once at start-up; a
// malformed value keeps its default and is named in the error.
Status read_server_environment(ServerOptions *options);

// The paths of `options` a worker's sandbox grants (landlock.h).
WorkerPaths worker_paths(const ServerOptions &options);

// The host devices a session may use, in the order guests see them.
Status select_devices(const ServerOptions &options, std::vector<ggml_backend_dev_t> *devices);

// Loads the host's ggml backends once per process, without loading our own plugin
// (a GGML_BACKEND_PATH that names libggml-remote would make the server its own guest).
void load_host_backends(bool verbose);

// Server log line on stderr: "ggml-remote-server: <text>" with a time stamp, in
// one write (server_log.h).
void log_line(const std::string &text);

}  // namespace ggml_remote::host
