#include "host/adopted_sessions.h"

#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>
#include <set>

namespace ggml_remote::host {

namespace {

std::string read_proc_file(pid_t pid, const char *name) {
    std::ifstream file("/proc/" + (pid == 0 ? std::string("self") : std::to_string(pid)) + "/" + name,
                       std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
}

std::vector<std::string> split_arguments(const std::string &cmdline) {
    std::vector<std::string> arguments;
    size_t start = 0;
    for (size_t end; (end = cmdline.find('\0', start)) != std::string::npos; start = end + 1) {
        arguments.push_back(cmdline.substr(start, end - start));
    }
    return arguments;
}

// Whether `pid` is listed in this process's own cgroup (v2: the "0::" line).
bool in_own_cgroup(pid_t pid) {
    const std::string cgroups = read_proc_file(0, "cgroup");
    const size_t line = cgroups.rfind("0::", 0) == 0 ? 0 : cgroups.find("\n0::");
    if (line == std::string::npos) return false;
    const size_t start = line == 0 ? 3 : line + 4;
    const std::string path = cgroups.substr(start, cgroups.find('\n', start) - start);
    std::ifstream procs("/sys/fs/cgroup" + path + "/cgroup.procs");
    for (long listed; procs >> listed;) {
        if (listed == pid) return true;
    }
    return false;
}

UniqueFd open_pidfd(pid_t pid) { return UniqueFd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0))); }

bool still_running(int pidfd) {
    pollfd polled{pidfd, POLLIN, 0};
    return ::poll(&polled, 1, 0) == 0;
}

// The board's text fields, bounded: a worker may have left them unterminated.
std::string bounded(const char *text, size_t size) { return std::string(text, strnlen(text, size)); }

PeerAccount account_of(const SessionSlot &slot) {
    PeerAccount account;
    account.kind = slot.peer_kind == static_cast<uint32_t>(PeerAccount::Kind::user) ? PeerAccount::Kind::user
                                                                                      : PeerAccount::Kind::address;
    account.uid = slot.peer_uid;
    account.key = bounded(slot.peer_key, sizeof(slot.peer_key));
    return account;
}

}  // namespace

bool is_worker_of_slot(pid_t pid, uint32_t slot) {
    if (pid <= 1 || pid == ::getpid()) return false;
    const std::vector<std::string> arguments = split_arguments(read_proc_file(pid, "cmdline"));
    // Under ProtectProc=invisible the undumpable workers' /proc entries are hidden
    // from the listener: then membership of its cgroup is the whole check.
    if (arguments.empty()) return in_own_cgroup(pid);
    const std::string own_cgroup = read_proc_file(0, "cgroup");
    if (!in_own_cgroup(pid) && (own_cgroup.empty() || read_proc_file(pid, "cgroup") != own_cgroup)) return false;
    const auto has_pair = [&arguments](const std::string &flag, const std::string &value) {
        for (size_t i = 0; i + 1 < arguments.size(); ++i) {
            if (arguments[i] == flag && (value.empty() || arguments[i + 1] == value)) return true;
        }
        return false;
    };
    return has_pair("--worker-fd", "") && has_pair("--status-slot", std::to_string(slot));
}

int AdoptedSessions::adopt(StatusBoard *board, const std::function<bool(pid_t, uint32_t)> &is_worker) {
    std::set<pid_t> seen;
    for (uint32_t index = 0; index < board->slots(); ++index) {
        SessionSlot *slot = board->slot(index);
        if (slot->live.load() == 0) continue;
        const pid_t pid = slot->pid;
        UniqueFd pidfd = pid > 0 && seen.count(pid) == 0 ? open_pidfd(pid) : UniqueFd();
        if (!pidfd.valid() || !is_worker(pid, index) || !still_running(pidfd.get())) {
            slot->live.store(0);  // not a session of ours (any more)
            continue;
        }
        seen.insert(pid);
        AdoptedSession &session = sessions_[pid];
        session.session_id = slot->id;
        session.slot = static_cast<int>(index);
        session.peer = bounded(slot->peer, sizeof(slot->peer));
        session.account = account_of(*slot);
        session.pidfd = std::move(pidfd);
    }
    return static_cast<int>(sessions_.size());
}

void AdoptedSessions::add_poll_fds(std::vector<pollfd> *polled) const {
    for (const auto &entry : sessions_) polled->push_back({entry.second.pidfd.get(), POLLIN, 0});
}

std::vector<std::pair<pid_t, AdoptedSession>> AdoptedSessions::take_ended(const std::vector<pollfd> &polled) {
    std::vector<std::pair<pid_t, AdoptedSession>> ended;
    for (const pollfd &entry : polled) {
        if (entry.revents == 0) continue;
        for (auto it = sessions_.begin(); it != sessions_.end(); ++it) {
            if (it->second.pidfd.get() != entry.fd) continue;
            ended.emplace_back(it->first, std::move(it->second));
            sessions_.erase(it);
            break;
        }
    }
    return ended;
}

void AdoptedSessions::signal_all(int signal) const {
    for (const auto &entry : sessions_) ::syscall(SYS_pidfd_send_signal, entry.second.pidfd.get(), signal, nullptr, 0);
}

void AdoptedSessions::end_all(std::chrono::milliseconds grace) {
    signal_all(SIGTERM);
    const auto deadline = std::chrono::steady_clock::now() + grace;
    while (!sessions_.empty()) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0) break;
        std::vector<pollfd> polled;
        add_poll_fds(&polled);
        if (::poll(polled.data(), polled.size(), static_cast<int>(left.count())) > 0) take_ended(polled);
    }
    signal_all(SIGKILL);
    sessions_.clear();
}

int AdoptedSessions::highest_id() const {
    int highest = 0;
    for (const auto &entry : sessions_) highest = std::max(highest, entry.second.session_id);
    return highest;
}

}  // namespace ggml_remote::host
