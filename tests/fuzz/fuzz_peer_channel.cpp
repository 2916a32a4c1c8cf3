// Fuzz target: the peer channel (host/common/peer_channel.h) as workers a guest took
// over speak it to the listener's PeerBroker. The input is a script of requests
// (enrol, leave, dial, take, offer, unknown kinds, messages of another size) from
// three worker channels, each with or without a descriptor (a TCP connection, a
// unix socket, a pipe, a listening, unconnected or UDP socket, a memfd); a take
// may be left waiting while other channels go on. A fresh broker per input may
// dial three loopback listeners the target owns; a fourth is off its allow-list.
//
// Oracles (a model of the groups, kept by the script's order):
// - an enrol, leave or offer succeeds exactly when the model says it may: an
//   offer only for a group some channel enrolled, to its rank, from a higher rank
//   of the group, once per enrolment, with a connected TCP socket;
// - a take answers a connection only to the channel that enrolled the group, and
//   only the connection offered for that (group, rank) in that enrolment, once (each
//   offered connection carries a tag that the target reads back); a take whose
//   connection had arrived gets it; only connected TCP sockets are handed on;
// - a dial reaches only an allowed listener, with the peer hello naming the
//   request's token and ranks, and hands the worker that very connection; an
//   allowed dial within every budget succeeds, and the dials of a session and of a
//   group never exceed their budgets (kDialBurstPerSession etc., peer_broker.h);
// - any other request with a descriptor, an unknown kind, is refused; a message of
//   another size or with two descriptors ends its channel, and only it;
// - every reply comes within seconds, with a terminated message and a known code,
//   and carries a descriptor exactly when a dial or take succeeded;
// - a refused connection is closed at once, and none outlives the broker.
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "fuzz_support.h"
#include "host/common/peer_channel.h"
#include "host/common/store_channel.h"
#include "host/services/peer_broker.h"
#include "transport/socket.h"

namespace ggml_remote::fuzz {
namespace {

using host::peer_channel::Kind;
using host::peer_channel::Reply;
using host::peer_channel::Request;
using Clock = std::chrono::steady_clock;
namespace store_channel = host::store_channel;

constexpr int kSlots = 3;               // worker channels at once
constexpr uint8_t kTokens = 4;          // group tokens the script names
constexpr int kAllowedServers = 3;      // --tensor-peer listeners: more dials than one server's budget
constexpr int kAnswerMs = 3000;         // a reply later than this (past a take's wait) is a hang
constexpr int kClosedMs = 2000;         // a connection the broker drops is closed within this
constexpr uint32_t kTakeWaitMs = 32;    // a take waits less than this...
constexpr uint32_t kTakeBudgetMs = 96;  // ...and all of an input's takes this much in all

// A loopback TCP listener, for the whole run.
struct Listener {
    Endpoint endpoint;
    UniqueFd fd;
    Listener() {
        if (!parse_endpoint("tcp://127.0.0.1:0", &endpoint).ok() || !listen_endpoint(&endpoint, &fd).ok()) {
            oracle_violated("cannot listen on loopback TCP");
        }
    }
    std::string address(const char *scheme = "tcp") const {
        return std::string(scheme) + "://127.0.0.1:" + std::to_string(endpoint.port);
    }
};

struct Listeners {
    Listener allowed[kAllowedServers];
    Listener forbidden;  // never on the broker's allow-list
    Listener offers;     // where the target makes the TCP connections it offers
};

Listeners &listeners() {
    static Listeners all;
    return all;
}

UniqueFd accept_within(int listening, int timeout_ms) {
    if (poll_one(listening, POLLIN, timeout_ms) <= 0) return UniqueFd();
    return UniqueFd(::accept4(listening, nullptr, nullptr, SOCK_CLOEXEC));
}

bool read_within(int fd, void *data, size_t size, int timeout_ms) {
    const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    auto *bytes = static_cast<uint8_t *>(data);
    for (size_t got = 0; got < size;) {
        if (poll_one(fd, POLLIN, ms_until(deadline)) <= 0) return false;
        const ssize_t n = ::recv(fd, bytes + got, size - got, MSG_DONTWAIT);
        if (n <= 0) return false;
        got += static_cast<size_t>(n);
    }
    return true;
}

// Whether the other end of `fd` was closed within `timeout_ms` (end of file, or a reset).
bool closed_within(int fd, int timeout_ms) {
    const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    for (;;) {
        if (poll_one(fd, POLLIN, ms_until(deadline)) <= 0) return false;
        char byte;
        const ssize_t n = ::recv(fd, &byte, 1, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) return true;
    }
}

// The port of a TCP socket's own end, or of its peer's; -1 when it has none.
int port_of(int fd, bool peer) {
    sockaddr_in address{};
    socklen_t length = sizeof(address);
    const int rc = peer ? ::getpeername(fd, reinterpret_cast<sockaddr *>(&address), &length)
                        : ::getsockname(fd, reinterpret_cast<sockaddr *>(&address), &length);
    return rc == 0 && address.sin_family == AF_INET ? ntohs(address.sin_port) : -1;
}
int own_port(int fd) { return port_of(fd, false); }
int peer_port(int fd) { return port_of(fd, true); }

PeerLinks::TokenId token_id(uint8_t token) {
    PeerLinks::TokenId id;
    id.fill(static_cast<uint8_t>(0xA0 + token));
    return id;
}

// A rank or a count: mostly small (a group has up to 16), sometimes huge.
uint32_t rank_of(uint8_t byte) { return byte < 240 ? byte % 18u : 0xFFFFFFFFu - (255u - byte); }

// What comes with a request.
enum class Descriptor : uint8_t { none, tcp, unix_socket, pipe, listening, unconnected, udp, memfd, count };

// A descriptor to send, and what the target keeps of it: the other end of a TCP
// connection (with the tag written into it) or of a unix socket pair.
struct Sent {
    UniqueFd fd, kept;
};

Sent make_descriptor(Descriptor kind, uint64_t tag) {
    Sent sent;
    switch (kind) {
        case Descriptor::none:
        case Descriptor::count:
            break;
        case Descriptor::tcp: {
            // What a peer's dial looks like to the worker that accepted it.
            if (!connect_endpoint(listeners().offers.endpoint, 2000, &sent.kept).ok()) {
                oracle_violated("cannot connect on loopback");
            }
            sent.fd = accept_within(listeners().offers.fd.get(), 2000);
            if (!sent.fd.valid()) oracle_violated("cannot accept on loopback");
            if (::send(sent.kept.get(), &tag, sizeof(tag), MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof(tag))) {
                oracle_violated("cannot write a tag");
            }
            break;
        }
        case Descriptor::unix_socket: {
            int pair[2];
            if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) oracle_violated("socketpair");
            sent.fd.reset(pair[0]);
            sent.kept.reset(pair[1]);
            break;
        }
        case Descriptor::pipe: {
            int ends[2];
            if (::pipe2(ends, O_CLOEXEC) != 0) oracle_violated("pipe");
            sent.fd.reset(ends[0]);
            sent.kept.reset(ends[1]);
            break;
        }
        case Descriptor::listening:
            sent.fd.reset(::fcntl(listeners().offers.fd.get(), F_DUPFD_CLOEXEC, 0));
            break;
        case Descriptor::unconnected:
            sent.fd.reset(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
            break;
        case Descriptor::udp:
            sent.fd.reset(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
            break;
        case Descriptor::memfd:
            sent.fd.reset(::memfd_create("not-a-connection", MFD_CLOEXEC));
            break;
    }
    if (kind != Descriptor::none && !sent.fd.valid()) oracle_violated("cannot make a descriptor");
    return sent;
}

// A group as the script made it: its owner (a slot), its place, the connections
// offered for it, by the rank that dialled, until taken: each offer's tag.
struct GroupModel {
    int owner = 0;
    uint32_t rank = 0, ranks = 0;
    std::vector<bool> offered;
    std::map<uint32_t, uint64_t> arrived;
};

struct Answer {
    Reply reply;
    UniqueFd connection;
    Code code() const { return static_cast<Code>(reply.code); }
};

// One worker's end of the broker's channel.
struct Slot {
    UniqueFd channel;
    Clock::time_point connected;
    int dials = 0;  // succeeded on this channel
    bool take_waiting = false;
    Request waiting_take;
    bool waiting_take_must_succeed = false;
};

class Harness {
  public:
    Harness() : started_(Clock::now()) {
        std::vector<Endpoint> peers;
        for (const Listener &listener : listeners().allowed) peers.push_back(listener.endpoint);
        broker_ = std::make_unique<host::PeerBroker>(std::move(peers));
        for (int i = 0; i < kSlots; ++i) connect_slot(i);
    }

    void step(InputScript &script);
    // Collects every waiting take, ends the broker, and checks that it kept nothing.
    void finish();

  private:
    void connect_slot(int slot);
    void send(int slot, const Request &request, int fd, size_t fd_count = 1);
    // The reply to the slot's request; `carries`: whether it may come with a
    // connection (a dial's or a take's), when it succeeded.
    Answer receive(int slot, uint32_t wait_ms, bool carries);
    Answer ask(int slot, const Request &request, int fd, bool carries = false) {
        send(slot, request, fd);
        return receive(slot, 0, carries);
    }
    // A reply that succeeded or failed with a request of another kind's descriptor:
    // no state changed, and the descriptor (a TCP connection's kept end) was closed.
    void expect_refused_with(const Answer &answer, Sent &sent);
    void collect_take(int slot);
    void check_taken(int slot, const Request &take, const Answer &answer, bool must_succeed);
    void enrol(int slot, InputScript &script);
    void leave(int slot, InputScript &script);
    void dial(int slot, InputScript &script);
    void take(int slot, InputScript &script);
    void offer(int slot, InputScript &script);
    void unknown(int slot, InputScript &script);
    void end_channel(int slot, InputScript &script);
    // The channel's groups are gone once the broker closed its end (it forgets them first).
    void expect_ended(int slot);
    void check_no_dial_arrived();

    Clock::time_point started_;
    std::unique_ptr<host::PeerBroker> broker_;
    Slot slots_[kSlots];
    std::map<uint8_t, GroupModel> groups_;
    int token_dials_[kTokens] = {};
    int server_dials_[kAllowedServers] = {};
    uint32_t take_budget_ms_ = kTakeBudgetMs;
    std::vector<UniqueFd> kept_;  // every TCP connection offered: the target's end
    uint64_t next_tag_ = 1;
};

void Harness::connect_slot(int slot) {
    slots_[slot] = Slot{};
    slots_[slot].connected = Clock::now();  // before the broker's channel starts its budget
    if (!broker_->connect(&slots_[slot].channel).ok()) oracle_violated("the broker gives no channel");
}

void Harness::send(int slot, const Request &request, int fd, size_t fd_count) {
    const int fds[2] = {fd, fd};
    if (!store_channel::send_message(slots_[slot].channel.get(), &request, sizeof(request), fds,
                                     fd >= 0 ? fd_count : 0)) {
        oracle_violated("the broker's channel is gone");
    }
}

Answer Harness::receive(int slot, uint32_t wait_ms, bool carries) {
    Answer answer;
    std::vector<UniqueFd> fds;
    if (!store_channel::receive_message(slots_[slot].channel.get(), &answer.reply, sizeof(answer.reply), &fds, 4,
                                        static_cast<int>(wait_ms) + kAnswerMs)) {
        oracle_violated("no reply in time (a hang, or a reply of another size)");
    }
    if (std::memchr(answer.reply.message, '\0', sizeof(answer.reply.message)) == nullptr) {
        oracle_violated("a reply's message is not terminated");
    }
    if (answer.reply.code < 0 || answer.reply.code > static_cast<int32_t>(Code::disconnected)) {
        oracle_violated("a reply's code is no protocol code");
    }
    if (fds.size() > 1) oracle_violated("a reply carries more than one descriptor");
    // GGML_REMOTE_FUZZ_VERBOSE=1: every reply (for checking seeds by hand).
    static const bool verbose = std::getenv("GGML_REMOTE_FUZZ_VERBOSE") != nullptr;
    if (verbose)
        std::fprintf(stderr, "channel %d: %d %s%s\n", slot, answer.reply.code, answer.reply.message,
                     fds.empty() ? "" : " (+ a descriptor)");
    if (!fds.empty()) answer.connection = std::move(fds.front());
    if (answer.connection.valid() && (answer.code() != Code::ok || !carries)) {
        oracle_violated("a reply carries a descriptor it should not");
    }
    return answer;
}

void Harness::expect_refused_with(const Answer &answer, Sent &sent) {
    if (answer.code() == Code::ok || answer.connection.valid()) {
        oracle_violated("a request other than an offer came with a descriptor and was answered");
    }
    sent.fd.reset();
    if (sent.kept.valid() && !closed_within(sent.kept.get(), kClosedMs)) {
        oracle_violated("the broker kept a refused connection open");
    }
}

void Harness::step(InputScript &script) {
    const uint8_t op = script.next<uint8_t>();
    const int slot = (op / 8) % kSlots;
    if (slots_[slot].take_waiting) collect_take(slot);
    switch (op % 8) {
        case 0:
            return enrol(slot, script);
        case 1:
            return leave(slot, script);
        case 2:
            return dial(slot, script);
        case 3:
            return take(slot, script);
        case 4:
            return offer(slot, script);
        case 5:
            return unknown(slot, script);
        case 6:
            return end_channel(slot, script);
        default:
            return offer(slot, script);  // the step that matters most: more often
    }
}

Request request_of(Kind kind, uint8_t token) {
    Request request;
    request.kind = static_cast<uint32_t>(kind);
    const PeerLinks::TokenId id = token_id(token);
    std::memcpy(request.token_id, id.data(), id.size());
    return request;
}

Descriptor descriptor_of(uint8_t byte, bool offer) {
    const uint8_t count = static_cast<uint8_t>(Descriptor::count);
    // An offer's first choice is a TCP connection; any other request's, none.
    return static_cast<Descriptor>((byte + (offer ? 1 : 0)) % count);
}

void Harness::enrol(int slot, InputScript &script) {
    const uint8_t token = script.next<uint8_t>() % kTokens;
    Request request = request_of(Kind::enrol, token);
    request.rank = rank_of(script.next<uint8_t>());
    request.ranks = rank_of(script.next<uint8_t>());
    Sent sent = make_descriptor(descriptor_of(script.next<uint8_t>(), false), 0);
    const Answer answer = ask(slot, request, sent.fd.get());
    if (sent.fd.valid()) return expect_refused_with(answer, sent);

    int enrolled = 0;
    for (const auto &[id, group] : groups_) enrolled += group.owner == slot ? 1 : 0;
    const bool may = request.ranks >= 2 && request.ranks <= PeerExchange::kMaxRanks && request.rank < request.ranks &&
                     enrolled < static_cast<int>(host::peer_channel::kMaxEnrolled) && groups_.count(token) == 0;
    if ((answer.code() == Code::ok) != may) oracle_violated("an enrol was answered against the model");
    if (!may) return;
    GroupModel &group = groups_[token];
    group.owner = slot;
    group.rank = request.rank;
    group.ranks = request.ranks;
    group.offered.assign(request.ranks, false);
}

void Harness::leave(int slot, InputScript &script) {
    const uint8_t token = script.next<uint8_t>() % kTokens;
    Sent sent = make_descriptor(descriptor_of(script.next<uint8_t>(), false), 0);
    const Answer answer = ask(slot, request_of(Kind::leave, token), sent.fd.get());
    if (sent.fd.valid()) return expect_refused_with(answer, sent);
    const auto group = groups_.find(token);
    const bool may = group != groups_.end() && group->second.owner == slot;
    if ((answer.code() == Code::ok) != may) oracle_violated("a leave was answered against the model");
    if (may) groups_.erase(group);
}

void Harness::dial(int slot, InputScript &script) {
    const uint8_t token = script.next<uint8_t>() % kTokens;
    Request request = request_of(Kind::dial, token);
    request.rank = rank_of(script.next<uint8_t>());
    request.other_rank = rank_of(script.next<uint8_t>());
    const uint8_t choice = script.next<uint8_t>();
    const Listener &server = listeners().allowed[(choice / 8) % kAllowedServers];
    std::string text;
    bool terminated = true;
    switch (choice % 8) {
        case 0:
        case 1:
        case 2:
            text = server.address();
            break;
        case 3:
            text = server.address("tls");  // the same server: dialled over TCP
            break;
        case 4:
            text = listeners().forbidden.address();
            break;
        case 5:
            text = "unix:/tmp/ggml-remote-fuzz-peer.sock";
            break;
        case 6:
            text = "tcp://localhost:" + std::to_string(server.endpoint.port);  // not the allowed name
            break;
        default: {
            static const char *const prefixes[] = {"tcp://127.0.0.1:", "tls://", "tcp://", ""};
            text = prefixes[(choice / 8) % 4];
            const uint8_t length = script.next<uint8_t>();
            for (uint8_t i = 0; i < length % 32; ++i) text.push_back(static_cast<char>(script.next<uint8_t>()));
            terminated = length < 224;
        }
    }
    std::snprintf(request.endpoint, sizeof(request.endpoint), "%s", text.c_str());
    if (!terminated) std::memset(request.endpoint, 'a', sizeof(request.endpoint));
    Sent sent = make_descriptor(descriptor_of(script.next<uint8_t>(), false), 0);

    // Which allowed server the text names, as the broker must read it (-1: none).
    int allowed = -1;
    Endpoint named;
    const std::string as_sent(request.endpoint, strnlen(request.endpoint, sizeof(request.endpoint)));
    if (terminated && parse_endpoint(as_sent, &named).ok() &&
        (named.kind == Endpoint::Kind::tcp || named.kind == Endpoint::Kind::tls)) {
        for (int i = 0; i < kAllowedServers; ++i) {
            const Endpoint &peer = listeners().allowed[i].endpoint;
            if (peer.host == named.host && peer.port == named.port) allowed = i;
        }
    }
    // Past a server's burst a dial waits its turn (a quarter of a second each): not here.
    if (allowed >= 0 && server_dials_[allowed] >= static_cast<int>(host::kDialBurstPerServer)) return;

    const Answer answer = ask(slot, request, sent.fd.get(), true);
    if (sent.fd.valid()) {
        expect_refused_with(answer, sent);
        return check_no_dial_arrived();
    }
    Slot &dialler = slots_[slot];
    const bool within_budgets = dialler.dials < static_cast<int>(host::kDialBurstPerSession) &&
                                token_dials_[token] < static_cast<int>(host::kDialBurstPerGroup);
    if (answer.code() != Code::ok) {
        if (allowed >= 0 && within_budgets) oracle_violated("an allowed dial within its budgets was refused");
        return check_no_dial_arrived();
    }
    if (allowed < 0) oracle_violated("a dial off the allow-list succeeded");
    if (!answer.connection.valid()) oracle_violated("a dial succeeded without a connection");
    ++dialler.dials;
    ++token_dials_[token];
    ++server_dials_[allowed];
    const auto now = Clock::now();
    const double session_s = std::chrono::duration<double>(now - dialler.connected).count();
    const double broker_s = std::chrono::duration<double>(now - started_).count();
    if (dialler.dials > host::kDialBurstPerSession + session_s * host::kDialsPerSecondPerSession) {
        oracle_violated("a session dialled past its budget");
    }
    if (token_dials_[token] > host::kDialBurstPerGroup + broker_s * host::kDialsPerSecondPerGroup) {
        oracle_violated("a group dialled past its budget");
    }

    const Listener &dialled = listeners().allowed[allowed];
    const UniqueFd accepted = accept_within(dialled.fd.get(), 2000);
    if (!accepted.valid()) oracle_violated("a dial's connection never reached its server");
    if (!expect_connected_tcp(answer.connection.get()).ok()) oracle_violated("a dial handed on no TCP connection");
    if (peer_port(answer.connection.get()) != dialled.endpoint.port ||
        own_port(answer.connection.get()) != peer_port(accepted.get())) {
        oracle_violated("a dial handed on another connection than the one it made");
    }
    PeerLinks::Hello hello{};
    if (!read_within(accepted.get(), &hello, sizeof(hello), 2000)) oracle_violated("a dial sent no peer hello");
    if (std::memcmp(hello.magic, PeerLinks::kHelloMagic.data(), sizeof(hello.magic)) != 0 ||
        std::memcmp(hello.token_id, request.token_id, sizeof(hello.token_id)) != 0 || hello.from_rank != request.rank ||
        hello.to_rank != request.other_rank) {
        oracle_violated("a dial's peer hello does not name its request");
    }
    check_no_dial_arrived();
}

void Harness::check_no_dial_arrived() {
    for (const Listener &listener : listeners().allowed) {
        if (poll_one(listener.fd.get(), POLLIN, 0) != 0) oracle_violated("a connection came that no dial answered");
    }
    if (poll_one(listeners().forbidden.fd.get(), POLLIN, 0) != 0) {
        oracle_violated("the broker dialled a server off its allow-list");
    }
}

void Harness::take(int slot, InputScript &script) {
    const uint8_t token = script.next<uint8_t>() % kTokens;
    Request request = request_of(Kind::take, token);
    request.other_rank = rank_of(script.next<uint8_t>());
    const uint8_t wait = script.next<uint8_t>();
    request.timeout_ms = std::min<uint32_t>(wait % kTakeWaitMs, take_budget_ms_);
    take_budget_ms_ -= request.timeout_ms;
    Sent sent = make_descriptor(descriptor_of(script.next<uint8_t>(), false), 0);
    send(slot, request, sent.fd.get());
    const auto group = groups_.find(token);
    const bool must_succeed = !sent.fd.valid() && group != groups_.end() && group->second.owner == slot &&
                              group->second.arrived.count(request.other_rank) != 0;
    if (sent.fd.valid() || (wait & 0x80) == 0) {
        const Answer answer = receive(slot, request.timeout_ms, true);
        if (sent.fd.valid()) return expect_refused_with(answer, sent);
        return check_taken(slot, request, answer, must_succeed);
    }
    // It waits on the broker's thread while the other channels go on.
    Slot &taker = slots_[slot];
    taker.take_waiting = true;
    taker.waiting_take = request;
    taker.waiting_take_must_succeed = must_succeed;
}

void Harness::collect_take(int slot) {
    Slot &taker = slots_[slot];
    taker.take_waiting = false;
    const Answer answer = receive(slot, taker.waiting_take.timeout_ms, true);
    check_taken(slot, taker.waiting_take, answer, taker.waiting_take_must_succeed);
}

void Harness::check_taken(int slot, const Request &take, const Answer &answer, bool must_succeed) {
    if (answer.code() != Code::ok) {
        if (must_succeed) oracle_violated("a take did not get the connection that had arrived");
        return;
    }
    if (!answer.connection.valid()) oracle_violated("a take succeeded without a connection");
    if (!expect_connected_tcp(answer.connection.get()).ok()) oracle_violated("a take handed on no TCP connection");
    uint64_t tag = 0;
    if (!read_within(answer.connection.get(), &tag, sizeof(tag), 2000)) {
        oracle_violated("a take handed on a connection the target never offered");
    }
    const uint8_t token = static_cast<uint8_t>(take.token_id[0] - 0xA0);
    const auto group = groups_.find(token);
    if (token >= kTokens || group == groups_.end() || group->second.owner != slot) {
        oracle_violated("a take answered a connection to a channel that did not enrol the group");
    }
    const auto arrived = group->second.arrived.find(take.other_rank);
    if (arrived == group->second.arrived.end() || arrived->second != tag) {
        oracle_violated("a take answered a connection not offered for that group and rank, or twice");
    }
    group->second.arrived.erase(arrived);
}

void Harness::offer(int slot, InputScript &script) {
    const uint8_t token = script.next<uint8_t>() % kTokens;
    Request request = request_of(Kind::offer, token);
    request.rank = rank_of(script.next<uint8_t>());
    request.other_rank = rank_of(script.next<uint8_t>());
    const Descriptor kind = descriptor_of(script.next<uint8_t>(), true);
    const uint64_t tag = next_tag_++;
    Sent sent = make_descriptor(kind, tag);
    const bool two = kind != Descriptor::none && (script.next<uint8_t>() & 1) != 0;
    send(slot, request, sent.fd.get(), two ? 2 : 1);
    sent.fd.reset();                     // the broker's copy, if any, is all there is now
    if (two) return expect_ended(slot);  // a message with two descriptors ends its channel
    const Answer answer = receive(slot, 0, false);

    auto group = groups_.find(token);
    const bool may = kind == Descriptor::tcp && group != groups_.end() && request.rank == group->second.rank &&
                     request.other_rank > group->second.rank && request.other_rank < group->second.ranks &&
                     !group->second.offered[request.other_rank];
    if ((answer.code() == Code::ok) != may) oracle_violated("an offer was answered against the model");
    if (!may) {
        if (sent.kept.valid() && !closed_within(sent.kept.get(), kClosedMs)) {
            oracle_violated("the broker kept a refused connection open");
        }
        return;
    }
    group->second.offered[request.other_rank] = true;
    group->second.arrived[request.other_rank] = tag;
    kept_.push_back(std::move(sent.kept));
}

void Harness::unknown(int slot, InputScript &script) {
    const uint8_t token = script.next<uint8_t>() % kTokens;
    const uint8_t kind = script.next<uint8_t>();
    Request request = request_of(static_cast<Kind>(kind == 0 ? 0u : 5u + kind), token);
    const Answer answer = ask(slot, request, -1);
    if (answer.code() == Code::ok || answer.connection.valid()) oracle_violated("an unknown request was answered");
}

void Harness::end_channel(int slot, InputScript &script) {
    const uint8_t how = script.next<uint8_t>() % 3;
    Request request = request_of(Kind::enrol, 0);
    request.ranks = 2;
    std::vector<uint8_t> longer(sizeof(request) + 8, 0);
    std::memcpy(longer.data(), &request, sizeof(request));
    const int fd = slots_[slot].channel.get();
    bool sent = true;
    if (how == 0) sent = store_channel::send_message(fd, &request, sizeof(request) - 1, nullptr, 0);
    if (how == 1) sent = store_channel::send_message(fd, longer.data(), longer.size(), nullptr, 0);
    if (how == 2) sent = ::shutdown(fd, SHUT_WR) == 0;  // the worker ends
    if (!sent) oracle_violated("the broker's channel is gone");
    expect_ended(slot);
}

void Harness::expect_ended(int slot) {
    if (!closed_within(slots_[slot].channel.get(), kAnswerMs)) oracle_violated("a channel did not end");
    for (auto it = groups_.begin(); it != groups_.end();) {
        it = it->second.owner == slot ? groups_.erase(it) : std::next(it);
    }
    connect_slot(slot);
}

void Harness::finish() {
    for (int slot = 0; slot < kSlots; ++slot) {
        if (slots_[slot].take_waiting) collect_take(slot);
    }
    broker_.reset();
    for (const UniqueFd &kept : kept_) {
        if (!closed_within(kept.get(), kClosedMs)) oracle_violated("a connection outlived the broker");
    }
    check_no_dial_arrived();
}

// Connections a failed input may have left in the listeners' queues.
void drain_listeners() {
    for (const Listener &listener : listeners().allowed) {
        while (accept_within(listener.fd.get(), 0).valid()) {
        }
    }
    while (accept_within(listeners().forbidden.fd.get(), 0).valid()) {
    }
}

}  // namespace
}  // namespace ggml_remote::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    using namespace ggml_remote::fuzz;
    drain_listeners();
    ggml_remote::host::store_channel::NoSigpipe no_sigpipe;
    Harness harness;
    InputScript script{data, size};
    while (!script.done()) harness.step(script);
    harness.finish();
    return 0;
}
