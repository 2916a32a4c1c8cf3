// WorkerJail: the session workers' processes, in one place: starts one per accepted
// connection, learns which ended (and how), and ends them all at shutdown.
//
// A worker is a fresh exec of the worker program (ggml-remote-worker): it inherits only the descriptors
// named in its WorkerLaunch, and nothing ties it to the listener's life (no
// parent-death signal), so a guest's session outlives a listener that goes away.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "host/common/worker_contract.h"
#include "protocol/status.h"

namespace ggml_remote::host {

// One worker the jail started; `slot` is its status board slot, or -1.
struct WorkerRecord {
    int session_id = 0;
    std::string peer;
    int slot = -1;
};

// A child of the listener that ended, as waitpid reports it.
struct EndedChild {
    pid_t pid;
    int wait_status;
};

struct EndedWorker {
    pid_t pid;
    WorkerRecord record;
    int wait_status;  // as waitpid reports it
};

class WorkerJail {
  public:
    // `command`: the worker's argv without the per-connection arguments. `program`
    // is executed with it (find_worker_program; argv[0] through PATH when that
    // fails). `worker_mask`: the signal mask a worker starts with (the listener
    // blocks the signals it reads through a signalfd; its workers must not).
    WorkerJail(std::vector<std::string> command, const sigset_t &worker_mask, std::string program);

    // Starts a worker for `launch`; on success sets *pid and records it.
    Status spawn(const WorkerLaunch &launch, pid_t *pid);

    // The workers that ended since the last call, without blocking. Reaps every
    // child of this process (the listener has no others); lists only its workers.
    // Children that are not workers (the services process) go to `others`.
    std::vector<EndedWorker> reap(std::vector<EndedChild> *others = nullptr);

    // Ends one worker at once (SIGKILL); it is reported by reap() as usual.
    void kill(pid_t pid) const;

    // SIGTERM to every worker, then waits up to `grace` for them to end and kills
    // those that did not (a stopped or stuck worker never holds up a shutdown).
    void shut_down(std::chrono::milliseconds grace);

    const std::map<pid_t, WorkerRecord> &workers() const { return workers_; }
    const WorkerRecord *find(pid_t pid) const;

  private:
    std::vector<std::string> worker_arguments(const WorkerLaunch &launch) const;
    void signal_all(int signal) const;
    // Reaps what ended; false when this process has no children left.
    bool forget_ended();

    std::vector<std::string> command_;
    sigset_t worker_mask_;
    std::string program_;
    std::map<pid_t, WorkerRecord> workers_;
};

// The worker program, ggml-remote-worker: beside this program (a build tree), or in
// ../libexec/ggml-remote/ from it (an installed one).
Status find_worker_program(std::string *path);
// The same for the helper program `name` (`what` names it in the error).
Status find_helper_program(const std::string &name, const std::string &what, std::string *path);

}  // namespace ggml_remote::host
