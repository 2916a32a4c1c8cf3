#include "host/listener/session_ledger.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <type_traits>

#include "host/common/status_board.h"

namespace ggml_remote::host {

namespace {

struct LedgerHeader {
    uint32_t magic;
    uint32_t capacity;
    uint32_t entry_size;
    uint32_t board_slot_size;  // the status board's layout this listener wrote
    int32_t next_session_id;
    uint32_t reserved[11];
};
constexpr uint32_t kLedgerMagic = 0x4c534752;  // "RGSL"

}  // namespace

struct SessionLedger::Entry {
    int32_t pid;  // 0: free
    int32_t session_id;
    int32_t slot;
    uint32_t peer_kind;  // PeerAccount::Kind
    uint32_t peer_uid;
    char peer[112];
    char peer_key[64];
};

namespace {

static_assert(std::is_trivially_copyable<LedgerHeader>::value, "the ledger lives in a memory file");
size_t ledger_size(uint32_t capacity) { return sizeof(LedgerHeader) + size_t(capacity) * sizeof(SessionLedger::Entry); }

std::string bounded(const char *text, size_t size) { return std::string(text, strnlen(text, size)); }

}  // namespace

Status SessionLedger::create(uint32_t capacity, SessionLedger *ledger) {
    Status status = create_shared_memory(ledger_size(capacity), "ggml-remote-ledger", &ledger->fd_);
    if (status) status = Mapping::map(ledger->fd_.get(), 0, ledger_size(capacity), true, &ledger->mapping_);
    if (!status) return status;
    auto *header = static_cast<LedgerHeader *>(ledger->mapping_.data());
    *header = LedgerHeader{kLedgerMagic, capacity, sizeof(Entry), sizeof(SessionSlot), 1, {}};
    ledger->capacity_ = capacity;
    return Status::success();
}

Status SessionLedger::attach(int fd, SessionLedger *ledger) {
    ledger->fd_.reset(fd);
    struct stat st{};
    const int seals = ::fcntl(fd, F_GET_SEALS);
    if (::fstat(fd, &st) != 0 || st.st_size < static_cast<off_t>(sizeof(LedgerHeader)) || seals < 0 ||
        (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW)) {
        return error(Code::error, "session ledger: not a sealed ledger");
    }
    Status status = Mapping::map(fd, 0, static_cast<size_t>(st.st_size), true, &ledger->mapping_);
    if (!status) return status;
    const auto *header = static_cast<const LedgerHeader *>(ledger->mapping_.data());
    if (header->magic != kLedgerMagic || header->entry_size != sizeof(Entry) ||
        header->board_slot_size != sizeof(SessionSlot)) {
        return error(Code::error, "session ledger: another version's layout");
    }
    ledger->capacity_ = static_cast<uint32_t>((static_cast<size_t>(st.st_size) - sizeof(LedgerHeader)) / sizeof(Entry));
    return Status::success();
}

Status SessionLedger::grown(uint32_t capacity, SessionLedger *ledger) const {
    Status status = create(std::max(capacity, capacity_), ledger);
    if (!status) return status;
    ledger->set_next_session_id(next_session_id());
    for (uint32_t i = 0; i < capacity_; ++i) *ledger->entry(i) = *entry(i);
    return Status::success();
}

SessionLedger::Entry *SessionLedger::entry(uint32_t index) const {
    return reinterpret_cast<Entry *>(static_cast<uint8_t *>(mapping_.data()) + sizeof(LedgerHeader)) + index;
}

bool SessionLedger::record(const LedgerEntry &entry) {
    if (entry.pid <= 0) return false;
    Entry *free = nullptr;
    for (uint32_t i = 0; i < capacity_; ++i) {
        Entry *at = this->entry(i);
        if (at->pid == entry.pid) {
            free = at;
            break;
        }
        if (at->pid == 0 && free == nullptr) free = at;
    }
    if (free == nullptr) return false;
    free->pid = entry.pid;
    free->session_id = entry.session_id;
    free->slot = entry.slot;
    free->peer_kind = static_cast<uint32_t>(entry.account.kind);
    free->peer_uid = entry.account.uid;
    std::snprintf(free->peer, sizeof(free->peer), "%s", entry.peer.c_str());
    std::snprintf(free->peer_key, sizeof(free->peer_key), "%s", entry.account.key.c_str());
    return true;
}

void SessionLedger::forget(pid_t pid) {
    for (uint32_t i = 0; i < capacity_ && pid > 0; ++i) {
        if (entry(i)->pid == pid) std::memset(entry(i), 0, sizeof(Entry));
    }
}

std::optional<LedgerEntry> SessionLedger::find(pid_t pid) const {
    for (uint32_t i = 0; i < capacity_ && pid > 0; ++i) {
        const Entry *at = entry(i);
        if (at->pid != pid) continue;
        LedgerEntry found;
        found.pid = pid;
        found.session_id = at->session_id;
        found.slot = at->slot;
        found.peer = bounded(at->peer, sizeof(at->peer));
        found.account.kind = at->peer_kind == static_cast<uint32_t>(PeerAccount::Kind::user)
                                 ? PeerAccount::Kind::user
                                 : PeerAccount::Kind::address;
        found.account.uid = at->peer_uid;
        found.account.key = bounded(at->peer_key, sizeof(at->peer_key));
        return found;
    }
    return std::nullopt;
}

std::vector<pid_t> SessionLedger::pids() const {
    std::vector<pid_t> recorded;
    for (uint32_t i = 0; i < capacity_; ++i) {
        if (entry(i)->pid > 0) recorded.push_back(entry(i)->pid);
    }
    return recorded;
}

int SessionLedger::next_session_id() const {
    if (mapping_.data() == nullptr) return 1;
    const int id = static_cast<const LedgerHeader *>(mapping_.data())->next_session_id;
    return id > 0 ? id : 1;
}

void SessionLedger::set_next_session_id(int id) {
    if (mapping_.data() != nullptr) static_cast<LedgerHeader *>(mapping_.data())->next_session_id = id;
}

}  // namespace ggml_remote::host
