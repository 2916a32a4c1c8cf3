#include "host/listener/adopted_sessions.h"

#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <set>
#include <string>

namespace ggml_remote::host {

namespace {

bool still_running(int pidfd) {
    pollfd polled{pidfd, POLLIN, 0};
    return ::poll(&polled, 1, 0) == 0;
}

}  // namespace

pid_t pid_of_pidfd(int pidfd) {
    std::ifstream info("/proc/self/fdinfo/" + std::to_string(pidfd));
    std::string line;
    while (std::getline(info, line)) {
        if (line.rfind("Pid:", 0) != 0) continue;
        const long pid = std::strtol(line.c_str() + 4, nullptr, 10);
        return pid > 0 ? static_cast<pid_t>(pid) : -1;
    }
    return -1;
}

UniqueFd open_pidfd(pid_t pid) { return UniqueFd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0))); }

int AdoptedSessions::adopt(std::vector<UniqueFd> pidfds, const SessionLedger &ledger, uint32_t board_slots,
                           std::vector<pid_t> *gone) {
    std::set<int> slots_taken;
    for (UniqueFd &pidfd : pidfds) {
        const pid_t pid = pid_of_pidfd(pidfd.get());
        if (pid <= 0 || !still_running(pidfd.get()) || sessions_.count(pid) != 0) {
            if (gone != nullptr && pid > 0 && sessions_.count(pid) == 0) gone->push_back(pid);
            continue;
        }
        AdoptedSession &session = sessions_[pid];
        LedgerEntry entry;
        if (const std::optional<LedgerEntry> found = ledger.find(pid)) {
            entry = *found;
        } else {
            entry.peer = "worker " + std::to_string(pid);  // counted all the same
            entry.account.key = "pid " + std::to_string(pid);
        }
        session.session_id = entry.session_id;
        const bool slot_ok =
            entry.slot >= 0 && static_cast<uint32_t>(entry.slot) < board_slots && slots_taken.insert(entry.slot).second;
        session.slot = slot_ok ? entry.slot : -1;
        session.peer = entry.peer;
        session.account = entry.account;
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
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
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
