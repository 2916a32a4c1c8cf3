// Fuzz target: the weight store's channel (host/common/store_channel.h) as workers a
// guest took over speak it to the listener's StoreOwner. The input is a store's
// settings (shared or per tenant, verify on use, a small byte limit), four fuzzed
// contents, then a script of requests from four worker channels of three tenants
// (two share one): finds (derived, claiming), commits (left under way while other
// channels go on, or not; with the bytes named, others, too few, more; with two
// pipes, one, a pipe and a memfd of fuzzed bytes, three descriptors), waiters,
// identify and unknown kinds, messages that end a channel, and damage done to an
// entry on disk (bit rot, a crash). A fresh owner over a fresh directory per input.
//
// Oracles (docs/SECURITY.md, "The store never trusts a worker"):
// - the directory holds only what the owner may write: tenant directories, entries
//   the script committed, named by the digest of their bytes (a derived entry: in
//   its worker's own tenant's directory), mode 0400, each with a sound header, the
//   bytes committed and no other; half-written files only while a commit is under
//   way;
// - bytes are counted, and never exceed the limit: what the owner says it holds is
//   what the entries named and the commits under way take, and the files on disk
//   take no more than the limit;
// - an entry is named exactly when the worker sent at least its size of bytes whose
//   digest is its name (a derived one: the bytes sent);
// - a tenant loses an entry to another's commit only while it holds more than its
//   share (the limit divided among the tenants that hold entries), and no further
//   than one entry below it; a commit refused for room left nothing it could evict;
//   nothing is removed but by a commit's eviction, or a find of a damaged entry;
// - a find answers exactly what the model says: found (with a read-only descriptor
//   of an entry of the asker's own directory, of the size asked, whose bytes are the
//   ones committed, unless damaged and not verified), in flight (only while another
//   worker of the same tenant claimed it or commits it), or not found; waiters
//   counts this worker's claims others heard "in flight" of;
// - every other request is refused; a message of another size, or with more
//   descriptors than a commit takes, ends its channel, and only it;
// - every reply comes within seconds, terminated, with a known code.
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "fuzz_support.h"
#include "host/common/store_channel.h"
#include "host/common/store_layout.h"
#include "host/services/store_owner.h"
#include "protocol/content_digest.h"
#include "transport/socket.h"

namespace ggml_remote::fuzz {
namespace {

namespace store_channel = host::store_channel;
using host::StoreOwner;
using protocol::ContentDigest;
using store_channel::Kind;
using store_channel::Reply;
using store_channel::Request;
using Clock = std::chrono::steady_clock;

constexpr int kSlots = 4;  // worker channels at once
const char *const kTenantOfSlot[kSlots] = {"alice", "alice", "bob", "carol"};
constexpr int kContents = 4;
constexpr int kAnswerMs = 3000;  // a reply later than this is a hang
// A commit's result once its bytes are sent (or its pipe closed), and a channel's
// end (which waits for its commit): the owner hashes on a SCHED_IDLE thread, which
// a busy machine may leave waiting for seconds.
constexpr int kResultMs = 20000;
constexpr int kMaxPendingSteps = 32;  // steps a commit stays under way, at most
constexpr uint64_t kPage = 4096;
constexpr uint64_t kLimitUnit = 8 << 10;  // the store's limit: 2..33 of these

// An entry's header on disk, as store_owner.cpp writes it (the store's layout).
struct EntryHeader {
    char magic[8];
    uint8_t digest[16];
    uint64_t size;
    uint64_t content_offset;
    uint64_t check;  // XXH3-64 of the fields above
};
static_assert(sizeof(EntryHeader) == 48, "the store's entry header");
constexpr char kMagic[8] = {'G', 'G', 'R', 'W', 'S', 'T', 'R', '1'};

// What an entry takes: its header page and its bytes' pages (the owner's count).
uint64_t entry_bytes(uint64_t content_offset, uint64_t size) {
    const uint64_t first = content_offset / kPage * kPage;
    const uint64_t end = (content_offset + size + kPage - 1) / kPage * kPage;
    return kPage + (end - first);
}

ContentDigest digest_of(const std::vector<uint8_t> &bytes, size_t size) {
    return protocol::content_digest(bytes.data(), std::min(size, bytes.size()));
}

bool is_hex(const std::string &text, size_t from, size_t count) {
    if (text.size() != from + count) return false;
    for (size_t i = from; i < text.size(); ++i) {
        if (!std::isxdigit(static_cast<unsigned char>(text[i])) || std::isupper(static_cast<unsigned char>(text[i])))
            return false;
    }
    return true;
}

enum class Damage { none, header, content, truncated };

// An entry the script committed and the owner named, until it is gone.
struct EntryModel {
    uint64_t bytes = 0;  // as counted against the limit
    uint64_t size = 0, content_offset = 0;
    ContentDigest content;  // of its bytes, as sent
    bool derived = false;
    Damage damage = Damage::none;
    bool checked = false;  // its file was read and found as committed
};

std::string directory_of(const std::string &key) { return key.substr(0, key.find('/')); }

struct ClaimModel {
    int slot = 0;
    std::string own;  // the claimant's own tenant directory
    bool waited = false;
};

// A commit the owner accepted whose bytes are not sent yet.
struct PendingCommit {
    std::string key;
    UniqueFd data, result;
    std::vector<uint8_t> bytes;  // what the worker will send
    uint64_t size = 0, content_offset = 0, reserved = 0;
    bool derived = false;
    ContentDigest named;  // the digest the request named
};

struct Slot {
    UniqueFd channel;
    std::string directory, own;  // where its entries go, and its own tenant's (derived ones)
    bool pending = false;
    int pending_steps = 0;  // steps since its commit was accepted
    PendingCommit commit;
};

struct Answer {
    Reply reply;
    UniqueFd file;
    Code code() const { return static_cast<Code>(reply.code); }
};

class Harness {
  public:
    explicit Harness(InputScript &script);
    ~Harness();
    void step(InputScript &script);
    void finish();

  private:
    void connect_slot(int slot);
    void send(int slot, const Request &request, const int *fds, size_t count);
    Answer receive(int slot);
    Request request_of(Kind kind, InputScript &script, bool *derived, int *content);
    std::string key_of(int slot, const Request &request) const;

    void find(int slot, InputScript &script);
    void check_found(const Answer &answer, const EntryModel &entry, const Request &request);
    void find_missed(int slot, const std::string &key, const Request &request, const Answer &answer);
    void commit(int slot, InputScript &script, bool deferred);
    bool commit_refused(int slot, const Request &request, const std::string &key, bool fds_usable, uint64_t reserved,
                        const Answer &answer);
    void check_eviction(const std::string &evictor, uint64_t reserved, bool accepted);
    void collect_commit(int slot);
    void waiters(int slot);
    void unknown(int slot, InputScript &script);
    void end_channel(int slot, InputScript &script);
    void expect_ended(int slot);
    void damage(InputScript &script);

    // The directory as the oracles above allow it; entries gone from it are
    // returned (and forgotten).
    // `accepted`: a commit the model does not hold under way yet has its file.
    std::vector<std::pair<std::string, EntryModel>> check_directory(size_t accepted = 0);
    void check_entry_file(const std::string &key, EntryModel &entry, int file);
    void expect_nothing_gone(const std::vector<std::pair<std::string, EntryModel>> &gone, const char *what);
    std::map<std::string, uint64_t> held_by_directory() const;
    uint64_t named_bytes() const;
    uint64_t reserved_bytes() const;
    void check_counts();

    std::string root_;
    host::WeightStoreOptions options_;
    std::unique_ptr<StoreOwner> owner_;
    std::vector<uint8_t> contents_[kContents];
    Slot slots_[kSlots];
    std::map<std::string, EntryModel> entries_;  // "<tenant directory>/<name>"
    std::map<std::string, ClaimModel> claims_;
};

std::vector<uint8_t> content_from(InputScript &script) {
    const size_t size = size_t(script.next<uint8_t>()) * 64 + script.next<uint8_t>() % 64;
    std::vector<uint8_t> bytes(size);
    uint8_t seed[8];
    for (uint8_t &byte : seed) byte = script.next<uint8_t>();
    for (size_t i = 0; i < size; ++i) bytes[i] = static_cast<uint8_t>(seed[i % 8] + (i / 8) * 131);
    return bytes;
}

Harness::Harness(InputScript &script) {
    char pattern[] = "/dev/shm/ggml-remote-fuzz-store-XXXXXX";
    if (::mkdtemp(pattern) == nullptr) oracle_violated("cannot make a directory");
    root_ = pattern;
    const uint8_t settings = script.next<uint8_t>();
    options_.directory = root_ + "/store";
    options_.shared_across_tenants = (settings & 1) != 0;
    options_.verify_on_use = (settings & 2) != 0;
    options_.max_bytes = (2 + script.next<uint8_t>() % 32) * kLimitUnit;
    for (auto &content : contents_) content = content_from(script);
    if (!StoreOwner::prepare(options_).ok()) oracle_violated("the store cannot prepare its directory");
    owner_ = std::make_unique<StoreOwner>();
    if (!owner_->open(options_).ok()) oracle_violated("the store cannot open its directory");
    for (int slot = 0; slot < kSlots; ++slot) connect_slot(slot);
}

Harness::~Harness() {
    for (Slot &slot : slots_) slot.commit.data.reset();  // an input that failed: no commit waits
    owner_.reset();
    std::error_code ignored;
    std::filesystem::remove_all(root_, ignored);
}

void Harness::connect_slot(int slot) {
    Slot &s = slots_[slot];
    s.channel.reset();
    s.pending = false;
    s.commit = PendingCommit{};
    s.own = StoreOwner::tenant_directory_name(kTenantOfSlot[slot]);
    s.directory = options_.shared_across_tenants ? StoreOwner::tenant_directory_name("") : s.own;
    if (!owner_->connect(kTenantOfSlot[slot], &s.channel).ok()) oracle_violated("the store gives no channel");
}

void Harness::send(int slot, const Request &request, const int *fds, size_t count) {
    if (!store_channel::send_message(slots_[slot].channel.get(), &request, sizeof(request), fds, count)) {
        oracle_violated("the store's channel is gone");
    }
}

Answer Harness::receive(int slot) {
    Answer answer;
    std::vector<UniqueFd> fds;
    if (!store_channel::receive_message(slots_[slot].channel.get(), &answer.reply, sizeof(answer.reply), &fds, 4,
                                        kAnswerMs)) {
        oracle_violated("no reply in time (a hang, or a reply of another size)");
    }
    if (std::memchr(answer.reply.message, '\0', sizeof(answer.reply.message)) == nullptr) {
        oracle_violated("a reply's message is not terminated");
    }
    if (answer.reply.code < 0 || answer.reply.code > static_cast<int32_t>(Code::disconnected)) {
        oracle_violated("a reply's code is no protocol code");
    }
    if (fds.size() > 1) oracle_violated("a reply carries more than one descriptor");
    static const bool verbose = std::getenv("GGML_REMOTE_FUZZ_VERBOSE") != nullptr;
    if (verbose)
        std::fprintf(stderr, "channel %d: %d found %u at %llu %s%s\n", slot, answer.reply.code, answer.reply.found,
                     static_cast<unsigned long long>(answer.reply.content_offset), answer.reply.message,
                     fds.empty() ? "" : " (+ a descriptor)");
    if (!fds.empty()) answer.file = std::move(fds.front());
    return answer;
}

// A find's or a commit's digest, size and flags: mostly a content's own.
Request Harness::request_of(Kind kind, InputScript &script, bool *derived, int *content) {
    Request request;
    request.kind = static_cast<uint32_t>(kind);
    const uint8_t choice = script.next<uint8_t>();
    *content = choice % kContents;
    const std::vector<uint8_t> &bytes = contents_[*content];
    ContentDigest digest = digest_of(bytes, bytes.size());
    if ((choice / 4) % 4 == 2) digest.bytes[choice % 16] ^= 1;  // no content's
    if ((choice / 4) % 4 == 3) digest = ContentDigest{};
    std::memcpy(request.digest, digest.bytes, sizeof(request.digest));
    const uint8_t size = script.next<uint8_t>();
    request.size = bytes.size();
    if (size % 8 == 5) request.size += 1 + size / 8;
    if (size % 8 == 6) request.size = request.size > size / 8 ? request.size - size / 8 : 0;
    if (size % 8 == 7) request.size = UINT64_MAX - size / 8;
    const uint8_t flags = script.next<uint8_t>();
    // Mostly the flags there are; sometimes every bit.
    request.flags = (flags & 0x80) != 0 ? 0xFFFFFFFFu : flags & (store_channel::kDerived | store_channel::kClaim);
    *derived = (request.flags & store_channel::kDerived) != 0;
    return request;
}

std::string Harness::key_of(int slot, const Request &request) const {
    ContentDigest digest;
    std::memcpy(digest.bytes, request.digest, sizeof(digest.bytes));
    const bool derived = (request.flags & store_channel::kDerived) != 0;
    return derived ? slots_[slot].own + "/r-" + digest.hex() : slots_[slot].directory + "/" + digest.hex();
}

void Harness::step(InputScript &script) {
    const uint8_t op = script.next<uint8_t>();
    const int slot = (op / 8) % kSlots;
    // Well within the owner's stall limit (kStallMs), whatever the load.
    for (int other = 0; other < kSlots; ++other) {
        if (slots_[other].pending && ++slots_[other].pending_steps > kMaxPendingSteps) collect_commit(other);
    }
    // A commit under way goes on while the others act, and while its own channel
    // commits again (which is refused).
    if (slots_[slot].pending && (op % 8 != 3 || (op & 0x80) != 0)) collect_commit(slot);
    switch (op % 8) {
        case 0:
        case 1:
            find(slot, script);
            break;
        case 2:
            commit(slot, script, false);
            break;
        case 3:
            commit(slot, script, true);
            break;
        case 4:
            waiters(slot);
            break;
        case 5:
            unknown(slot, script);
            break;
        case 6:
            end_channel(slot, script);
            break;
        default:
            damage(script);
    }
    check_counts();
}

void Harness::find(int slot, InputScript &script) {
    bool derived = false;
    int content = 0;
    Request request = request_of(Kind::find, script, &derived, &content);
    const std::string key = key_of(slot, request);
    // Descriptors with a find are not the worker's to give: dropped.
    UniqueFd extra;
    if ((script.next<uint8_t>() & 3) == 3) extra.reset(::memfd_create("find-extra", MFD_CLOEXEC));
    const int fd = extra.get();
    send(slot, request, extra.valid() ? &fd : nullptr, extra.valid() ? 1 : 0);
    const Answer answer = receive(slot);
    if (answer.code() != Code::ok) oracle_violated("a find failed");

    const auto entry = entries_.find(key);
    bool removed = false, found = false;
    if (entry != entries_.end()) {
        const EntryModel &e = entry->second;
        const bool header_sound = e.damage != Damage::header && e.damage != Damage::truncated;
        removed = !header_sound || (request.size == e.size && options_.verify_on_use && e.damage == Damage::content);
        found = !removed && request.size == e.size;
        if (found && answer.reply.found == store_channel::kFound) check_found(answer, e, request);
    } else {
        find_missed(slot, key, request, answer);
    }
    if (entry != entries_.end() && (answer.reply.found == store_channel::kFound) != found) {
        oracle_violated(found ? "a find missed a sound entry of its own" : "a find answered a damaged or other entry");
    }
    if (entry != entries_.end() && answer.file.valid() != found) oracle_violated("a find's descriptor, or none, lies");
    const auto gone = check_directory();
    if (removed && (gone.size() != 1 || gone.front().first != key)) {
        oracle_violated("a find kept a damaged entry (or removed another)");
    }
    if (!removed) expect_nothing_gone(gone, "a find removed an entry");
}

void Harness::check_found(const Answer &answer, const EntryModel &entry, const Request &request) {
    if (answer.reply.content_offset != entry.content_offset) oracle_violated("a find names another offset");
    const int file = answer.file.get();
    const int mode = ::fcntl(file, F_GETFL);
    if (mode < 0 || (mode & O_ACCMODE) != O_RDONLY) oracle_violated("a find hands on a writable descriptor");
    struct stat st{};
    if (::fstat(file, &st) != 0 || !S_ISREG(st.st_mode) || uint64_t(st.st_size) != entry.content_offset + entry.size) {
        oracle_violated("a find hands on no entry of its size");
    }
    std::vector<uint8_t> bytes(entry.size);
    if (::pread(file, bytes.data(), bytes.size(), static_cast<off_t>(entry.content_offset)) !=
        static_cast<ssize_t>(bytes.size())) {
        oracle_violated("a found entry cannot be read");
    }
    const ContentDigest found = digest_of(bytes, bytes.size());
    if (entry.damage == Damage::content) return;  // bit rot that only verify_on_use sees
    ContentDigest asked;
    std::memcpy(asked.bytes, request.digest, sizeof(asked.bytes));
    if (found != entry.content || (!entry.derived && found != asked)) {
        oracle_violated("a find hands on bytes that are not the entry's");
    }
}

// Nothing named: in flight while another worker of the tenant claims it.
void Harness::find_missed(int slot, const std::string &key, const Request &request, const Answer &answer) {
    if (answer.file.valid()) oracle_violated("a find that found nothing hands on a descriptor");
    const auto claim = claims_.find(key);
    if (claim != claims_.end() && claim->second.slot != slot) {
        const bool in_flight = claim->second.own == slots_[slot].own;
        if ((answer.reply.found == store_channel::kInFlight) != in_flight) {
            oracle_violated(in_flight ? "a claim of the tenant's own worker was not in flight"
                                      : "a find heard of another tenant's claim");
        }
        if (in_flight) claim->second.waited = true;
        return;
    }
    if (answer.reply.found != store_channel::kNotFound) oracle_violated("a find found what nobody named or claimed");
    if ((request.flags & store_channel::kClaim) != 0 && claim == claims_.end()) {
        claims_[key] = ClaimModel{slot, slots_[slot].own, false};
    }
}

// What a commit's descriptors are: two pipes (data, result), or not.
enum class Pipes { two, one, pipe_and_memfd, three };

Pipes pipes_of(uint8_t byte) {
    switch (byte % 8) {
        case 5:
            return Pipes::one;
        case 6:
            return Pipes::pipe_and_memfd;
        case 7:
            return Pipes::three;
        default:
            return Pipes::two;
    }
}

// The bytes a worker sends for a commit of `size`: the content's, or not quite.
std::vector<uint8_t> bytes_to_send(const std::vector<uint8_t> &content, uint64_t size, uint8_t plan) {
    std::vector<uint8_t> bytes(content);
    if (size <= (uint64_t(1) << 20) && size > bytes.size()) bytes.resize(size, 0);  // zeros after the content
    switch (plan % 8) {
        case 4:
            if (!bytes.empty()) bytes[plan % bytes.size()] ^= 0x40;
            break;
        case 5:
            bytes.resize(bytes.size() / 2);
            break;
        case 6:
            bytes.insert(bytes.end(), 100, plan);
            break;
        case 7:
            bytes.clear();
            break;
        default:
            break;
    }
    return bytes;
}

void Harness::commit(int slot, InputScript &script, bool deferred) {
    bool derived = false;
    int content = 0;
    Request request = request_of(Kind::commit, script, &derived, &content);
    request.phase = uint64_t(script.next<uint8_t>()) * 8191 + script.next<uint8_t>();
    const Pipes pipes = pipes_of(script.next<uint8_t>());
    const uint8_t plan = script.next<uint8_t>();
    const std::string key = key_of(slot, request);

    int data[2], result[2];
    if (::pipe2(data, O_CLOEXEC) != 0 || ::pipe2(result, O_CLOEXEC) != 0) oracle_violated("pipe");
    UniqueFd data_read(data[0]), data_write(data[1]), result_read(result[0]), result_write(result[1]);
    UniqueFd memfd(::memfd_create("commit-data", MFD_CLOEXEC));
    const std::vector<uint8_t> &fuzzed = contents_[(content + 1) % kContents];
    if (!memfd.valid() || ::write(memfd.get(), fuzzed.data(), fuzzed.size()) != static_cast<ssize_t>(fuzzed.size())) {
        oracle_violated("memfd");
    }
    const int sent[3] = {pipes == Pipes::pipe_and_memfd ? memfd.get() : data_read.get(), result_write.get(),
                         memfd.get()};
    const size_t count = pipes == Pipes::one ? 1 : pipes == Pipes::three ? 3 : 2;
    send(slot, request, sent, count);
    data_read.reset();
    result_write.reset();
    if (pipes == Pipes::three) return expect_ended(slot);  // more descriptors than a request takes
    const Answer answer = receive(slot);
    if (answer.file.valid()) oracle_violated("a commit's reply carries a descriptor");
    const uint64_t content_offset = host::kEntryHeaderSpan + request.phase % host::kEntryHeaderSpan;
    const uint64_t reserved = entry_bytes(content_offset, request.size);
    if (commit_refused(slot, request, key, pipes == Pipes::two, reserved, answer)) {
        expect_nothing_gone(check_directory(), "a commit refused before it reserved removed an entry");
        return;
    }
    const bool accepted = answer.code() == Code::ok;
    if (accepted && answer.reply.content_offset != content_offset) oracle_violated("a commit at another offset");
    if (!accepted && answer.code() != Code::limit_exceeded) oracle_violated("a commit refused for no reason");
    check_eviction(directory_of(key), reserved, accepted);
    if (!accepted) {
        const auto claim = claims_.find(key);
        if (claim != claims_.end() && claim->second.slot == slot) claims_.erase(claim);
        return;
    }
    // Others of the tenant wait for this commit now.
    auto claim = claims_.find(key);
    if (claim != claims_.end() && claim->second.slot != slot) claims_.erase(claim);
    if (claims_.count(key) == 0) claims_[key] = ClaimModel{slot, slots_[slot].own, false};

    Slot &s = slots_[slot];
    s.pending = true;
    s.pending_steps = 0;
    s.commit.key = key;
    s.commit.data = std::move(data_write);
    s.commit.result = std::move(result_read);
    s.commit.bytes = bytes_to_send(contents_[content], request.size, plan);
    s.commit.size = request.size;
    s.commit.content_offset = content_offset;
    s.commit.reserved = reserved;
    s.commit.derived = derived;
    std::memcpy(s.commit.named.bytes, request.digest, sizeof(request.digest));
    if (!deferred) collect_commit(slot);
}

// Whether the commit was refused before it reserved anything, as it must be.
bool Harness::commit_refused(int slot, const Request &request, const std::string &key, bool fds_usable,
                             uint64_t reserved, const Answer &answer) {
    const auto refused = [&](Code code, uint32_t found, const char *what) {
        if (answer.code() != code || answer.reply.found != found) oracle_violated(what);
        return true;
    };
    if (slots_[slot].pending) return refused(Code::limit_exceeded, 0, "a second commit at once was not refused");
    if (!fds_usable) return refused(Code::bad_request, 0, "a commit without two pipes was not refused");
    if (request.size == 0) return refused(Code::bad_request, 0, "an empty commit was not refused");
    if (request.size > options_.max_bytes) return refused(Code::limit_exceeded, 0, "a commit past the limit");
    if (entries_.count(key) != 0) {
        return refused(Code::limit_exceeded, store_channel::kFound, "a commit of a named entry was not refused");
    }
    for (const Slot &other : slots_) {
        if (other.pending && other.commit.key == key) {
            return refused(Code::limit_exceeded, store_channel::kInFlight, "a commit of one in flight was not refused");
        }
    }
    if (answer.reply.found != store_channel::kNotFound) oracle_violated("a commit says found or in flight for none");
    if (reserved > options_.max_bytes) {
        // Its pages past the limit: refused before any eviction, its claim let go.
        const auto claim = claims_.find(key);
        if (claim != claims_.end() && claim->second.slot == slot) claims_.erase(claim);
        return refused(Code::limit_exceeded, 0, "a commit whose pages pass the limit was not refused");
    }
    return false;
}

std::map<std::string, uint64_t> Harness::held_by_directory() const {
    std::map<std::string, uint64_t> held;
    for (const auto &[key, entry] : entries_) held[directory_of(key)] += entry.bytes;
    return held;
}

uint64_t Harness::named_bytes() const {
    uint64_t bytes = 0;
    for (const auto &[key, entry] : entries_) bytes += entry.bytes;
    return bytes;
}

uint64_t Harness::reserved_bytes() const {
    uint64_t bytes = 0;
    for (const Slot &slot : slots_) bytes += slot.pending ? slot.commit.reserved : 0;
    return bytes;
}

// A commit that reserved (or found no room for) `reserved` bytes in `evictor`'s
// directory: what it evicted, it could.
void Harness::check_eviction(const std::string &evictor, uint64_t reserved, bool accepted) {
    const auto before = held_by_directory();
    const size_t tenants = before.size() + (before.count(evictor) == 0 ? 1 : 0);
    const uint64_t share = options_.max_bytes / tenants;
    const auto gone = check_directory(accepted ? 1 : 0);
    const auto after = held_by_directory();
    std::map<std::string, uint64_t> largest_gone;
    for (const auto &[key, entry] : gone) {
        const std::string owner = directory_of(key);
        if (owner == evictor) continue;
        if (before.at(owner) <= share) oracle_violated("a tenant within its share lost an entry to another's commit");
        largest_gone[owner] = std::max(largest_gone[owner], entry.bytes);
    }
    for (const auto &[owner, largest] : largest_gone) {
        const auto held = after.find(owner);
        if ((held == after.end() ? 0 : held->second) + largest <= share) {
            oracle_violated("a tenant lost more than what it held beyond its share");
        }
    }
    const uint64_t total = named_bytes() + reserved_bytes() + reserved;
    if (accepted && total > options_.max_bytes) oracle_violated("a commit was accepted past the limit");
    if (accepted) return;
    if (total <= options_.max_bytes) oracle_violated("a commit was refused for room there was");
    for (const auto &[key, entry] : entries_) {
        const std::string owner = directory_of(key);
        if (owner == evictor || after.at(owner) > share) {
            oracle_violated("a commit was refused for room with entries it could evict");
        }
    }
}

void Harness::collect_commit(int slot) {
    Slot &s = slots_[slot];
    PendingCommit commit = std::move(s.commit);
    s.pending = false;
    s.commit = PendingCommit{};
    for (size_t sent = 0; sent < commit.bytes.size();) {
        const ssize_t n = ::write(commit.data.get(), commit.bytes.data() + sent, commit.bytes.size() - sent);
        if (n <= 0) break;  // the owner took what it needs, and closed its end
        sent += static_cast<size_t>(n);
    }
    commit.data.reset();
    uint8_t named = 0xFF;
    if (poll_one(commit.result.get(), POLLIN, kResultMs) <= 0 || ::read(commit.result.get(), &named, 1) != 1) {
        oracle_violated("a commit's result never came");
    }
    const bool whole = commit.bytes.size() >= commit.size;
    const ContentDigest sent = digest_of(commit.bytes, commit.size);
    const bool should = whole && (commit.derived || sent == commit.named);
    if (named != (should ? store_channel::kNamed : store_channel::kNotNamed)) {
        oracle_violated(should ? "a commit of the right bytes was not named" : "a commit of wrong bytes was named");
    }
    claims_.erase(commit.key);
    if (should) {
        EntryModel &entry = entries_[commit.key];
        entry.bytes = commit.reserved;
        entry.size = commit.size;
        entry.content_offset = commit.content_offset;
        entry.content = sent;
        entry.derived = commit.derived;
    }
    expect_nothing_gone(check_directory(), "a commit's end removed an entry");
}

void Harness::waiters(int slot) {
    Request request;
    request.kind = static_cast<uint32_t>(Kind::waiters);
    send(slot, request, nullptr, 0);
    const Answer answer = receive(slot);
    uint32_t waited = 0;
    for (const auto &[key, claim] : claims_) waited += claim.slot == slot && claim.waited ? 1 : 0;
    if (answer.code() != Code::ok || answer.reply.found != waited || answer.file.valid()) {
        oracle_violated("waiters counts other than this worker's claims others waited for");
    }
}

void Harness::unknown(int slot, InputScript &script) {
    const uint8_t kind = script.next<uint8_t>();
    Request request;
    request.kind = kind < 128 ? static_cast<uint32_t>(Kind::identify) : kind == 128 ? 0u : 4u + (kind - 128u);
    request.identity_size = script.next<uint8_t>() * 3u;
    for (uint32_t i = 0; i < std::min<uint32_t>(request.identity_size, sizeof(request.identity)); ++i) {
        request.identity[i] = static_cast<char>('a' + i % 26);
    }
    send(slot, request, nullptr, 0);
    const Answer answer = receive(slot);
    if (answer.code() == Code::ok || answer.file.valid()) oracle_violated("an identify or unknown request answered");
    expect_nothing_gone(check_directory(), "a refused request removed an entry");
}

void Harness::end_channel(int slot, InputScript &script) {
    const uint8_t how = script.next<uint8_t>() % 3;
    Request request;
    request.kind = static_cast<uint32_t>(Kind::waiters);
    std::vector<uint8_t> longer(sizeof(request) + 8, 0);
    std::memcpy(longer.data(), &request, sizeof(request));
    const int fd = slots_[slot].channel.get();
    bool sent = true;
    if (how == 0) sent = store_channel::send_message(fd, &request, sizeof(request) - 1, nullptr, 0);
    if (how == 1) sent = store_channel::send_message(fd, longer.data(), longer.size(), nullptr, 0);
    if (how == 2) sent = ::shutdown(fd, SHUT_WR) == 0;  // the worker ends
    if (!sent) oracle_violated("the store's channel is gone");
    expect_ended(slot);
}

// The owner closes an ended channel's end once it forgot the channel (when it
// serves the next one): reconnects until the old end reads closed.
void Harness::expect_ended(int slot) {
    UniqueFd old = std::move(slots_[slot].channel);
    const auto deadline = Clock::now() + std::chrono::milliseconds(kResultMs);
    for (;;) {
        connect_slot(slot);
        if (poll_one(old.get(), POLLIN, 0) > 0) {
            char byte;
            if (::recv(old.get(), &byte, 1, MSG_DONTWAIT) == 0) break;
        }
        if (Clock::now() > deadline) oracle_violated("a channel did not end");
        (void)poll_one(old.get(), POLLIN, 5);
    }
    for (auto it = claims_.begin(); it != claims_.end();) {
        it = it->second.slot == slot ? claims_.erase(it) : std::next(it);
    }
    expect_nothing_gone(check_directory(), "a channel's end removed an entry");
}

// Bit rot or a crash: a header byte, a content byte, or the file's length.
void Harness::damage(InputScript &script) {
    const uint8_t which = script.next<uint8_t>();
    if (entries_.empty()) return;
    auto entry = std::next(entries_.begin(), static_cast<long>(which % entries_.size()));
    if (entry->second.damage != Damage::none) return;
    const std::string path = options_.directory + "/" + entry->first;
    // Entries are 0400 (ours: this process is the owner's); read-only again after.
    UniqueFd file(::chmod(path.c_str(), 0600) == 0 ? ::open(path.c_str(), O_RDWR | O_CLOEXEC) : -1);
    if (!file.valid() || ::fchmod(file.get(), 0400) != 0) oracle_violated("an entry cannot be damaged");
    const Damage damage = static_cast<Damage>(1 + (which / 64) % 3);
    uint8_t byte = 0;
    const off_t at = damage == Damage::header ? 0 : static_cast<off_t>(entry->second.content_offset);
    bool done = true;
    if (damage == Damage::truncated) {
        done = ::ftruncate(file.get(), static_cast<off_t>(entry->second.content_offset + entry->second.size - 1)) == 0;
    } else {
        done = ::pread(file.get(), &byte, 1, at) == 1;
        byte ^= 0x01;
        done = done && ::pwrite(file.get(), &byte, 1, at) == 1;
    }
    if (!done) oracle_violated("an entry cannot be damaged");
    entry->second.damage = damage;
    entry->second.checked = false;
    expect_nothing_gone(check_directory(), "an entry vanished");
}

void Harness::expect_nothing_gone(const std::vector<std::pair<std::string, EntryModel>> &gone, const char *what) {
    if (!gone.empty()) oracle_violated(what);
}

std::vector<std::pair<std::string, EntryModel>> Harness::check_directory(size_t accepted) {
    std::set<std::string> seen;
    size_t temporaries = 0, pending = accepted;
    uint64_t disk_bytes = 0;
    for (const Slot &slot : slots_) pending += slot.pending ? 1 : 0;
    for (const auto &part : std::filesystem::directory_iterator(options_.directory)) {
        const std::string tenant = part.path().filename();
        struct stat st{};
        if (::lstat(part.path().c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || (st.st_mode & 07777) != 0700 ||
            (tenant != "shared" && !(tenant.rfind("t-", 0) == 0 && is_hex(tenant, 2, 24)))) {
            oracle_violated("the store's directory holds something but tenant directories");
        }
        for (const auto &file : std::filesystem::directory_iterator(part.path())) {
            const std::string name = file.path().filename();
            if (::lstat(file.path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
                oracle_violated("a tenant's directory holds something but files");
            }
            disk_bytes += uint64_t(st.st_blocks) * 512;
            if (name.rfind(".new-", 0) == 0) {
                ++temporaries;
                continue;
            }
            const std::string key = tenant + "/" + name;
            const auto entry = entries_.find(key);
            if (entry == entries_.end()) oracle_violated("the store holds an entry nobody committed (or named)");
            seen.insert(key);
            if ((st.st_mode & 07777) != 0400) oracle_violated("an entry is not read-only");
            if (entry->second.damage != Damage::none || entry->second.checked) continue;
            UniqueFd fd(::open(file.path().c_str(), O_RDONLY | O_CLOEXEC));
            check_entry_file(key, entry->second, fd.get());
        }
    }
    if (temporaries > pending) oracle_violated("a half-written entry with no commit under way");
    if (disk_bytes > options_.max_bytes) oracle_violated("the store's files take more than its limit");
    std::vector<std::pair<std::string, EntryModel>> gone;
    for (auto it = entries_.begin(); it != entries_.end();) {
        if (seen.count(it->first) != 0) {
            ++it;
            continue;
        }
        gone.emplace_back(it->first, it->second);
        it = entries_.erase(it);
    }
    return gone;
}

void Harness::check_entry_file(const std::string &key, EntryModel &entry, int file) {
    EntryHeader header{};
    struct stat st{};
    if (file < 0 || ::fstat(file, &st) != 0 || ::pread(file, &header, sizeof(header), 0) != sizeof(header)) {
        oracle_violated("an entry cannot be read");
    }
    const bool derived = key.find("/r-") != std::string::npos;
    ContentDigest recorded;
    std::memcpy(recorded.bytes, header.digest, sizeof(recorded.bytes));
    if (std::memcmp(header.magic, kMagic, sizeof(kMagic)) != 0 ||
        header.check != XXH3_64bits(&header, offsetof(EntryHeader, check)) || header.size != entry.size ||
        header.content_offset != entry.content_offset || uint64_t(st.st_size) != entry.content_offset + entry.size ||
        derived != entry.derived || (!derived && key.substr(key.find('/') + 1) != recorded.hex())) {
        oracle_violated("an entry's header is not what was committed");
    }
    std::vector<uint8_t> bytes(entry.size);
    if (::pread(file, bytes.data(), bytes.size(), static_cast<off_t>(entry.content_offset)) !=
        static_cast<ssize_t>(bytes.size())) {
        oracle_violated("an entry's bytes cannot be read");
    }
    const ContentDigest content = digest_of(bytes, bytes.size());
    if (content != recorded || content != entry.content) oracle_violated("an entry's bytes are not its digest's");
    entry.checked = true;
}

void Harness::check_counts() {
    if (owner_->bytes_held() != named_bytes() + reserved_bytes()) {
        oracle_violated("the store counts other bytes than its entries and commits take");
    }
    if (owner_->bytes_held() > options_.max_bytes) oracle_violated("the store holds more than its limit");
}

void Harness::finish() {
    for (int slot = 0; slot < kSlots; ++slot) {
        if (slots_[slot].pending) collect_commit(slot);
    }
    check_counts();
    expect_nothing_gone(check_directory(), "an entry vanished at the end");
}

}  // namespace
}  // namespace ggml_remote::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    using namespace ggml_remote::fuzz;
    ggml_remote::host::store_channel::NoSigpipe no_sigpipe;
    InputScript script{data, size};
    Harness harness(script);
    while (!script.done()) harness.step(script);
    harness.finish();
    return 0;
}
