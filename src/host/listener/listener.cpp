#include "host/listener/listener.h"

#include <ggml.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>
#include <optional>
#include <set>

#include "host/common/server_log.h"
#include "host/common/status_board.h"
#include "host/listener/admission.h"
#include "host/listener/adopted_sessions.h"
#include "host/listener/key_snapshot.h"
#include "host/listener/listener_handover.h"
#include "host/listener/metrics.h"
#include "host/listener/metrics_endpoint.h"
#include "host/listener/peer_limits.h"
#include "host/listener/region_port.h"
#include "host/listener/services_process.h"
#include "host/listener/session_ledger.h"
#include "host/listener/start_budget.h"
#include "host/listener/worker_jail.h"
#include "host/worker/jail/sandbox.h"
#include "transport/socket.h"

namespace ggml_remote::host {

namespace {

struct ListeningSocket {
    Endpoint endpoint;
    UniqueFd fd;
    bool unlink_at_exit = false;  // a unix socket file we created (not systemd's)
};

// Tells a guest that was turned away why, in the form of a handshake reply.
void refuse(int fd, Code code, const std::string &reason) {
    const protocol::FrameHeader header = refusal_header(code, reason.size());
    (void)!::send(fd, &header, sizeof(header), MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)!::send(fd, reason.data(), reason.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
}

// The earlier of two poll timeouts (-1: none).
int earlier_timeout_ms(int a, int b) {
    if (a < 0) return b;
    if (b < 0) return a;
    return std::min(a, b);
}

// How long a connection may stay unauthenticated before the listener ends its worker:
// the worker gives the TLS handshake 5 s itself; this bounds a worker that does not.
constexpr int kUnauthenticatedDeadlineMs = 8000;

// The socket pair a TLS worker asks for its session place through (admission.h).
bool admission_pair(UniqueFd *worker_end, UniqueFd *listener_end) {
    int pair[2];
    if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) return false;
    worker_end->reset(pair[0]);
    listener_end->reset(pair[1]);
    return true;
}

// How often the listener looks for a VM's claim on its ivshmem regions (and beats
// their heartbeat): the most a VM's session start waits.
constexpr int kRegionPollMs = 20;

// How long the listener's start waits for the services process to open the store.
constexpr std::chrono::milliseconds kServicesStartWait{60000};

// What the services process serves, from the listener's options.
ServicesOptions services_options(const ListenerOptions &options) {
    ServicesOptions services;
    services.weight_store = options.weight_store;
    services.models = options.models;
    services.tensor_peers = options.tensor_peers;
    services.log_format = options.log_format;
    services.verbose = options.verbose;
    return services;
}

// How long workers have to end after SIGTERM when the server stops.
constexpr std::chrono::milliseconds kShutdownGrace{5000};

// SIGCHLD reports finished sessions, SIGINT/SIGTERM stop the server, SIGUSR2
// replaces the listener, SIGHUP re-reads the key file; all through one signalfd so
// that the poll loop is the only place that reacts.
UniqueFd signals_through_one_fd(sigset_t *original_mask) {
    sigset_t handled;
    sigemptyset(&handled);
    for (int signal : {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGUSR2}) sigaddset(&handled, signal);
    ::sigprocmask(SIG_BLOCK, &handled, original_mask);
    return UniqueFd(::signalfd(-1, &handled, SFD_CLOEXEC));
}

// The path of this process's program, read at start: after a package upgrade it
// names the new binary, which SIGUSR2 executes.
std::string own_program() {
    char path[4096];
    const ssize_t length = ::readlink("/proc/self/exe", path, sizeof(path) - 1);
    return length > 0 ? std::string(path, static_cast<size_t>(length)) : std::string("/proc/self/exe");
}

std::string describe_worker(pid_t pid, const WorkerRecord *record) {
    if (record == nullptr) return "worker " + std::to_string(pid);
    return "session " + std::to_string(record->session_id) + " (" + record->peer + ")";
}

// The same worker, for the log's "session" and "peer" fields.
LogSubject worker_subject(const WorkerRecord *record) {
    if (record == nullptr) return {};
    return {record->session_id, record->peer};
}

// The listener's state and its steps: sockets, signals, the counts that admit new
// workers, and the jail that runs them. run() is the poll loop.
class Listener {
  public:
    Listener(const ListenerOptions &options, const std::vector<std::string> &worker_command,
             const std::vector<std::string> &listener_command)
        : options_(options),
          tls_(!options.tls_psk_file.empty()),
          listener_command_(listener_command),
          program_(own_program()),
          signals_(signals_through_one_fd(&original_mask_)),
          inherited_(take_inheritance()),
          ledger_(open_ledger(options, &inherited_.ledger)),
          board_(open_status_board(options, &inherited_.status_board, &board_taken_over_)),
          admission_(options.max_sessions, options.max_unauthenticated,
                     std::chrono::milliseconds(kUnauthenticatedDeadlineMs), &board_),
          jail_(worker_command, original_mask_, worker_command.front()),
          services_(options.services_program, services_arguments(services_options(options)), original_mask_),
          peers_(sessions_per_peer(options), ::geteuid()),
          starts_(options.starts, RateBucket::Clock::now()) {}

    int run() {
        // Nothing this process holds reaches a worker unless the jail hands it over.
        mark_descriptors_cloexec(3);
        // Workers run as the same user: without this, code in one could open the
        // listener's /proc/PID/mem.
        Status undumpable = make_undumpable();
        if (!undumpable) log_warning("the listener stays dumpable: " + undumpable.message());
        if (!open_sockets() || !open_metrics() || !load_keys("")) return 1;
        start_services();
        adopt_sessions();
        reap_workers();  // any that ended while the previous listener handed over
        while (serve_once()) {
        }
        if (options_.keep_sessions || handover_failed_) {
            leave_sessions();
        } else {
            shut_down();
        }
        return handover_failed_ ? 1 : 0;
    }

  private:
    std::string describe(const Endpoint &endpoint) const {
        if (endpoint.kind != Endpoint::Kind::tcp || !tls_) return endpoint.to_string();  // TLS: TCP only
        Endpoint guests = endpoint;
        guests.kind = Endpoint::Kind::tls;
        return endpoint.to_string() + " with TLS (guests use " + guests.to_string() + ")";
    }

    bool open_sockets() {
        const char *giver = inherited_.from_listener ? " (from the previous listener)" : " (from systemd)";
        for (InheritedListener &inherited : inherited_.sockets) {
            log_line("listening on " + describe(inherited.socket.endpoint) + giver);
            // Socket activation: systemd owns its socket files, so they are not unlinked at exit.
            sockets_.push_back({inherited.socket.endpoint, std::move(inherited.socket.fd), inherited.unlink_at_exit});
        }
        inherited_.sockets.clear();
        // A listener's sockets came with it; its --listen are among them.
        const std::vector<std::string> none;
        for (const std::string &text : inherited_.from_listener ? none : options_.listen) {
            ListeningSocket socket;
            Status status = parse_endpoint(text, &socket.endpoint);
            if (status && socket.endpoint.is_ivshmem()) {
                if (!open_region(socket.endpoint)) return false;
                continue;
            }
            if (socket.endpoint.uses_tls()) socket.endpoint.kind = Endpoint::Kind::tcp;  // TLS is the workers' part
            if (status) status = listen_endpoint(&socket.endpoint, &socket.fd);
            if (!status) {
                log_error(status.message());
                return false;
            }
            log_line("listening on " + describe(socket.endpoint));
            socket.unlink_at_exit = socket.endpoint.uses_unix_socket();
            sockets_.push_back(std::move(socket));
        }
        return true;
    }

    // The weight store's owner, the model library and the peer broker, in their
    // process (host/services/services.h). Its start waits for the store's scan, as
    // the first guests would find less in the store otherwise.
    void start_services() { services_.start(kServicesStartWait); }

    // A worker's channel to the store's owner (invalid: no store), for `tenant`. A
    // TLS worker's comes with its key, for the identity its guest proved.
    UniqueFd store_channel(const std::string &tenant) { return services_.store_channel(tenant); }

    // A worker's channel to the peer broker, for a TCP or TLS connection only: a
    // guest there may join a group across machines, and the connection may be a
    // peer server's. Others (unix sockets, vsock, regions) get none: a worker holds
    // no descriptor it cannot use.
    UniqueFd peer_broker_channel(const std::string &peer, bool tls) {
        if (!tls && peer.rfind("tcp://", 0) != 0) return UniqueFd();
        return services_.peer_channel();
    }

    bool open_region(const Endpoint &endpoint) {
        RegionPort port;
        Status status = RegionPort::open(endpoint, &port);
        if (!status) {
            log_error(status.message());
            return false;
        }
        log_line("serving one VM at a time on " + endpoint.path + " (" + std::to_string(endpoint.size >> 20) +
                 " MiB; its guests use ivshmem:)");
        regions_.push_back(std::move(port));
        return true;
    }

    // Whether a guest claimed `port`'s region. A region whose file changed size
    // (truncated by its VM, its worker or another process of this user) ends its
    // session; the listener never maps the file, so nothing faults here.
    bool claimed_region(RegionPort &port) {
        switch (port.poll()) {
            case RegionPort::Event::claimed:
                return true;
            case RegionPort::Event::resized:
                log_warning(port.name() + ": the region's file changed size (" + std::to_string(port.file_size()) +
                            " bytes): its session ends");
                jail_.kill(port.worker());
                return false;
            case RegionPort::Event::repaired:
                log_warning(port.name() +
                            ": the region's file changed size while idle: sized again, wiped, "
                            "ready for the next session");
                return false;
            default:
                return false;
        }
    }

    // A VM claimed a region: its worker, like a connection's, with the region's
    // file in place of a socket. A full server turns the claim away.
    void serve_regions() {
        for (RegionPort &port : regions_) {
            if (!claimed_region(port)) continue;
            const std::string peer = port.name();
            if (admission_.sessions_full()) {
                log_refused(peer, "region " + peer,
                            std::to_string(admission_.sessions()) + " sessions already (--max-sessions)");
                count_refusal(GuestRefusal::server_full);
                port.ended(-1);
                continue;
            }
            const int id = next_session_++;
            ledger_.set_next_session_id(next_session_);
            const int slot = admission_.free_slot();
            PeerAccount account;  // a region is its own tenant, named by its file
            account.key = "region " + peer;
            reset_status_slot(slot, id, peer);
            pid_t pid = -1;
            const UniqueFd store = store_channel(peer);  // the region's tenant, as its worker's peer
            const Status spawned = jail_.spawn({port.fd(), id, peer, board_.fd(), slot, -1, store.get()}, &pid);
            if (!spawned) {
                log_refused(peer, "region " + peer, spawned.message());
                count_refusal(GuestRefusal::server_error);
                port.ended(-1);
                continue;
            }
            if (SessionSlot *listed = slot >= 0 ? board_.slot(slot) : nullptr) listed->pid = pid;
            admission_.add_authenticated(pid, slot);
            hold_place(pid, {pid, id, slot, peer, account});
            port.serving(pid);
            log_line("session " + std::to_string(id) + " (" + peer + "): connected, worker pid " + std::to_string(pid),
                     LogLevel::info, {id, peer});
        }
    }

    bool open_metrics() {
        if (options_.metrics.empty()) return true;
        Endpoint endpoint;
        Status status = parse_endpoint(options_.metrics, &endpoint);
        if (status) status = metrics_.open(&endpoint);
        if (!status) {
            log_error("--metrics: " + status.message());
            return false;
        }
        log_line("metrics on " + endpoint.to_string() + " (GET /metrics, no authentication)");
        return true;
    }

    // Room for every session, the unauthenticated connections, and as many again
    // that were evicted or timed out and are not reaped yet. The board of the
    // listener this one replaces, when there was one: its live workers write there.
    static StatusBoard open_status_board(const ListenerOptions &options, UniqueFd *previous, bool *taken_over) {
        StatusBoard board;
        if (previous->valid()) {
            const Status attached = StatusBoard::attach(previous->release(), &board);
            if (attached) {
                log_line("took over the previous listener's status board");
                *taken_over = true;
                return board;
            }
            log_line(
                "cannot take over the previous listener's status board (a new one: the figures of the "
                "sessions before are lost, not their count): " +
                attached.message());
            board = StatusBoard();
        }
        const auto slots = static_cast<uint32_t>(options.max_sessions + 2 * options.max_unauthenticated);
        Status status = StatusBoard::create(slots, &board);
        // Under systemd the board outlives this process (a restart keeps sessions).
        if (status && has_service_manager()) {
            const Status stored = store_with_service_manager(board.fd(), kHandedBoardName);
            log_line(stored ? std::string("the status board is kept in systemd's file descriptor store")
                            : "the status board could not be kept by systemd (a restart will not count the live "
                              "sessions): " +
                                  stored.message());
        }
        if (!status) log_warning("no status board (status queries will list no sessions): " + status.message());
        return board;
    }

    // The session ledger of the listener this one replaces, or a new one (kept by
    // systemd, where there is one, like the board).
    static SessionLedger open_ledger(const ListenerOptions &options, UniqueFd *previous) {
        const auto capacity = static_cast<uint32_t>(options.max_sessions);
        SessionLedger ledger, previous_ledger;
        Status status = error(Code::error, "none");
        if (previous->valid()) {
            status = SessionLedger::attach(previous->release(), &previous_ledger);
            if (status && previous_ledger.capacity() >= capacity) return previous_ledger;
            if (!status) log_warning("cannot take over the previous listener's session ledger: " + status.message());
        }
        // A larger --max-sessions than the last listener's: its records, in a larger ledger.
        status = status ? previous_ledger.grown(capacity, &ledger) : SessionLedger::create(capacity, &ledger);
        if (status && has_service_manager()) {
            (void)remove_from_service_manager(kHandedLedgerName);
            status = store_with_service_manager(ledger.fd(), kHandedLedgerName);
        }
        if (!status)
            log_warning("the session ledger is not kept (a restart will not count the live sessions): " +
                        status.message());
        return ledger;
    }

    // A worker now holds a session place: the ledger records it, and its pidfd (the
    // worker is an unreaped child: its pid is its own) goes to the next listener,
    // handed over or kept by systemd, so that it is counted there too.
    void hold_place(pid_t pid, const LedgerEntry &entry) {
        ledger_.record(entry);
        admitted_at_[pid] = std::chrono::steady_clock::now();
        UniqueFd pidfd = open_pidfd(pid);
        if (pidfd.valid() && has_service_manager()) {
            const Status stored = store_with_service_manager(pidfd.get(), kHandedWorkerPrefix + std::to_string(pid));
            if (!stored)
                log_warning("session of worker " + std::to_string(pid) + ": not kept by systemd (" + stored.message() +
                            "); a restart will not count it");
        }
        pidfds_[pid] = std::move(pidfd);
    }

    // A worker that held a place (its own or adopted) ended.
    void drop_place(pid_t pid) {
        ledger_.forget(pid);
        pidfds_.erase(pid);
        if (has_service_manager()) (void)remove_from_service_manager(kHandedWorkerPrefix + std::to_string(pid));
    }

    // One wait for signals, connections and admission requests; false to stop.
    bool serve_once() {
        std::vector<pollfd> polled;
        polled.push_back({signals_.get(), POLLIN, 0});
        for (const ListeningSocket &socket : sockets_) polled.push_back({socket.fd.get(), POLLIN, 0});
        admission_.add_poll_fds(&polled);
        const size_t metrics_first = polled.size();
        metrics_.add_poll_fds(&polled);
        adopted_.add_poll_fds(&polled);
        services_.add_poll_fds(&polled);
        const auto now = std::chrono::steady_clock::now();
        const int timeout_ms = earlier_timeout_ms(
            earlier_timeout_ms(earlier_timeout_ms(admission_.poll_timeout_ms(now), metrics_.poll_timeout_ms(now)),
                               services_.poll_timeout_ms(now)),
            regions_.empty() ? -1 : kRegionPollMs);
        if (::poll(polled.data(), polled.size(), timeout_ms) < 0) {
            if (errno == EINTR) return true;
            log_error(std::string("poll: ") + std::strerror(errno));
            return false;
        }
        if ((polled[0].revents & POLLIN) && !handle_signal()) return false;
        answer_admission_requests(polled);
        release_adopted(polled);
        services_.serve(polled);
        end_overdue_unauthenticated();
        serve_regions();
        for (size_t i = 0; i < sockets_.size(); ++i) {
            if (polled[i + 1].revents & POLLIN) accept_guests(sockets_[i]);
        }
        metrics_.serve(polled, metrics_first, std::chrono::steady_clock::now(), [this] {
            count_guest_sessions();
            return render_metrics(snapshot());
        });
        return true;
    }

    // False when the signal asks the server to stop.
    bool handle_signal() {
        signalfd_siginfo info{};
        if (::read(signals_.get(), &info, sizeof(info)) != sizeof(info)) return true;
        switch (info.ssi_signo) {
            case SIGCHLD:
                reap_workers();
                return true;
            case SIGUSR2:
                return replace_listener();
            case SIGHUP:
                if (!tls_) log_warning("SIGHUP: no --tls-psk file to re-read");
                if (tls_) (void)load_keys("SIGHUP: ");
                return true;
            default:
                return false;
        }
    }

    // The --tls-psk file, checked, for the workers of new TLS sessions; on failure
    // the keys read before stay (at start-up there are none: the server stops).
    bool load_keys(const std::string &why) {
        if (!tls_) return true;
        size_t count = 0;
        const Status loaded = keys_.load(options_.tls_psk_file, &count);
        if (!loaded) {
            log_error(why + loaded.message() + (keys_.fd() >= 0 ? "; the keys read before stay" : ""));
            return keys_.fd() >= 0;
        }
        if (!why.empty())
            log_line(why + "re-read " + options_.tls_psk_file + ": " + std::to_string(count) +
                     " key(s) for new sessions");
        return true;
    }

    // The pidfds handed over whose processes are not long gone (those systemd may
    // still keep are dropped from its store).
    std::vector<UniqueFd> handed_pidfds() {
        std::vector<UniqueFd> pidfds;
        for (HandedWorker &worker : inherited_.workers) {
            if (pid_of_pidfd(worker.pidfd.get()) > 0) {
                pidfds.push_back(std::move(worker.pidfd));
            } else if (has_service_manager()) {
                (void)remove_from_service_manager(worker.name);
            }
        }
        inherited_.workers.clear();
        return pidfds;
    }

    // The live sessions of the listener this one replaced: counted, listed, watched.
    // Only the workers whose pidfds were handed over (adopted_sessions.h); every
    // board slot but theirs is unlisted, whatever a worker wrote there.
    void adopt_sessions() {
        next_session_ = ledger_.next_session_id();
        std::vector<pid_t> gone;
        adopted_.adopt(handed_pidfds(), ledger_, board_taken_over_ ? board_.slots() : 0, &gone);
        for (pid_t pid : gone) drop_place(pid);
        for (pid_t pid : ledger_.pids()) {
            if (adopted_.sessions().count(pid) == 0) ledger_.forget(pid);
        }
        std::vector<bool> adopted_slot(board_.slots(), false);
        std::string ids;
        for (const auto &[pid, session] : adopted_.sessions()) {
            admission_.add_authenticated(pid, session.slot);
            peers_.opened(pid, session.account);
            if (session.slot >= 0) adopted_slot[static_cast<size_t>(session.slot)] = true;
            ids += (ids.empty() ? "" : ", ") + std::to_string(session.session_id);
        }
        for (uint32_t i = 0; board_taken_over_ && i < board_.slots(); ++i) {
            if (!adopted_slot[i]) board_.slot(i)->live.store(0);
        }
        if (adopted_.sessions().empty()) return;
        next_session_ = std::max(next_session_, adopted_.highest_id() + 1);
        log_line("took over " + std::to_string(adopted_.sessions().size()) +
                 " live session(s) from the previous listener: " + ids);
    }

    void release_adopted(const std::vector<pollfd> &polled) {
        for (auto &[pid, session] : adopted_.take_ended(polled)) {
            keep_figures_of_ended({session.session_id, session.peer, session.slot});
            admission_.release(pid);
            peers_.closed(pid);
            drop_place(pid);
        }
    }

    // SIGUSR2: this process becomes the program at its own path (the new binary
    // after an upgrade), handing over its sockets and the status board; the workers
    // serve on. False (the listener stops) only when the exec failed half-way.
    bool replace_listener() {
        if (::access(program_.c_str(), X_OK) != 0) {
            log_error("SIGUSR2: cannot replace the listener with " + program_ + ": " + std::strerror(errno) +
                      "; this one serves on");
            return true;
        }
        log_line("SIGUSR2: replacing the listener with " + program_ + "; " + std::to_string(admission_.sessions()) +
                 " live session(s) go on in their workers");
        end_unauthenticated();
        ledger_.set_next_session_id(next_session_);
        std::vector<HandedFd> handed;
        for (const ListeningSocket &socket : sockets_) {
            handed.push_back({socket.fd.get(), socket.unlink_at_exit ? kHandedUnlinkName : kHandedListenName});
        }
        if (board_.fd() >= 0) handed.push_back({board_.fd(), kHandedBoardName});
        if (ledger_.fd() >= 0) handed.push_back({ledger_.fd(), kHandedLedgerName});
        // The workers that hold a place, by their pidfds: all the next listener counts.
        for (const auto &[pid, pidfd] : pidfds_) {
            if (pidfd.valid()) handed.push_back({pidfd.get(), kHandedWorkerPrefix + std::to_string(pid)});
        }
        for (const auto &[pid, session] : adopted_.sessions()) {
            handed.push_back({session.pidfd.get(), kHandedWorkerPrefix + std::to_string(pid)});
        }
        const Status failed = exec_with_fds(program_, listener_command_, handed, original_mask_);
        log_error("cannot replace the listener: " + failed.message() + "; it stops, its sessions go on");
        handover_failed_ = true;
        return false;
    }

    // Connections still in their handshake hold no session a new listener could
    // count (their admission pair stays here): they end, and their guests retry.
    void end_unauthenticated() {
        for (const auto &entry : jail_.workers()) {
            if (!admission_.holds_session(entry.first)) jail_.kill(entry.first);
        }
    }

    std::string session_label(pid_t pid) const { return describe_worker(pid, jail_.find(pid)); }
    LogSubject session_subject(pid_t pid) const { return worker_subject(jail_.find(pid)); }

    // Pre-authentication accounting, kept apart from accepting: the unauthenticated cap
    // evicts the oldest connection still in its handshake, so that key-less clients held
    // open never keep out a guest that holds the key.
    void make_room_for_unauthenticated() {
        if (const std::optional<pid_t> oldest = admission_.evict_oldest_unauthenticated_if_full()) {
            log_warning(session_label(*oldest) + ": ended unauthenticated to make room (" +
                            std::to_string(admission_.unauthenticated()) +
                            " others in their handshake, --max-unauthenticated)",
                        session_subject(*oldest));
            jail_.kill(*oldest);
            count_refusal(GuestRefusal::unauthenticated_full);
        }
    }

    void end_overdue_unauthenticated() {
        for (pid_t pid : admission_.take_overdue(Admission::Clock::now())) {
            log_warning(session_label(pid) + ": ended, not authenticated within " +
                            std::to_string(kUnauthenticatedDeadlineMs) + " ms",
                        session_subject(pid));
            jail_.kill(pid);
            count_refusal(GuestRefusal::unauthenticated_timeout);
        }
    }

    // A TLS guest's peer is counted once it authenticated: until then its connection
    // holds no session, neither the server's nor its peer's.
    void answer_admission_requests(const std::vector<pollfd> &polled) {
        auto peer_may_open = [this](pid_t pid) {
            const auto it = unauthenticated_peers_.find(pid);
            return it != unauthenticated_peers_.end() && peers_.refusal(it->second).empty();
        };
        const auto answer_key = [this](pid_t pid, const KeyRequest &request) {
            return answer_key_request(pid, request);
        };
        for (const Admission::Answer &answer : admission_.answer_requests(polled, peer_may_open, answer_key)) {
            const auto it = unauthenticated_peers_.find(answer.pid);
            if (answer.admitted) admitted_after_handshake(answer.pid);
            if (answer.admitted && it != unauthenticated_peers_.end()) {
                peers_.opened(answer.pid, it->second);  // the worker logs its session
            } else if (answer.peer_full && it != unauthenticated_peers_.end()) {
                log_warning("refused " + session_label(answer.pid) +
                            " after its handshake: " + peers_.refusal(it->second));
            } else if (!answer.admitted) {
                log_warning("refused " + session_label(answer.pid) + " after its handshake: " +
                            std::to_string(admission_.sessions()) + " sessions already (--max-sessions)");
            }
            if (!answer.admitted) {
                count_refusal(answer.peer_full ? GuestRefusal::peer_limit : GuestRefusal::server_full);
            }
            if (it != unauthenticated_peers_.end()) unauthenticated_peers_.erase(it);
        }
    }

    // A TLS worker asks for the key its guest names, with the guest's proof that it
    // holds it: that key alone, and the worker's store channel for that identity's
    // tenant, fixed here. A worker a guest took over learns no other key, and names
    // no identity whose key its guest lacks.
    Admission::KeyAnswer answer_key_request(pid_t, const KeyRequest &request) {
        Admission::KeyAnswer answer;
        std::vector<uint8_t> key;
        Status status = keys_.key_for(request.proof, &key);
        if (status && key.size() > sizeof(answer.reply.key)) status = error(Code::error, "a key too long to hand on");
        answer.reply.code = static_cast<int32_t>(status.code());
        std::snprintf(answer.reply.message, sizeof(answer.reply.message), "%s", status.message().c_str());
        if (!status) {
            ::explicit_bzero(key.data(), key.size());
            return answer;
        }
        answer.reply.key_size = static_cast<uint32_t>(key.size());
        std::memcpy(answer.reply.key, key.data(), key.size());
        ::explicit_bzero(key.data(), key.size());
        answer.store = store_channel("tls " + request.proof.identity_text());
        return answer;
    }

    // A TLS worker's place, recorded as an authenticated one's is.
    void admitted_after_handshake(pid_t pid) {
        const WorkerRecord *record = jail_.find(pid);
        const auto peer = unauthenticated_peers_.find(pid);
        if (record == nullptr) return;
        hold_place(pid, {pid, record->session_id, record->slot, record->peer,
                         peer != unauthenticated_peers_.end() ? peer->second : PeerAccount{}});
    }

    void reap_workers() {
        std::vector<EndedChild> others;
        const std::vector<EndedWorker> workers = jail_.reap(&others);
        for (const EndedChild &child : others) (void)services_.ended(child.pid, child.wait_status);
        for (const EndedWorker &ended : workers) {
            log_unexpected_end(ended);
            keep_figures_of_ended(ended.record);
            count_guest_session(ended.pid, ended.record.slot);
            time_session(ended.pid);
            guests_counted_.erase(ended.pid);
            if (admission_.holds_session(ended.pid)) drop_place(ended.pid);
            admission_.release(ended.pid);
            peers_.closed(ended.pid);
            unauthenticated_peers_.erase(ended.pid);
            for (RegionPort &port : regions_) {
                if (port.ended(ended.pid)) log_line(port.name() + ": wiped, ready for the next session");
            }
        }
    }

    // A crash or an error exit is logged; a normal end the worker logged itself.
    void log_unexpected_end(const EndedWorker &ended) const {
        const std::string label = describe_worker(ended.pid, &ended.record);
        const int wait_status = ended.wait_status;
        if (WIFSIGNALED(wait_status) && !admission_.ended_by_listener(ended.pid)) {
            log_error(label + ": worker died from signal " + std::to_string(WTERMSIG(wait_status)) + " (" +
                          strsignal(WTERMSIG(wait_status)) + "); only this guest was affected",
                      worker_subject(&ended.record));
        } else if (WIFEXITED(wait_status) && WEXITSTATUS(wait_status) > 2) {
            log_warning(label + ": worker exited with code " + std::to_string(WEXITSTATUS(wait_status)),
                        worker_subject(&ended.record));
        }
    }

    // Accepts what is queued on `socket`, a bounded number at a time so that the
    // other sockets and the signals get their turn: refusing costs an accept, so a
    // flooding peer cannot keep the queue full in front of another peer's guest.
    void accept_guests(const ListeningSocket &socket) {
        constexpr int kAcceptsPerWake = 64;
        for (int accepted = 0; accepted < kAcceptsPerWake; ++accepted) {
            accept_guest(socket);
            if (poll_one(socket.fd.get(), POLLIN, 0) <= 0) return;
        }
    }

    // Accepts one connection and starts its worker unless the guest is turned away.
    // Every refusal comes before the fork and exec that a worker costs.
    void accept_guest(const ListeningSocket &socket) {
        UniqueFd client;
        std::string peer;
        Status status = accept_connection(socket.fd.get(), socket.endpoint, &client, &peer);
        if (!status) {
            log_error(status.message());
            return;
        }
        if (tls_ && peer.rfind("tcp://", 0) == 0) peer.replace(0, 3, "tls");
        // A TLS guest authenticates in its worker; everyone else at accept.
        const bool authenticated = !(tls_ && peer.rfind("tls://", 0) == 0);
        PeerAccount account;
        const Status known = peer_account(client.get(), &account);
        if (!known) {
            turn_away(client.get(), peer, "", Code::error, "cannot tell who the peer is: " + known.message(),
                      GuestRefusal::server_error);
            return;
        }
        if (const std::optional<Refusal> refused = admission_refusal(account, authenticated)) {
            turn_away(client.get(), peer, account.key, Code::limit_exceeded, refused->why, refused->reason);
            return;
        }
        start_worker(client.get(), peer, authenticated, account);
    }

    struct Refusal {
        GuestRefusal reason;
        std::string why;
    };
    // Why a connection of `account` may not have a worker now, cheapest check first;
    // nothing when it may (which spends from its start budget).
    std::optional<Refusal> admission_refusal(const PeerAccount &account, bool authenticated) {
        if (authenticated && admission_.sessions_full()) {
            return Refusal{GuestRefusal::server_full, "the server is serving its maximum of " +
                                                          std::to_string(options_.max_sessions) +
                                                          " sessions (--max-sessions)"};
        }
        // A TLS guest's peer is counted once it authenticated (answer_admission_requests).
        if (authenticated) {
            if (std::string refusal = peers_.refusal(account); !refusal.empty()) {
                return Refusal{GuestRefusal::peer_limit, refusal};
            }
        }
        if (peers_.unlimited(account)) return std::nullopt;
        switch (starts_.spend(account.key, RateBucket::Clock::now())) {
            case StartBudget::Verdict::start:
                return std::nullopt;
            case StartBudget::Verdict::peer_over:
                return Refusal{GuestRefusal::start_budget,
                               account.key + " started as many sessions as it may for now (--max-starts-per-peer " +
                                   std::to_string(options_.starts.per_peer_per_second) + "): try again in a moment"};
            case StartBudget::Verdict::server_over:
                break;
        }
        return Refusal{GuestRefusal::start_budget,
                       "the server started as many sessions as it may for now (--max-starts " +
                           std::to_string(options_.starts.per_second) + "): try again in a moment"};
    }

    // A guest turned away: told why in the form of a handshake reply, counted, and
    // logged (a line a second per peer at most: a flood of refusals is no flood of lines).
    void turn_away(int client, const std::string &peer, const std::string &account_key, Code code,
                   const std::string &why, GuestRefusal reason) {
        refuse(client, code, why);
        count_refusal(reason);
        log_refused(peer, account_key, why);
    }

    void log_refused(const std::string &peer, const std::string &account_key, const std::string &why) {
        uint64_t unlogged = 0;
        if (!refusal_log_.should_log(account_key, RateBucket::Clock::now(), &unlogged)) return;
        const std::string more =
            unlogged == 0 ? "" : " (and " + std::to_string(unlogged) + " more of this peer's since the last line)";
        log_warning("refused " + peer + ": " + why + more, {std::nullopt, peer});
    }

    // An admitted connection's worker: its status slot, the admission pair of a
    // guest yet to authenticate, and the counts.
    void start_worker(int client, const std::string &peer, bool authenticated, const PeerAccount &account) {
        if (!authenticated) make_room_for_unauthenticated();
        UniqueFd admission_worker_end, admission_listener_end;
        if (!authenticated && !admission_pair(&admission_worker_end, &admission_listener_end)) {
            log_refused(peer, account.key, std::string("socketpair: ") + std::strerror(errno));
            count_refusal(GuestRefusal::server_error);
            return;
        }
        const int id = next_session_++;
        ledger_.set_next_session_id(next_session_);
        const int slot = admission_.free_slot();
        reset_status_slot(slot, id, peer);
        pid_t pid = -1;
        const bool tls = peer.rfind("tls://", 0) == 0;
        // The store's tenant: the account the kernel names; a TLS guest's channel
        // comes with its key (answer_key_request).
        const UniqueFd store = tls ? UniqueFd() : store_channel(account.key);
        const UniqueFd peer_channel = peer_broker_channel(peer, tls);
        const Status spawned = jail_.spawn(
            {client, id, peer, board_.fd(), slot, admission_worker_end.get(), store.get(), peer_channel.get()}, &pid);
        if (!spawned) {
            log_refused(peer, account.key, spawned.message());
            refuse(client, Code::error, "the server could not start a session worker");
            count_refusal(GuestRefusal::server_error);
            return;
        }
        if (SessionSlot *listed = slot >= 0 ? board_.slot(slot) : nullptr) listed->pid = pid;
        if (authenticated) {
            admission_.add_authenticated(pid, slot);
            hold_place(pid, {pid, id, slot, peer, account});
            peers_.opened(pid, account);
        } else {
            admission_.add_unauthenticated(pid, slot, std::move(admission_listener_end));
            unauthenticated_peers_[pid] = account;
        }
        log_line("session " + std::to_string(id) + " (" + peer + "): connected, worker pid " + std::to_string(pid),
                 LogLevel::info, {id, peer});
    }

    void reset_status_slot(int index, int id, const std::string &peer) {
        SessionSlot *slot = index >= 0 ? board_.slot(index) : nullptr;
        if (slot == nullptr) return;
        slot->id = id;
        slot->pid = 0;
        slot->started_unix = static_cast<int64_t>(::time(nullptr));
        std::snprintf(slot->peer, sizeof(slot->peer), "%s", peer.c_str());
        clear_figures(slot);
        clear_core_fields(slot);
    }

    void count_refusal(GuestRefusal reason) { ++refused_[static_cast<size_t>(reason)]; }

    // A worker ended: its counters join those of the sessions that ended before, and
    // a guest it turned away in the handshake is counted.
    void keep_figures_of_ended(const WorkerRecord &session) {
        const SessionSlot *slot = session.slot >= 0 ? board_.slot(session.slot) : nullptr;
        if (slot == nullptr) return;
        add_counters(read_figures(*slot), &ended_);
        if (const std::optional<GuestRefusal> reason = turned_away(*slot)) count_refusal(*reason);
    }

    // A guest session of this listener's ended: its length, timed by the listener
    // itself (sessions adopted from a replaced listener are not timed).
    void time_session(pid_t pid) {
        const auto it = admitted_at_.find(pid);
        if (it == admitted_at_.end()) return;
        if (guests_counted_.count(pid) != 0) session_lengths_.observe(kSessionBoundsNs, nanoseconds_since(it->second));
        admitted_at_.erase(it);
    }

    // sessions_started_total counts guests' sessions, each once: a worker that holds
    // a place and marked its slot (mark_guest_session). A status query, a guest
    // refused, or one that only shook hands never marks it.
    void count_guest_session(pid_t pid, int slot_index) {
        const SessionSlot *slot = slot_index >= 0 ? board_.slot(slot_index) : nullptr;
        if (slot == nullptr || !admission_.holds_session(pid) || !is_guest_session(*slot)) return;
        if (guests_counted_.insert(pid).second) ++sessions_started_;
    }

    void count_guest_sessions() {
        for (const auto &[pid, session] : jail_.workers()) count_guest_session(pid, session.slot);
    }

    // The figures of /metrics. Which sessions are live, their ids and peers come from
    // the listener's own records, the figures from the board.
    MetricsSnapshot snapshot() const {
        MetricsSnapshot snapshot;
        snapshot.per_session = options_.metrics_per_session;
        snapshot.limits = limit_figures(options_.limits);
        snapshot.version = GGML_REMOTE_VERSION;
        snapshot.ggml_version = ggml_version();
        snapshot.devices = options_.devices;
        snapshot.sessions_live = static_cast<uint64_t>(admission_.sessions());
        snapshot.max_sessions = static_cast<uint64_t>(options_.max_sessions);
        snapshot.sessions_started = sessions_started_;
        snapshot.unauthenticated = static_cast<uint64_t>(admission_.unauthenticated());
        snapshot.guests_refused = refused_;
        snapshot.ended = ended_;
        snapshot.session_lengths = session_lengths_;
        const auto list = [&](pid_t pid, int id, const std::string &peer, int slot_index) {
            const SessionSlot *slot = slot_index >= 0 ? board_.slot(slot_index) : nullptr;
            if (slot == nullptr || !admission_.holds_session(pid)) return;
            SessionFigures figures = read_figures(*slot);
            figures.id = id;
            figures.peer = peer;
            figures.tenant = peers_.account_of(pid);
            snapshot.sessions.push_back(std::move(figures));
        };
        for (const auto &[pid, session] : jail_.workers()) list(pid, session.session_id, session.peer, session.slot);
        for (const auto &[pid, session] : adopted_.sessions())
            list(pid, session.session_id, session.peer, session.slot);
        std::sort(snapshot.sessions.begin(), snapshot.sessions.end(),
                  [](const SessionFigures &a, const SessionFigures &b) { return a.id < b.id; });
        return snapshot;
    }

    // A worker that does not end within a few seconds (stopped, stuck in a
    // backend) is killed: the server's shutdown never waits forever.
    void shut_down() {
        log_line("shutting down; ending " + std::to_string(jail_.workers().size() + adopted_.sessions().size()) +
                 " session(s)");
        close_endpoints();
        adopted_.signal_all(SIGTERM);  // first, so that both kinds of workers end together
        jail_.shut_down(kShutdownGrace);
        adopted_.end_all(kShutdownGrace);
    }

    // --keep-sessions: only the listener stops; each session ends when its guest
    // leaves. The sessions stay in the service's cgroup (docs/OPERATIONS.md).
    void leave_sessions() {
        end_unauthenticated();
        log_line("the listener stops; " + std::to_string(admission_.sessions()) +
                 " live session(s) go on in their workers until their guests leave");
        close_endpoints();
    }

    void close_endpoints() {
        services_.stop();
        for (const ListeningSocket &socket : sockets_) {
            if (socket.unlink_at_exit) ::unlink(socket.endpoint.path.c_str());
        }
        for (RegionPort &port : regions_) port.close();  // a VM looking sees the region closed
    }

    const ListenerOptions &options_;
    const bool tls_;  // with --tls-psk every TCP listener speaks TLS; its workers do the handshake
    const std::vector<std::string> listener_command_;  // this listener's argv, for SIGUSR2
    const std::string program_;
    std::vector<ListeningSocket> sockets_;
    std::vector<RegionPort> regions_;  // ivshmem: one VM's session at a time each
    sigset_t original_mask_{};         // before the listener blocked its signals; workers start with it
    UniqueFd signals_;
    Inheritance inherited_;  // what systemd or the previous listener handed over
    SessionLedger ledger_;   // the sessions that hold a place, for the next listener
    bool board_taken_over_ = false;
    StatusBoard board_;
    AdoptedSessions adopted_;
    KeySnapshot keys_;
    bool handover_failed_ = false;
    Admission admission_;
    WorkerJail jail_;
    ServicesProcess services_;
    PeerLimits peers_;
    StartBudget starts_;                                  // worker programs started, per peer and in all
    RefusalLog refusal_log_;                              // what of the refusals is logged
    std::map<pid_t, PeerAccount> unauthenticated_peers_;  // TLS workers before their handshake
    std::map<pid_t, UniqueFd> pidfds_;                    // this listener's workers that hold a place
    int next_session_ = 1;
    MetricsEndpoint metrics_;
    uint64_t sessions_started_ = 0;
    std::array<uint64_t, kGuestRefusalReasons> refused_{};                // by GuestRefusal
    SessionFigures ended_;                                                // the counters of the sessions that ended
    std::map<pid_t, std::chrono::steady_clock::time_point> admitted_at_;  // this listener's sessions
    HistogramCounts session_lengths_;                                     // of those that ended
    std::set<pid_t> guests_counted_;                                      // live workers counted in sessions_started_
};

}  // namespace

int run_listener(const ListenerOptions &options, const std::vector<std::string> &worker_command,
                 const std::vector<std::string> &listener_command) {
    return Listener(options, worker_command, listener_command).run();
}

}  // namespace ggml_remote::host
