// AdoptedSessions: the live sessions a listener took over from the listener it
// replaced (listener_handover.h). Their workers went on serving their guests; the
// new listener counts them (--max-sessions, per peer), keeps their status slots,
// and learns of their end through a pidfd each, since after a restart under
// systemd they are not its children.
//
// What is adopted comes only from what no worker can write: the pidfds the old
// listener handed over (SIGUSR2) or kept in systemd's file descriptor store, each
// opened by a listener while the worker was its unreaped child, and the labels of
// the listener's own session ledger (session_ledger.h). The status board, which
// every worker maps writable, decides nothing: a slot forged there is neither
// adopted, nor counted, nor signalled, and a forged slot count hides nothing.
#pragma once

#include <poll.h>
#include <sys/types.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "host/listener/session_ledger.h"
#include "transport/peer_account.h"
#include "transport/unique_fd.h"

namespace ggml_remote::host {

struct AdoptedSession {
    int session_id = 0;
    int slot = -1;
    std::string peer;
    PeerAccount account;
    UniqueFd pidfd;
};

// The pid a pidfd refers to (from /proc/self/fdinfo), or -1 when it is no pidfd
// or its process is gone.
pid_t pid_of_pidfd(int pidfd);
// A pidfd for `pid` (invalid on failure). Only for a child not yet reaped: then the
// pid cannot have been reused.
UniqueFd open_pidfd(pid_t pid);

class AdoptedSessions {
  public:
    // Adopts the workers of `pidfds` whose processes still run, each once, labelled
    // by `ledger` (a worker the ledger does not know still counts, unlabelled). A
    // slot is kept only when it is below `board_slots` and no other adopted session
    // has it. The pids of the pidfds that are not adopted go to `gone`. Returns how
    // many were adopted.
    int adopt(std::vector<UniqueFd> pidfds, const SessionLedger &ledger, uint32_t board_slots,
              std::vector<pid_t> *gone = nullptr);

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
