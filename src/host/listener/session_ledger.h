// SessionLedger: the listener's own record of the sessions that hold a place
// (--max-sessions), with what the next listener needs to count them: each one's
// worker pid, session id, status slot, peer and peer account. It lives in a sealed
// memory file that only listeners ever hold (no worker is handed it, unlike the
// status board), and goes to the next listener with the workers' pidfds: in the
// hand-over of SIGUSR2, or in systemd's file descriptor store (listener_handover.h).
//
// The next listener counts, lists and ends only the workers whose pidfds it was
// handed; the ledger only labels them. Nothing on the status board, which every
// worker can write, decides what a listener adopts, counts or kills.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "protocol/status.h"
#include "transport/peer_account.h"
#include "transport/shared_memory.h"
#include "transport/unique_fd.h"

namespace ggml_remote::host {

struct LedgerEntry {
    pid_t pid = 0;
    int session_id = 0;
    int slot = -1;  // its status board slot, or -1
    std::string peer;
    PeerAccount account;
};

class SessionLedger {
  public:
    // A ledger with room for `capacity` sessions.
    static Status create(uint32_t capacity, SessionLedger *ledger);
    // The ledger of the listener this one replaces; an error for another version's.
    static Status attach(int fd, SessionLedger *ledger);

    // A new ledger of `capacity` (at least this one's) holding this one's records:
    // a listener with a higher --max-sessions takes over a smaller ledger so.
    Status grown(uint32_t capacity, SessionLedger *ledger) const;

    int fd() const { return fd_.get(); }
    uint32_t capacity() const { return capacity_; }
    // Records `entry` (replacing one of the same pid); false when the ledger is full
    // (the session still counts here, only a next listener cannot label it).
    bool record(const LedgerEntry &entry);
    void forget(pid_t pid);
    std::optional<LedgerEntry> find(pid_t pid) const;
    // The pids recorded.
    std::vector<pid_t> pids() const;
    // The next session id, so that a listener that takes over numbers on.
    int next_session_id() const;
    void set_next_session_id(int id);

    struct Entry;  // one session, in the memory file

  private:
    Entry *entry(uint32_t index) const;

    UniqueFd fd_;
    Mapping mapping_;
    uint32_t capacity_ = 0;
};

}  // namespace ggml_remote::host
