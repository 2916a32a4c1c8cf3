// ServingOptions: what the server serves and how, read by the listener from its
// flags and environment and handed on to every worker it starts, which reads the
// same flags with the same parser (serving_flags.h). The listener's own settings
// are in listener/listener_options.h; what is particular to one worker, in its
// WorkerLaunch (worker_contract.h).
#pragma once

#include <string>
#include <vector>

#include "host/common/server_log.h"
#include "host/common/session_limits.h"
#include "protocol/status.h"
#include "transport/wait_options.h"

namespace ggml_remote::host {

// The paths of the serving options a worker's sandbox grants (worker/jail/landlock.h).
struct WorkerPaths {
    std::string backend_path;  // GGML_BACKEND_PATH: a backend ggml loads; read only
    std::string record_dir;    // GGML_REMOTE_RECORD_DIR: where the worker records its frames
};

struct ServingOptions {
    std::vector<std::string> devices;  // host device names to expose; empty = all
    SessionLimits limits;
    // --max-sessions: the listener admits this many; a worker names it to the guests it refuses.
    int max_sessions = 64;
    bool verbose = false;
    // --log-format: each process's log lines for people, or as JSON (server_log.h).
    LogFormat log_format = LogFormat::text;
    bool sandbox = true;  // workers enter the seccomp sandbox (sandbox.h); --no-sandbox
    // --worker-user: a server started as root runs its workers as this user.
    std::string worker_user;
    // --tls-psk: every TCP listener speaks TLS with a key from this file (read by
    // the listener at start-up and on SIGHUP; each TLS worker reads the listener's checked copy).
    std::string tls_psk_file;
    // --shader-cache DIR: each tenant's GPU shader cache in a directory of its own
    // beneath DIR (shader_cache.h); empty: workers keep no shader cache.
    std::string shader_cache;
    // --models DIR: published GGUF models that the store's owner, in the listener,
    // serves weights from (services/model_library.h); empty: none. Workers never
    // open it: they only tell guests that the server has one (kSessionModelLibrary).
    std::string models;
    // From the environment (read_server_environment): how a worker waits for its
    // guest (GGML_REMOTE_RING_SPIN_US, GGML_REMOTE_SPIN_SPARE), where it keeps
    // every frame of its session for the fuzzers' seeds (GGML_REMOTE_RECORD_DIR),
    // and the backend ggml loads besides its own directory's (GGML_BACKEND_PATH,
    // which its sandbox lets it read).
    WaitOptions waiting;
    std::string record_dir;
    std::string backend_path;
};

// Reads the server's environment variables into `options`, once at start-up; a
// malformed value keeps its default and is named in the error.
Status read_server_environment(ServingOptions *options);

// The paths of `options` a worker's sandbox grants (landlock.h).
WorkerPaths worker_paths(const ServingOptions &options);

}  // namespace ggml_remote::host
