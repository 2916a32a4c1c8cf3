// Admission: which workers hold one of the --max-sessions places, and which serve a
// connection that has not authenticated yet (a TLS guest before its handshake).
//
// Unauthenticated connections have a small cap of their own (--max-unauthenticated)
// and a deadline, and never hold a session place: a key-less client cannot keep a
// guest that holds the key out. Only the listener counts. A TLS worker asks for its
// place over a socket pair once its handshake succeeded and waits for the answer, so
// nothing a worker writes (the status board is writable by every worker) can change
// the counts. See docs/SECURITY.md ("Pre-authentication").
#pragma once

#include <poll.h>
#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <vector>

#include "host/common/status_board.h"
#include "host/common/worker_contract.h"
#include "transport/unique_fd.h"

namespace ggml_remote::host {

class Admission {
  public:
    using Clock = std::chrono::steady_clock;

    // `board` (may have no slots) lists the authenticated sessions for status queries.
    Admission(int max_sessions, int max_unauthenticated, Clock::duration unauthenticated_deadline, StatusBoard *board);

    int sessions() const { return sessions_; }
    int unauthenticated() const { return unauthenticated_; }
    bool sessions_full() const { return sessions_ >= max_sessions_; }

    // A free status board slot for a new worker, or -1 (the worker then goes unlisted).
    int free_slot() const;

    // A guest authenticated at accept (unix, plain TCP) takes a session place; call
    // only when !sessions_full().
    void add_authenticated(pid_t pid, int slot);
    // A TLS worker before its handshake; `control` is the listener's end of the pair
    // the worker asks for its place through.
    void add_unauthenticated(pid_t pid, int slot, UniqueFd control);

    // When the unauthenticated cap is reached: the oldest such worker, which the
    // caller kills to make room (the newest connection may be the guest with the
    // key; the oldest has had the longest to finish its handshake). It no longer counts.
    std::optional<pid_t> evict_oldest_unauthenticated_if_full();
    // Unauthenticated workers past their deadline (the caller kills them); they no longer count.
    std::vector<pid_t> take_overdue(Clock::time_point now);
    // How long poll may sleep before the next deadline (-1: none).
    int poll_timeout_ms(Clock::time_point now) const;

    // The control sockets to poll, appended to `polled`.
    void add_poll_fds(std::vector<pollfd> *polled) const;
    struct Answer {
        pid_t pid;
        bool admitted;   // false: every session place was taken, or its peer's
        bool peer_full;  // refused because its peer holds all it may (--max-sessions-per-peer)
    };
    // A TLS worker's key request (worker_contract.h) answered: the reply, and the
    // worker's store channel that goes with a key.
    struct KeyAnswer {
        KeyReply reply;
        UniqueFd store;
    };
    using KeyAnswerer = std::function<KeyAnswer(pid_t, const KeyRequest &)>;
    // Answers the workers whose control sockets `polled` reports readable: a key
    // request (once, first) through `answer_key`, then the request for a place. A
    // worker that hung up or sent anything else, or a second key request, gets no
    // answer and is not listened to again. `peer_may_open(pid)`: whether the
    // worker's peer may hold one more session.
    std::vector<Answer> answer_requests(const std::vector<pollfd> &polled,
                                        const std::function<bool(pid_t)> &peer_may_open, const KeyAnswerer &answer_key);

    // Whether `pid` holds one of the session places (it is authenticated and admitted).
    bool holds_session(pid_t pid) const;
    // Whether the listener ended `pid` itself (evicted or overdue): its SIGKILL is no crash.
    bool ended_by_listener(pid_t pid) const;
    // A worker ended: its place (or unauthenticated count) and slot are free again.
    void release(pid_t pid);

  private:
    enum class Stage { unauthenticated, authenticated, evicted };
    struct Worker {
        Stage stage;
        int slot;
        Clock::time_point deadline;
        uint64_t order;  // acceptance order, for eviction
        UniqueFd control;
        bool key_asked = false;
        bool key_granted = false;  // its guest proved it holds a key: it may ask for a place
    };
    void list_in_status(const Worker &worker, bool listed);
    void stop_counting_unauthenticated(Worker *worker);
    std::optional<Answer> answer(pid_t pid, Worker *worker, const std::function<bool(pid_t)> &peer_may_open,
                                 const KeyAnswerer &answer_key);
    std::optional<Answer> answer_place(pid_t pid, Worker *worker, const std::function<bool(pid_t)> &peer_may_open);

    int max_sessions_;
    int max_unauthenticated_;
    Clock::duration deadline_;
    StatusBoard *board_;
    std::vector<bool> slot_taken_;  // the listener's record, not the board's live flags
    std::map<pid_t, Worker> workers_;
    int sessions_ = 0;
    int unauthenticated_ = 0;
    uint64_t next_order_ = 0;
};

}  // namespace ggml_remote::host
