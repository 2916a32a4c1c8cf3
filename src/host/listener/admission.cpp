#include "host/listener/admission.h"

#include <sys/socket.h>

#include <algorithm>
#include <climits>
#include <cstring>

#include "host/common/store_channel.h"

namespace ggml_remote::host {

Admission::Admission(int max_sessions, int max_unauthenticated, Clock::duration unauthenticated_deadline,
                     StatusBoard *board)
    : max_sessions_(max_sessions),
      max_unauthenticated_(max_unauthenticated),
      deadline_(unauthenticated_deadline),
      board_(board),
      slot_taken_(board->slots(), false) {}

int Admission::free_slot() const {
    const auto free = std::find(slot_taken_.begin(), slot_taken_.end(), false);
    return free == slot_taken_.end() ? -1 : static_cast<int>(free - slot_taken_.begin());
}

void Admission::list_in_status(const Worker &worker, bool listed) {
    if (SessionSlot *slot = worker.slot >= 0 ? board_->slot(static_cast<uint32_t>(worker.slot)) : nullptr) {
        slot->live.store(listed ? 1 : 0);
    }
}

void Admission::add_authenticated(pid_t pid, int slot) {
    Worker &worker = workers_[pid];
    worker = Worker{Stage::authenticated, slot, Clock::time_point::max(), next_order_++, UniqueFd(), false, false};
    if (slot >= 0) slot_taken_[static_cast<size_t>(slot)] = true;
    ++sessions_;
    list_in_status(worker, true);
}

void Admission::add_unauthenticated(pid_t pid, int slot, UniqueFd control) {
    Worker &worker = workers_[pid];
    worker =
        Worker{Stage::unauthenticated, slot, Clock::now() + deadline_, next_order_++, std::move(control), false, false};
    if (slot >= 0) slot_taken_[static_cast<size_t>(slot)] = true;
    ++unauthenticated_;
    list_in_status(worker, false);  // listed once it authenticates
}

void Admission::stop_counting_unauthenticated(Worker *worker) {
    worker->stage = Stage::evicted;
    worker->control.reset();
    --unauthenticated_;
}

std::optional<pid_t> Admission::evict_oldest_unauthenticated_if_full() {
    if (unauthenticated_ < max_unauthenticated_) return std::nullopt;
    auto oldest = workers_.end();
    for (auto it = workers_.begin(); it != workers_.end(); ++it) {
        if (it->second.stage != Stage::unauthenticated) continue;
        if (oldest == workers_.end() || it->second.order < oldest->second.order) oldest = it;
    }
    if (oldest == workers_.end()) return std::nullopt;
    stop_counting_unauthenticated(&oldest->second);
    return oldest->first;
}

std::vector<pid_t> Admission::take_overdue(Clock::time_point now) {
    std::vector<pid_t> overdue;
    for (auto &[pid, worker] : workers_) {
        if (worker.stage != Stage::unauthenticated || worker.deadline > now) continue;
        stop_counting_unauthenticated(&worker);
        overdue.push_back(pid);
    }
    return overdue;
}

int Admission::poll_timeout_ms(Clock::time_point now) const {
    auto next = Clock::time_point::max();
    for (const auto &entry : workers_) {
        if (entry.second.stage == Stage::unauthenticated) next = std::min(next, entry.second.deadline);
    }
    if (next == Clock::time_point::max()) return -1;
    if (next <= now) return 0;
    const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count() + 1;
    return static_cast<int>(std::min<long long>(wait, INT_MAX));
}

void Admission::add_poll_fds(std::vector<pollfd> *polled) const {
    for (const auto &entry : workers_) {
        if (entry.second.control.valid()) polled->push_back({entry.second.control.get(), POLLIN, 0});
    }
}

std::optional<Admission::Answer> Admission::answer(pid_t pid, Worker *worker,
                                                   const std::function<bool(pid_t)> &peer_may_open,
                                                   const KeyAnswerer &answer_key) {
    // One message, whichever it is: a key request's size, or the request's one byte.
    union {
        KeyRequest key;
        char bytes[sizeof(KeyRequest) + 1];
    } message{};
    const ssize_t got = ::recv(worker->control.get(), message.bytes, sizeof(message.bytes), MSG_DONTWAIT);
    // A place only for a worker whose guest proved it holds a key: a worker a guest
    // took over before its handshake gets none by asking.
    if (got == 1 && message.bytes[0] == kAdmissionRequest && worker->key_granted) {
        return answer_place(pid, worker, peer_may_open);
    }
    // A key before the place, once: a worker that asks again, or anything else, is
    // not listened to again (and stays unauthenticated until it exits or its deadline).
    if (got == static_cast<ssize_t>(sizeof(KeyRequest)) && message.key.kind == kKeyRequestKind && !worker->key_asked) {
        worker->key_asked = true;
        KeyAnswer given = answer_key(pid, message.key);
        const int store = given.store.get();
        store_channel::NoSigpipe no_sigpipe;
        const bool sent = store_channel::send_message(worker->control.get(), &given.reply, sizeof(given.reply),
                                                      store >= 0 ? &store : nullptr, store >= 0 ? 1 : 0);
        ::explicit_bzero(given.reply.key, sizeof(given.reply.key));
        ::explicit_bzero(&message, sizeof(message));
        worker->key_granted = sent && given.reply.code == 0;
        if (worker->key_granted) return std::nullopt;  // its place comes next
    }
    worker->control.reset();
    return std::nullopt;
}

std::optional<Admission::Answer> Admission::answer_place(pid_t pid, Worker *worker,
                                                         const std::function<bool(pid_t)> &peer_may_open) {
    Answer result{pid, false, false};
    result.peer_full = !sessions_full() && !peer_may_open(pid);
    if (!sessions_full() && !result.peer_full) {
        worker->stage = Stage::authenticated;
        --unauthenticated_;
        ++sessions_;
        list_in_status(*worker, true);
        result.admitted = true;
    }
    const char reply = result.admitted ? kAdmissionGranted : result.peer_full ? kAdmissionPeerFull : kAdmissionFull;
    (void)!::send(worker->control.get(), &reply, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
    worker->control.reset();
    return result;
}

std::vector<Admission::Answer> Admission::answer_requests(const std::vector<pollfd> &polled,
                                                          const std::function<bool(pid_t)> &peer_may_open,
                                                          const KeyAnswerer &answer_key) {
    std::vector<Answer> answers;
    for (const pollfd &entry : polled) {
        if (entry.revents == 0) continue;
        for (auto &[pid, worker] : workers_) {
            if (worker.control.get() != entry.fd || worker.stage != Stage::unauthenticated) continue;
            if (const std::optional<Answer> given = answer(pid, &worker, peer_may_open, answer_key)) {
                answers.push_back(*given);
            }
            break;
        }
    }
    return answers;
}

bool Admission::holds_session(pid_t pid) const {
    const auto it = workers_.find(pid);
    return it != workers_.end() && it->second.stage == Stage::authenticated;
}

bool Admission::ended_by_listener(pid_t pid) const {
    const auto it = workers_.find(pid);
    return it != workers_.end() && it->second.stage == Stage::evicted;
}

void Admission::release(pid_t pid) {
    const auto it = workers_.find(pid);
    if (it == workers_.end()) return;
    Worker &worker = it->second;
    if (worker.stage == Stage::authenticated) --sessions_;
    if (worker.stage == Stage::unauthenticated) --unauthenticated_;
    list_in_status(worker, false);
    if (worker.slot >= 0) slot_taken_[static_cast<size_t>(worker.slot)] = false;
    workers_.erase(it);
}

}  // namespace ggml_remote::host
