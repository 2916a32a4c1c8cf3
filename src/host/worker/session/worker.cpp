#include "host/worker/session/worker.h"

#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <optional>

#include "host/common/peer_channel.h"
#include "host/common/server_log.h"
#include "host/common/shader_cache.h"
#include "host/common/store_channel.h"
#include "host/common/worker_contract.h"
#include "host/worker/jail/sandbox.h"
#include "host/worker/jail/worker_identity.h"
#include "host/worker/session/host_devices.h"
#include "host/worker/session/session.h"
#include "transport/connection.h"
#include "transport/ivshmem_region.h"
#include "transport/peer_account.h"
#include "transport/peer_links.h"
#include "transport/socket.h"
#include "transport/tls_key.h"

namespace ggml_remote::host {

namespace {

std::string human_bytes(uint64_t bytes) {
    char text[32];
    if (bytes >= (1ull << 30))
        std::snprintf(text, sizeof(text), "%.2f GiB", bytes / double(1ull << 30));
    else if (bytes >= (1ull << 20))
        std::snprintf(text, sizeof(text), "%.2f MiB", bytes / double(1ull << 20));
    else if (bytes >= 1024)
        std::snprintf(text, sizeof(text), "%.1f KiB", bytes / 1024.0);
    else
        std::snprintf(text, sizeof(text), "%llu B", static_cast<unsigned long long>(bytes));
    return text;
}

// How long a TCP guest of a --tls-psk server has to finish the TLS handshake: a
// client that connects and stays silent does not hold a worker for longer.
constexpr int kTlsHandshakeTimeoutMs = 5000;

bool is_tcp(int fd) {
    int domain = 0;
    socklen_t length = sizeof(domain);
    return ::getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &length) == 0 && (domain == AF_INET || domain == AF_INET6);
}

// The first byte a guest sends, without taking it: 22 (a TLS handshake record)
// from a tls:// guest. -1 when nothing came within the time limit or it hung up.
int peek_first_byte(int fd, int timeout_ms) {
    const int ready = poll_one(fd, POLLIN, timeout_ms);
    unsigned char byte = 0;
    if (ready <= 0 || ::recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT) != 1) return -1;
    return byte;
}

// Tells the guest why it is turned away, in a handshake reply (through TLS where the
// stream has it), and takes its first message so that closing the socket does not
// reset the connection before the guest has read why.
void refuse(FramedStream *stream, Code code, const std::string &reason) {
    const protocol::FrameHeader reply = refusal_header(code, 0);
    (void)stream->send(reply, {protocol::ByteView(reason.data(), reason.size())});
    constexpr int kLingerMs = 2000;
    constexpr uint64_t kLargestHello = 4096;
    protocol::FrameHeader hello;
    if (poll_one(stream->fd(), POLLIN, kLingerMs) > 0 && stream->receive_header(&hello, kLargestHello).ok()) {
        (void)stream->discard(hello.payload_size);
    }
}

// The key of the identity the guest names, from the listener, which checks the
// guest's proof first; with it comes the store channel for that identity's tenant.
Status ask_for_key(int admission_fd, const BinderProof &proof, std::vector<uint8_t> *key, UniqueFd *store) {
    constexpr int kKeyAnswerMs = 5000;
    KeyRequest request;
    request.proof = proof;
    KeyReply reply;
    std::vector<UniqueFd> fds;
    store_channel::NoSigpipe no_sigpipe;
    if (!store_channel::send_message(admission_fd, &request, sizeof(request), nullptr, 0) ||
        !store_channel::receive_message(admission_fd, &reply, sizeof(reply), &fds, 1, kKeyAnswerMs)) {
        return error(Code::disconnected, "no answer from the listener about the guest's key");
    }
    reply.message[sizeof(reply.message) - 1] = '\0';
    Status status = reply.code == 0 ? Status::success() : error(static_cast<Code>(reply.code), reply.message);
    if (status && (reply.key_size == 0 || reply.key_size > sizeof(reply.key))) status = error(Code::error, "no key");
    if (status) key->assign(reply.key, reply.key + reply.key_size);
    if (status && !fds.empty()) *store = std::move(fds.front());
    ::explicit_bzero(reply.key, sizeof(reply.key));
    return status;
}

// TLS with a pre-shared key on a TCP guest's connection (--tls-psk), within
// kTlsHandshakeTimeoutMs of connecting in all. A guest that speaks the plain
// protocol is told, in it, to use tls://. This worker holds no key before its
// guest proved it holds one (ask_for_key), and none after the handshake.
Status accept_tls(int admission_fd, UniqueFd *store, FramedStream *stream,
                  std::chrono::steady_clock::time_point deadline) {
    constexpr int kTlsHandshakeRecord = 22;
    const int first = peek_first_byte(stream->fd(), ms_until(deadline));
    const auto left_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    Status status;
    if (first < 0 || left_ms.count() <= 0) {
        status = error(Code::disconnected, "no TLS handshake within " + std::to_string(kTlsHandshakeTimeoutMs) + " ms");
    } else if (first != kTlsHandshakeRecord) {
        refuse(stream, Code::bad_request,
               "this server speaks TLS on TCP: connect to tls://host:port with its pre-shared key "
               "(GGML_REMOTE_TLS_PSK_FILE)");
        status = error(Code::bad_request, "refused a guest without TLS (a tcp:// guest?)");
    } else {
        std::unique_ptr<TlsSession> tls;
        const TlsSession::KeyOracle listener = [&](const BinderProof &proof, std::vector<uint8_t> *key) {
            return ask_for_key(admission_fd, proof, key, store);
        };
        status = TlsSession::accept(stream->fd(), listener, static_cast<int>(left_ms.count()), &tls);
        if (status) {
            stream->start_tls(std::move(tls));
        } else {
            status = error(status.code(), "TLS handshake failed: " + status.message());
        }
    }
    return status;
}

// After its handshake a TLS guest asks the listener for one of --max-sessions places
// (admission.h): the listener's answer, kAdmissionGranted when it got one. No answer
// within a few seconds counts as kAdmissionFull.
char ask_for_session_place(int admission_fd) {
    if (admission_fd < 0) return kAdmissionGranted;  // a worker the listener admitted at accept
    constexpr int kAnswerTimeoutMs = 5000;
    const char request = kAdmissionRequest;
    char answer = 0;
    const bool answered = ::send(admission_fd, &request, 1, MSG_NOSIGNAL) == 1 &&
                          poll_one(admission_fd, POLLIN, kAnswerTimeoutMs) > 0 &&
                          ::recv(admission_fd, &answer, 1, MSG_DONTWAIT) == 1;
    ::close(admission_fd);
    return answered ? answer : kAdmissionFull;
}

// The TLS stage of a worker: the handshake (inside the sandbox, with the one key
// the listener gives for the guest's proof) and the session place. False when the
// guest is not served; a failed handshake is recorded in `slot` (the listener counts
// the refusals it answers itself). *store: the channel that came with the key.
bool authenticate(const std::string &label, const WorkerLaunch &launch, const ServingOptions &options, UniqueFd *store,
                  FramedStream *stream, SessionSlot *slot, std::chrono::steady_clock::time_point first_byte_deadline) {
    Status status = accept_tls(launch.admission_fd, store, stream, first_byte_deadline);
    if (!status) {
        log_error(label + ": " + status.message());
        if (slot != nullptr) record_turned_away(slot, GuestRefusal::tls_failed);
        return false;
    }
    const TlsSession *tls = stream->tls();
    const char answer = ask_for_session_place(launch.admission_fd);
    if (answer == kAdmissionPeerFull) {
        log_line(label + ": refused after its TLS handshake as '" + tls->peer_identity() +
                 "': its address holds all the sessions one peer may (--max-sessions-per-peer)");
        refuse(stream, Code::limit_exceeded,
               "this address holds the most sessions one peer may (--max-sessions-per-peer)");
        return false;
    }
    if (answer != kAdmissionGranted) {
        log_line(label + ": refused after its TLS handshake as '" + tls->peer_identity() +
                 "': the server is full (--max-sessions)");
        refuse(stream, Code::limit_exceeded,
               "the server is serving its maximum of " + std::to_string(options.max_sessions) + " sessions");
        return false;
    }
    log_line(label + ": TLS as '" + tls->peer_identity() + "': " + tls->description());
    return true;
}

}  // namespace

namespace {

// This guest's tenant directory of --shader-cache, made if need be; "" where it gets
// none: no --shader-cache, a TLS guest (known only after the sandbox's rules are
// fixed), or a kernel without Landlock (nothing would keep tenants apart).
std::string prepare_shader_cache(const std::string &label, int client_fd, const ServingOptions &options,
                                 bool needs_tls) {
    if (options.shader_cache.empty() || needs_tls || landlock_abi() == 0) return "";
    PeerAccount peer;
    if (!peer_account(client_fd, &peer).ok()) return "";
    const std::string directory = tenant_shader_cache(options.shader_cache, peer.key);
    Status status = prepare_tenant_shader_cache(directory);
    if (!status) {
        log_warning(label + ": no shader cache for this session: " + status.message());
        return "";
    }
    return directory;
}

// The sandbox, with read-write access to this tenant's shader cache; the drivers use
// that cache only where Landlock confines the worker's files. None to the weight
// store: its entries come from the store's owner, as read-only descriptors.
Status sandbox_worker(const std::string &label, int client_fd, const ServingOptions &options, bool needs_tls) {
    FilesystemPolicy files = worker_filesystem_policy(worker_paths(options));
    const std::string shader_cache = prepare_shader_cache(label, client_fd, options, needs_tls);
    if (!shader_cache.empty()) files.read_write.push_back(shader_cache);
    SandboxReport report;
    Status status = enter_sandbox(files, &report);
    if (status && !shader_cache.empty() && report.filesystem_confined) {
        use_shader_cache(shader_cache);
        log_line(label + ": shader cache " + shader_cache);
    }
    return status;
}

// Everything before the guest's first byte: undumpable, only the descriptors the
// worker needs, the worker's own user, the sandbox. 0, or the exit code.
int confine_worker(const std::string &label, const WorkerLaunch &launch, const ServingOptions &options,
                   bool needs_tls) {
    // First of all: exec made this process dumpable again.
    Status status = make_undumpable();
    if (!status) log_warning(label + ": " + status.message());
    // Only the guest's socket, the status board and the admission socket: nothing the
    // listener or the listener's parents happened to leave open.
    std::vector<int> kept{launch.client_fd};
    if (launch.status_fd >= 0) kept.push_back(launch.status_fd);
    if (launch.admission_fd >= 0) kept.push_back(launch.admission_fd);
    if (launch.store_fd >= 0) kept.push_back(launch.store_fd);
    if (launch.peer_fd >= 0) kept.push_back(launch.peer_fd);
    close_descriptors_except(kept);
    if (!options.worker_user.empty()) {
        WorkerIdentity identity;
        status = find_worker_identity(options.worker_user, &identity);
        if (status) status = become(identity);
        if (!status) {
            log_error(label + ": refused: cannot run the worker as " + options.worker_user + ": " + status.message());
            return 1;
        }
    }
    // The guest's first byte is read inside the sandbox: GnuTLS parses the handshake of
    // a guest that may hold no key, and the backends load only after it authenticated.
    if (options.sandbox) {
        status = sandbox_worker(label, launch.client_fd, options, needs_tls);
        if (!status) {
            log_error(label + ": refused: cannot sandbox the worker: " + status.message());
            return 1;
        }
    }
    return 0;
}

// An ivshmem region's session: the listener names its peer after the region, and
// hands over the region's file in place of a socket.
bool is_region_peer(const std::string &peer) { return peer.rfind("ivshmem:", 0) == 0; }

// An ivshmem session's region, whose heap holds the guest's buffers; no mapping otherwise.
struct RegionShare {
    std::shared_ptr<const Mapping> mapping;
    RegionLayout layout;
};

// An ivshmem session's stream: the region's rings, over one end of a socket pair of
// the worker's own (the other end in *other_end) whose only use is to be shut down
// by the watchdog, which ends a wait on the guest that way.
Status region_stream(int region_fd, const std::string &peer, FramedStream *stream, RegionShare *region,
                     UniqueFd *other_end) {
    int pair[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) {
        return error(Code::error, std::string("socketpair: ") + std::strerror(errno));
    }
    other_end->reset(pair[1]);
    std::unique_ptr<RingChannel> rings;
    Status status = serve_region_rings(region_fd, pair[0], &rings, &region->mapping, &region->layout);
    *stream = FramedStream(UniqueFd(pair[0]), peer);
    if (status) stream->attach_ring(std::move(rings));
    return status;
}

// Whether the guest on `client_fd` is on this machine, and trusted with status
// queries: root or the user the server runs as (`server_uid`).
bool is_trusted_local_peer(int client_fd, uid_t server_uid) {
    PeerAccount peer;
    return peer_account(client_fd, &peer).ok() && peer.kind == PeerAccount::Kind::user &&
           (peer.uid == 0 || peer.uid == server_uid);
}

// The weight store, through the channel the listener gave this worker. The owner
// knows the tenant of a unix, TCP or region guest from the listener; a TLS guest's is
// the identity it authenticated as, which the worker names (once, after the handshake).
void offer_weight_store(const std::string &label, const WorkerLaunch &launch, Session *session) {
    if (launch.store_fd < 0) return;
    Status status = session->use_weight_store(UniqueFd(launch.store_fd));
    if (!status) log_warning(label + ": no weight store for this session: " + status.message());
}

// Whether the connection is a peer server's (transport/peer_links.h): a TCP one
// whose first byte, by `deadline`, is the peer hello's, which no guest's first
// byte is. The wait is the guest's first-byte wait, not one more.
bool is_peer_link(const WorkerLaunch &launch, int client_fd, std::chrono::steady_clock::time_point deadline) {
    return launch.peer_fd >= 0 && is_tcp(client_fd) &&
           peek_first_byte(client_fd, ms_until(deadline)) == PeerLinks::kHelloMagic[0];
}

// When a TCP guest's first byte is due: a TLS guest's handshake must be done by
// then; a plain guest's within --handshake-timeout of connecting anyway.
std::chrono::steady_clock::time_point first_byte_deadline(const ServingOptions &options, bool needs_tls,
                                                          std::chrono::steady_clock::time_point connected) {
    int wait_ms = kTlsHandshakeTimeoutMs;
    if (!needs_tls && options.limits.handshake_timeout_s > 0) {
        wait_ms = std::min(wait_ms, options.limits.handshake_timeout_s * 1000);
    }
    return connected + std::chrono::milliseconds(wait_ms);
}

// Reads the whole peer hello within `timeout_ms` from the first byte's arrival:
// a peer that sends part of it and then nothing is given up on, not waited for.
bool read_peer_hello(int fd, int timeout_ms, PeerLinks::Hello *hello) {
    auto *bytes = reinterpret_cast<uint8_t *>(hello);
    size_t got = 0;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (got < sizeof(*hello)) {
        const int left_ms = ms_until(deadline);
        if (left_ms <= 0 || poll_one(fd, POLLIN, left_ms) <= 0) return false;
        const ssize_t n = ::recv(fd, bytes + got, sizeof(*hello) - got, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) return false;
        if (n > 0) got += static_cast<size_t>(n);
    }
    return true;
}

// Reads the peer hello (here, in the sandbox) and hands the connection to the
// listener's peer broker, which gives it to the session whose group it names.
int hand_over_peer_link(const std::string &label, const WorkerLaunch &launch, FramedStream *stream) {
    PeerLinks::Hello hello{};
    const bool read = read_peer_hello(stream->fd(), kTlsHandshakeTimeoutMs, &hello);
    if (!read || std::memcmp(hello.magic, PeerLinks::kHelloMagic.data(), sizeof(hello.magic)) != 0) {
        log_warning(label + ": refused: not a peer server's hello");
        return 2;
    }
    peer_channel::Request offer;
    offer.kind = static_cast<uint32_t>(peer_channel::Kind::offer);
    offer.rank = hello.to_rank;
    offer.other_rank = hello.from_rank;
    std::memcpy(offer.token_id, hello.token_id, sizeof(offer.token_id));
    constexpr int kAnswerMs = 5000;
    if (Status s = peer_channel::ask(launch.peer_fd, offer, stream->fd(), kAnswerMs, nullptr); !s) {
        log_warning(label + ": refused a peer server's connection: " + s.message());
        return 2;
    }
    log_line(label + ": a peer server's connection (rank " + std::to_string(hello.from_rank) +
             "), handed to its session");
    return 0;
}

// This worker's slot of the listener's status board (mapped into `board`), or null.
SessionSlot *attach_status_slot(const WorkerLaunch &launch, StatusBoard *board) {
    if (launch.status_fd < 0 || !StatusBoard::attach(launch.status_fd, board).ok()) return nullptr;
    return board->slot(static_cast<uint32_t>(launch.status_slot));
}

// Serves the authenticated guest until it leaves; the outcome and the session's totals.
// A guest whose handshake fails is recorded in `slot` as turned away.
Status serve_guest(const std::string &label, FramedStream *stream, const WorkerLaunch &launch, uid_t server_uid,
                   const std::vector<ggml_backend_dev_t> &devices, const ServingOptions &options,
                   const RegionShare &region, const StatusBoard &board, SessionSlot *slot, SessionCounters *counters,
                   CoreStats *cores, std::optional<std::chrono::steady_clock::time_point> handshake_from) {
    Session session(devices, options.limits);
    if (handshake_from) session.count_handshake_from(*handshake_from);
    if (region.mapping != nullptr) {
        session.use_region_heap(region.mapping, region.layout.heap_offset, region.layout.heap_size);
    }
    session.log_compute_failures([&label](const std::string &message) { log_warning(label + ": " + message); });
    offer_weight_store(label, launch, &session);
    if (!options.models.empty()) session.offer_model_library();
    if (launch.peer_fd >= 0) session.use_peer_channel(UniqueFd(launch.peer_fd));
    int domain = 0;
    socklen_t length = sizeof(domain);
    bool trusted_local_peer = false;
    const int client_fd = launch.client_fd;
    if (::getsockopt(client_fd, SOL_SOCKET, SO_DOMAIN, &domain, &length) == 0 && domain == AF_UNIX) {
        session.allow_shared_memory();  // a guest on this machine: memory files can be passed
        trusted_local_peer = is_trusted_local_peer(client_fd, server_uid);
    }
    if (slot != nullptr) {
        session.attach_status(&board, slot, trusted_local_peer, static_cast<uint32_t>(options.max_sessions));
    }
    // GGML_REMOTE_RECORD_DIR: keep every frame of the session, for the fuzzers' seeds.
    FrameRecorder recorder;
    if (!options.record_dir.empty()) {
        Status recording = FrameRecorder::open(options.record_dir, &recorder);
        if (recording) {
            session.record_frames(&recorder);
        } else {
            log_warning(label + ": " + recording.message());
        }
    }
    Status outcome = session.serve(*stream);
    if (!outcome.ok() && !session.handshaken() && slot != nullptr) {
        record_turned_away(slot, handshake_refusal_for(outcome.code()));
    }
    *counters = session.counters();
    *cores = session.core_stats();
    return outcome;
}

// ", cores shared in 52 of 64 CPU computes at 1 thread": how the session's computes
// shared the host's cores with other sessions (core_schedule.h), when they did, and
// how often they stepped aside for light ones.
std::string describe_core_sharing(const CoreStats &cores) {
    if (cores.shared_computes == 0) return "";
    std::string threads = std::to_string(cores.shared_min_threads);
    if (cores.shared_max_threads != cores.shared_min_threads) threads += "-" + std::to_string(cores.shared_max_threads);
    const bool one = cores.shared_max_threads == 1;
    std::string line = ", cores shared in " + std::to_string(cores.shared_computes) + " of " +
                       std::to_string(cores.computes) + " CPU computes at " + threads + (one ? " thread" : " threads");
    if (cores.stepped_aside != 0) {
        line += ", stepped aside for light sessions " + std::to_string(cores.stepped_aside) + " times (" +
                std::to_string(cores.stepped_aside_ns / 1000000) + " ms)";
    }
    return line;
}

// The session's last log line; the worker's exit code.
int log_session_end(const std::string &label, const Status &outcome, const SessionCounters &counters,
                    const CoreStats &cores, std::chrono::steady_clock::time_point started) {
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    char totals[256];
    std::snprintf(totals, sizeof(totals), "%.1f s, %llu commands, %llu graph computes, %s in, %s out", seconds,
                  static_cast<unsigned long long>(counters.commands),
                  static_cast<unsigned long long>(counters.graph_computes),
                  human_bytes(counters.bytes_received).c_str(), human_bytes(counters.bytes_sent).c_str());
    std::string summary = totals;
    if (counters.weights_repacked != 0)
        summary += ", " + std::to_string(counters.weights_repacked) + " weights repacked";
    if (counters.store_hits + counters.store_misses != 0) {
        summary += ", weight store: " + std::to_string(counters.store_hits) + " found (" +
                   human_bytes(counters.store_bytes_saved) + " not sent), " + std::to_string(counters.store_misses) +
                   " not found";
    }
    summary += describe_core_sharing(cores);
    if (outcome.ok()) {
        log_line(label + ": disconnected after " + summary);
        return 0;
    }
    log_warning(label + ": closed by the server: " + outcome.message() + " (after " + summary + ")");
    return 2;
}

}  // namespace

int run_worker(const WorkerLaunch &launch, const ServingOptions &options) {
    const int client_fd = launch.client_fd;
    const int session_id = launch.session_id;
    const std::string &peer = launch.peer;
    const auto started = std::chrono::steady_clock::now();
    const std::string label = "session " + std::to_string(session_id) + " (" + peer + ")";
    set_log_subject({session_id, peer});  // every line of this worker concerns its session
    // Who the server runs as, for the status query's trust, before the worker becomes
    // --worker-user.
    const uid_t server_uid = ::geteuid();
    const bool needs_tls = !options.tls_psk_file.empty() && is_tcp(client_fd);
    // The listener's signals (SIGHUP: re-read the keys, SIGUSR2: replace it) may reach
    // the whole service (`systemctl kill -s HUP`): they must not end a session.
    ::signal(SIGHUP, SIG_IGN);
    ::signal(SIGUSR2, SIG_IGN);
    const int refused = confine_worker(label, launch, options, needs_tls);
    if (refused != 0) return refused;
    FramedStream stream;
    RegionShare region;
    UniqueFd region_file, watchdog_end;
    if (is_region_peer(peer)) {
        region_file.reset(client_fd);
        Status opened = region_stream(client_fd, peer, &stream, &region, &watchdog_end);
        if (!opened) {
            log_error(label + ": " + opened.message());
            return 1;
        }
    } else {
        stream = FramedStream(UniqueFd(client_fd), peer);
    }
    stream.set_wait_options(options.waiting);
    // A peer server's connection of a tensor-parallel group: to its session's worker.
    const auto connected = std::chrono::steady_clock::now();
    const auto first_byte_due = first_byte_deadline(options, needs_tls, connected);
    if (is_peer_link(launch, client_fd, first_byte_due)) return hand_over_peer_link(label, launch, &stream);
    StatusBoard board;
    SessionSlot *slot = attach_status_slot(launch, &board);
    UniqueFd tls_store;
    if (needs_tls && !authenticate(label, launch, options, &tls_store, &stream, slot, first_byte_due)) return 2;
    WorkerLaunch served = launch;  // a TLS guest's store channel came with its key
    if (tls_store.valid()) served.store_fd = tls_store.release();

    load_host_backends(options.verbose);
    std::vector<ggml_backend_dev_t> devices;
    Status status = select_devices(options.devices, &devices);
    if (!status) {
        log_error(label + ": " + status.message());
        return 1;
    }
    SessionCounters counters;
    CoreStats cores;
    const Status outcome = serve_guest(label, &stream, served, server_uid, devices, options, region, board, slot,
                                       &counters, &cores, needs_tls ? std::nullopt : std::optional(connected));
    return log_session_end(label, outcome, counters, cores, started);
}

}  // namespace ggml_remote::host
