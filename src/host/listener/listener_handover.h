// Listener handover: how a listener takes over listening sockets and the status
// board, from systemd (socket activation, its file descriptor store) or from the
// listener it replaces (SIGUSR2: the old one execs the new binary in its place).
//
// Both speak systemd's protocol: the descriptors from 3 on, LISTEN_FDS their count,
// LISTEN_PID the process meant, LISTEN_FDNAMES their names separated by ':'.
// Names this server gives (any other name is a socket of systemd's):
#pragma once

#include <signal.h>

#include <string>
#include <vector>

#include "protocol/status.h"
#include "transport/socket.h"
#include "transport/unique_fd.h"

namespace ggml_remote::host {

constexpr const char *kHandedListenName = "ggml-remote-listen";       // a socket of --listen
constexpr const char *kHandedUnlinkName = "ggml-remote-unlink";       // ... whose file the listener removes at exit
constexpr const char *kHandedBoardName = "ggml-remote-status-board";  // the status board
constexpr const char *kHandedLedgerName = "ggml-remote-ledger";       // the session ledger (session_ledger.h)
// ... followed by the pid: the pidfd of a worker that holds a session place. Only
// these are adopted, counted and ended by the next listener (adopted_sessions.h).
constexpr const char *kHandedWorkerPrefix = "ggml-remote-worker-";

struct InheritedListener {
    InheritedSocket socket;
    bool unlink_at_exit = false;  // a unix socket file the server made (systemd removes its own)
};

// A worker's pidfd handed over, under its name (kHandedWorkerPrefix + pid).
struct HandedWorker {
    std::string name;
    UniqueFd pidfd;
};

// What a new listener starts with.
struct Inheritance {
    std::vector<InheritedListener> sockets;
    UniqueFd status_board;              // the previous listener's board; invalid: none
    UniqueFd ledger;                    // the previous listener's session ledger; invalid: none
    std::vector<HandedWorker> workers;  // the previous listener's workers that hold a place
    bool from_listener = false;         // handed over by a listener: its --listen sockets are among them
};

// Takes the descriptors handed to this process (when LISTEN_PID names it), made
// close-on-exec, and unsets the variables. Descriptors it cannot use are closed.
Inheritance take_inheritance();

struct HandedFd {
    int fd;
    std::string name;  // no ':'
};

// Replaces this process's program by `program` with `argv`, handing it `fds` from
// descriptor 3 on as above, with the signal mask `mask`. Returns only on failure,
// and then descriptors from 3 on may have been replaced: the caller must exit.
Status exec_with_fds(const std::string &program, const std::vector<std::string> &argv, const std::vector<HandedFd> &fds,
                     const sigset_t &mask);

// Asks the service manager (systemd, at $NOTIFY_SOCKET) to keep `fd` under `name`
// while this service restarts (FDSTORE=1); the next listener finds it named in
// LISTEN_FDNAMES. An error when there is no service manager or the message failed.
Status store_with_service_manager(int fd, const std::string &name);
// Asks the service manager to drop what it keeps under `name` (FDSTOREREMOVE=1).
Status remove_from_service_manager(const std::string &name);
// Whether a service manager may keep descriptors for this process ($NOTIFY_SOCKET).
bool has_service_manager();

}  // namespace ggml_remote::host
