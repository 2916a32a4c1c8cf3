// AdoptedSessions: the live sessions a listener took over from the listener it
// replaced (listener_handover.h). Their workers went on serving their guests; the
// new listener counts them (--max-sessions, per peer), keeps their status slots,
// and learns of their end through a pidfd each, since after a restart under
// systemd they are not its children.
//
// The board is writable by every worker, so nothing on it is believed unchecked: a
// slot is adopted only when its pid is a process of this server's (in its cgroup)
// whose command line says it is the worker of that very slot, each pid once, and
// the pidfd is opened before the checks (a pid reused later cannot pass for it).
// Where /proc hides the workers (systemd's ProtectProc=invisible hides undumpable
// processes) membership of the cgroup is the check: its processes are the
// listener's and its workers, and a worker cannot start one.
#pragma once

#include "host/status_board.h"
#include "transport/peer_account.h"
#include "transport/unique_fd.h"

#include <poll.h>
#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace ggml_remote::host {

struct AdoptedSession {
    int session_id = 0;
    int slot = -1;
    std::string peer;
    PeerAccount account;
    UniqueFd pidfd;
};

// Whether `pid` is this server's worker for status slot `slot` (see above).
bool is_worker_of_slot(pid_t pid, uint32_t slot);

class AdoptedSessions {
  public:
    // Adopts the board's live slots whose process `is_worker(pid, slot)` confirms;
    // a slot that fails is freed (its live flag cleared). Returns how many were adopted.
    int adopt(StatusBoard *board, const std::function<bool(pid_t, uint32_t)> &is_worker);

    // The pidfds to poll, appended to `polled`.
    void add_poll_fds(std::vector<pollfd> *polled) const;
    // The sessions whose worker ended, by `polled` (and no longer listed here).
    std::vector<std::pair<pid_t, AdoptedSession>> take_ended(const std::vector<pollfd> &polled);
    // Sends `signal` to every adopted worker (through its pidfd).
    void signal_all(int signal) const;
    // SIGTERM to every adopted worker, up to `grace` for them to end, then SIGKILL
    // to the rest; forgets them all.
    void end_all(std::chrono::milliseconds grace);

    const std::map<pid_t, AdoptedSession> &sessions() const { return sessions_; }
    // The highest session id adopted (0: none).
    int highest_id() const;

  private:
    std::map<pid_t, AdoptedSession> sessions_;
};

}  // namespace ggml_remote::host
