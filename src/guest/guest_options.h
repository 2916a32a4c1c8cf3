// GuestOptions: the plugin's settings, read from its environment once, at
// start-up; the rest of the guest is given these values. docs/REFERENCE.md lists
// the variables for users.
#pragma once

#include <cstddef>
#include <functional>
#include <string>

#include "protocol/commands.h"
#include "transport/wait_options.h"

namespace ggml_remote::guest {

// The default longest silence of a server that keeps its sessions alive: many
// keep-alive intervals (protocol::kKeepAliveIntervalMs), so that a worker whose
// host is busy still gets one through in time.
constexpr int kKeepAliveSilenceMs = 15000;

struct GuestOptions {
    // GGML_REMOTE_SERVERS: comma-separated endpoints (unix:, shm:, tcp://, tls://).
    std::string servers;
    // GGML_REMOTE_CONNECT_TIMEOUT_MS: the limit for connecting and the handshakes.
    int connect_timeout_ms = 5000;
    // GGML_REMOTE_REPLY_TIMEOUT_MS: after the handshake, the longest a call waits
    // on its server (for a reply, or for room to send); then the session is lost,
    // and the reconnect rules apply. 10 minutes: a first compute may compile
    // shaders, a long prompt may run on a slow host. A server that does not keep
    // the session alive (no kSessionKeepAlive: an older release) sends nothing
    // while it computes, so for it this is also the longest silence. 0: no limit.
    int reply_timeout_ms = 600000;
    // GGML_REMOTE_SILENCE_TIMEOUT_MS: where the server keeps the session alive
    // while it computes, the longest it may stay silent (never longer than the
    // reply timeout): a stopped or dead server is noticed within seconds.
    // 0: the reply timeout alone.
    int silence_timeout_ms = kKeepAliveSilenceMs;
    // GGML_REMOTE_TLS_PSK_FILE / GGML_REMOTE_TLS_PSK: the key for tls:// (a file, or the key itself).
    std::string tls_psk_file;
    std::string tls_psk;
    // GGML_REMOTE_STATS=1: one line of traffic counters per server at exit.
    bool print_stats = false;
    // GGML_REMOTE_SHARED_RING=0: on shm:, commands stay on the socket.
    bool shared_ring = true;
    // GGML_REMOTE_MAPPED_WEIGHTS=0: ops on weights in CPU_Mapped buffers stay on the guest's CPU.
    bool mapped_weights = true;
    // GGML_REMOTE_WEIGHT_STORE=0 (0 here) or GGML_REMOTE_STORE_MIN_BYTES: the
    // smallest weight tensor named by digest (never below the protocol's minimum).
    size_t store_min_bytes = size_t(64) << 10;
    // GGML_REMOTE_CACHE_DIR, else $XDG_CACHE_HOME/ggml-remote, else ~/.cache/ggml-remote:
    // where digests of model files are kept (empty: nowhere).
    std::string cache_dir;
    // GGML_REMOTE_RECONNECT=0: a lost connection stays lost (its devices fail).
    bool reconnect = true;
    // GGML_REMOTE_RECONNECT_MAX_DELAY_MS: the longest pause between two connect
    // attempts (they start 10 ms apart and double); a series of attempts lasts at
    // most connect_timeout_ms, and after a failed series the next starts no sooner
    // than this pause later (calls in between fail at once).
    int reconnect_max_delay_ms = 1000;
    // GGML_REMOTE_RING_SPIN_US, GGML_REMOTE_SPIN_SPARE, GGML_REMOTE_FOLLOW_WORKER.
    WaitOptions waiting;

    // The longest silence of a server after the handshake, with or without its keep-alives.
    int silence_limit_ms(bool server_keeps_alive) const;
};

// A variable's value, or null when it is not set (std::getenv in the plugin).
using Environment = std::function<const char *(const char *name)>;

// Reads every variable above; a malformed value is logged, naming the variable,
// and its default kept.
GuestOptions read_guest_options(const Environment &environment);
// The process's own environment.
GuestOptions read_guest_options();

}  // namespace ggml_remote::guest
