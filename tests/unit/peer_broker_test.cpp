// PeerBroker: the listener's side of tensor-parallel links between servers,
// driven through worker ends of its channel as a worker a guest took over would
// drive it. Every request is hostile input: only the session that enrolled a
// group takes its connections, only for ranks it awaits, once; only endpoints
// of --tensor-peer are dialled.
#include "host/services/peer_broker.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "host/common/store_channel.h"
#include "transport/socket.h"

namespace ggml_remote {
namespace {

// The fixture takes the name of the class under test, which is Broker here.
using Broker = host::PeerBroker;
namespace store_channel = host::store_channel;
namespace peer_channel = host::peer_channel;

using namespace std::chrono_literals;
using peer_channel::Kind;
using peer_channel::Reply;
using peer_channel::Request;
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

constexpr int kAnswerMs = 5000;

PeerLinks::TokenId token_id(uint8_t byte) {
    PeerLinks::TokenId id;
    id.fill(byte);
    return id;
}

Request request_of(Kind kind, const PeerLinks::TokenId &id) {
    Request request;
    request.kind = static_cast<uint32_t>(kind);
    std::memcpy(request.token_id, id.data(), id.size());
    return request;
}

Request enrol_request(const PeerLinks::TokenId &id, uint32_t rank, uint32_t ranks) {
    Request request = request_of(Kind::enrol, id);
    request.rank = rank;
    request.ranks = ranks;
    return request;
}

// An offer of a connection that rank `from` dialled to rank `to`.
Request offer_request(const PeerLinks::TokenId &id, uint32_t to, uint32_t from) {
    Request request = request_of(Kind::offer, id);
    request.rank = to;
    request.other_rank = from;
    return request;
}

Request take_request(const PeerLinks::TokenId &id, uint32_t from, uint32_t timeout_ms) {
    Request request = request_of(Kind::take, id);
    request.other_rank = from;
    request.timeout_ms = timeout_ms;
    return request;
}

Request dial_request(const PeerLinks::TokenId &id, uint32_t rank, uint32_t to, const std::string &endpoint) {
    Request request = request_of(Kind::dial, id);
    request.rank = rank;
    request.other_rank = to;
    std::snprintf(request.endpoint, sizeof(request.endpoint), "%s", endpoint.c_str());
    return request;
}

std::pair<UniqueFd, UniqueFd> stream_pair() {
    int fds[2] = {-1, -1};
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
    return {UniqueFd(fds[0]), UniqueFd(fds[1])};
}

// A loopback TCP server the tests dial, or connect to for a peer's connection.
struct TcpServer {
    Endpoint endpoint;
    UniqueFd listening;
    TcpServer() {
        EXPECT_TRUE(parse_endpoint("tcp://127.0.0.1:0", &endpoint).ok());
        EXPECT_TRUE(listen_endpoint(&endpoint, &listening).ok());
    }
    std::string address() const { return "tcp://127.0.0.1:" + std::to_string(endpoint.port); }
};

// Both ends of a loopback TCP connection: what a peer server's dial looks like
// to the worker that accepted it.
std::pair<UniqueFd, UniqueFd> tcp_pair() {
    static TcpServer server;
    UniqueFd dialled;
    EXPECT_TRUE(connect_endpoint(server.endpoint, 2000, &dialled).ok());
    UniqueFd accepted(::accept4(server.listening.get(), nullptr, nullptr, SOCK_CLOEXEC));
    EXPECT_TRUE(accepted.valid());
    return {std::move(accepted), std::move(dialled)};
}

// Whether the other end of `fd` was closed (by the broker): POLLHUP or EOF soon.
bool peer_closed(int fd) {
    if (poll_one(fd, POLLIN, 2000) <= 0) return false;
    char byte = 0;
    return ::recv(fd, &byte, 1, MSG_DONTWAIT) == 0;
}

// A reply, or a failure to get one (the broker ended the channel).
struct Answer {
    bool answered = false;
    Reply reply;
    UniqueFd connection;

    Code code() const { return static_cast<Code>(reply.code); }
    std::string message() const { return std::string(reply.message, strnlen(reply.message, sizeof(reply.message))); }
};

// One worker's end of the broker's channel.
class Worker {
  public:
    explicit Worker(Broker &broker) { EXPECT_TRUE(broker.connect(&channel_).ok()); }

    Answer ask(const Request &request, int offered_fd = -1, int timeout_ms = kAnswerMs) {
        store_channel::NoSigpipe no_sigpipe;
        Answer answer;
        if (!store_channel::send_message(channel_.get(), &request, sizeof(request), &offered_fd,
                                         offered_fd >= 0 ? 1 : 0)) {
            return answer;
        }
        std::vector<UniqueFd> fds;
        answer.answered =
            store_channel::receive_message(channel_.get(), &answer.reply, sizeof(answer.reply), &fds, 1, timeout_ms);
        if (!fds.empty()) answer.connection = std::move(fds.front());
        return answer;
    }

    // Offers one end of a new TCP connection, closing our copy of it; the other end.
    UniqueFd offer(const Request &request, Answer *answer) {
        auto [offered, kept] = tcp_pair();
        *answer = ask(request, offered.get());
        return std::move(kept);
    }

    Code offer_code(const Request &request) {
        Answer answer;
        UniqueFd kept = offer(request, &answer);
        EXPECT_TRUE(answer.answered);
        return answer.code();
    }

    int fd() const { return channel_.get(); }
    void close() { channel_.reset(); }

  private:
    UniqueFd channel_;
};

class PeerBroker : public ::testing::Test {
  protected:
    Broker broker{{}};
};

TEST_F(PeerBroker, ATokenIsEnrolledByOneChannelOnly) {
    Worker first(broker), second(broker);
    const Answer enrolled = first.ask(enrol_request(token_id(1), 0, 2));
    ASSERT_TRUE(enrolled.answered);
    EXPECT_EQ(enrolled.code(), Code::ok) << enrolled.message();
    const Answer again = second.ask(enrol_request(token_id(1), 1, 2));
    ASSERT_TRUE(again.answered);
    EXPECT_EQ(again.code(), Code::bad_request);
    EXPECT_THAT(again.message(), HasSubstr("another session"));
    EXPECT_EQ(first.ask(enrol_request(token_id(1), 0, 2)).code(), Code::bad_request) << "nor twice by its owner";
    EXPECT_EQ(second.ask(enrol_request(token_id(2), 1, 2)).code(), Code::ok) << "another token is free";
}

TEST_F(PeerBroker, AChannelEnrolsAFixedNumberOfGroups) {
    Worker worker(broker), other(broker);
    for (uint32_t i = 0; i < peer_channel::kMaxEnrolled; ++i) {
        const Answer answer = worker.ask(enrol_request(token_id(static_cast<uint8_t>(10 + i)), 0, 2));
        ASSERT_EQ(answer.code(), Code::ok) << i << ": " << answer.message();
    }
    const Answer over = worker.ask(enrol_request(token_id(99), 0, 2));
    ASSERT_TRUE(over.answered);
    EXPECT_EQ(over.code(), Code::limit_exceeded);
    EXPECT_EQ(other.ask(enrol_request(token_id(99), 0, 2)).code(), Code::ok) << "the limit is per channel";
    EXPECT_EQ(worker.ask(request_of(Kind::leave, token_id(10))).code(), Code::ok);
    EXPECT_EQ(worker.ask(enrol_request(token_id(98), 0, 2)).code(), Code::ok) << "a leave frees a place";
}

TEST_F(PeerBroker, AnEnrolmentOfNoPlaceInAGroupIsRefused) {
    Worker worker(broker);
    EXPECT_EQ(worker.ask(enrol_request(token_id(1), 0, 1)).code(), Code::bad_request) << "alone";
    EXPECT_EQ(worker.ask(enrol_request(token_id(1), 0, 0)).code(), Code::bad_request) << "no ranks";
    EXPECT_EQ(worker.ask(enrol_request(token_id(1), 2, 2)).code(), Code::bad_request) << "rank past the group";
    EXPECT_EQ(worker.ask(enrol_request(token_id(1), 0xFFFFFFFFu, 2)).code(), Code::bad_request);
    EXPECT_EQ(worker.ask(enrol_request(token_id(1), 0, PeerExchange::kMaxRanks + 1)).code(), Code::bad_request)
        << "more ranks than a group has";
    EXPECT_EQ(worker.ask(enrol_request(token_id(1), 0, 0xFFFFFFFFu)).code(), Code::bad_request);
    EXPECT_EQ(worker.ask(enrol_request(token_id(1), 1, 2)).code(), Code::ok) << "nothing was enrolled";
}

TEST_F(PeerBroker, AnOfferForAGroupNobodyEnrolledIsRefusedAndItsConnectionClosed) {
    Worker dialled_in(broker);
    Answer answer;
    UniqueFd kept = dialled_in.offer(offer_request(token_id(3), 0, 1), &answer);
    ASSERT_TRUE(answer.answered);
    EXPECT_EQ(answer.code(), Code::not_found) << answer.message();
    EXPECT_FALSE(answer.connection.valid());
    EXPECT_TRUE(peer_closed(kept.get())) << "the broker keeps no refused connection open";
}

TEST_F(PeerBroker, AnOfferOfARankTheGroupDoesNotAwaitIsRefused) {
    Worker owner(broker), dialled_in(broker);
    ASSERT_EQ(owner.ask(enrol_request(token_id(4), 1, 4)).code(), Code::ok);
    EXPECT_EQ(dialled_in.offer_code(offer_request(token_id(4), 0, 2)), Code::bad_request) << "to another rank";
    EXPECT_EQ(dialled_in.offer_code(offer_request(token_id(4), 2, 3)), Code::bad_request) << "to another rank";
    EXPECT_EQ(dialled_in.offer_code(offer_request(token_id(4), 1, 1)), Code::bad_request) << "from itself";
    EXPECT_EQ(dialled_in.offer_code(offer_request(token_id(4), 1, 0)), Code::bad_request) << "a lower rank dials out";
    EXPECT_EQ(dialled_in.offer_code(offer_request(token_id(4), 1, 4)), Code::bad_request) << "past the group";
    EXPECT_EQ(dialled_in.offer_code(offer_request(token_id(4), 1, 0xFFFFFFFFu)), Code::bad_request);

    Answer refused;
    UniqueFd kept = dialled_in.offer(offer_request(token_id(4), 1, 0), &refused);
    EXPECT_EQ(refused.code(), Code::bad_request);
    EXPECT_TRUE(peer_closed(kept.get()));

    EXPECT_EQ(dialled_in.offer_code(offer_request(token_id(4), 1, 2)), Code::ok);
    Answer twice;
    UniqueFd second = dialled_in.offer(offer_request(token_id(4), 1, 2), &twice);
    EXPECT_EQ(twice.code(), Code::bad_request) << "each rank dials in once";
    EXPECT_TRUE(peer_closed(second.get()));
    const Answer taken = owner.ask(take_request(token_id(4), 2, 1000));
    EXPECT_EQ(taken.code(), Code::ok) << taken.message();
    EXPECT_EQ(dialled_in.offer_code(offer_request(token_id(4), 1, 2)), Code::bad_request) << "nor once taken";
}

TEST_F(PeerBroker, AnOfferWithoutAConnectionOrAnotherRequestWithOneIsRefused) {
    Worker owner(broker), other(broker);
    ASSERT_EQ(owner.ask(enrol_request(token_id(5), 0, 2)).code(), Code::ok);
    EXPECT_EQ(other.ask(offer_request(token_id(5), 0, 1)).code(), Code::bad_request) << "no connection";
    auto [offered, kept] = stream_pair();
    const Answer enrol = other.ask(enrol_request(token_id(6), 0, 2), offered.get());
    EXPECT_EQ(enrol.code(), Code::bad_request);
    offered.reset();
    EXPECT_TRUE(peer_closed(kept.get()));
    EXPECT_EQ(other.ask(request_of(static_cast<Kind>(77), token_id(5))).code(), Code::bad_request) << "no such kind";
    EXPECT_EQ(other.ask(request_of(Kind::leave, token_id(5))).code(), Code::not_found) << "not its group";
    EXPECT_EQ(other.offer_code(offer_request(token_id(5), 0, 1)), Code::ok) << "the group is still there";
}

TEST_F(PeerBroker, OnlyTheEnrollingChannelTakesAConnection) {
    Worker owner(broker), stranger(broker);
    ASSERT_EQ(owner.ask(enrol_request(token_id(7), 0, 3)).code(), Code::ok);
    ASSERT_EQ(stranger.offer_code(offer_request(token_id(7), 0, 1)), Code::ok);
    const Answer stolen = stranger.ask(take_request(token_id(7), 1, 100));
    ASSERT_TRUE(stolen.answered);
    EXPECT_EQ(stolen.code(), Code::not_found);
    EXPECT_FALSE(stolen.connection.valid());
    EXPECT_EQ(stranger.ask(take_request(token_id(8), 1, 100)).code(), Code::not_found) << "nobody's group";
    EXPECT_EQ(owner.ask(take_request(token_id(7), 0, 100)).code(), Code::bad_request) << "its own rank";
    EXPECT_EQ(owner.ask(take_request(token_id(7), 3, 100)).code(), Code::bad_request) << "past the group";
    const Answer taken = owner.ask(take_request(token_id(7), 1, 100));
    EXPECT_EQ(taken.code(), Code::ok) << "the stranger took nothing: " << taken.message();
}

TEST_F(PeerBroker, ATakeOfALowerRankIsRefused) {
    Worker owner(broker);
    ASSERT_EQ(owner.ask(enrol_request(token_id(9), 2, 4)).code(), Code::ok);
    const Answer lower = owner.ask(take_request(token_id(9), 1, 100));
    EXPECT_EQ(lower.code(), Code::bad_request);
    EXPECT_THAT(lower.message(), HasSubstr("does not dial in"));
}

TEST_F(PeerBroker, ATakeWithNothingOfferedEndsAtItsTimeout) {
    Worker owner(broker);
    ASSERT_EQ(owner.ask(enrol_request(token_id(11), 0, 2)).code(), Code::ok);
    const auto start = Clock::now();
    const Answer answer = owner.ask(take_request(token_id(11), 1, 200));
    const auto took = Clock::now() - start;
    ASSERT_TRUE(answer.answered);
    EXPECT_EQ(answer.code(), Code::disconnected);
    EXPECT_THAT(answer.message(), HasSubstr("rank 1 did not connect within 200 ms"));
    EXPECT_FALSE(answer.connection.valid());
    EXPECT_GE(took, 190ms);
    EXPECT_LT(took, 1500ms);
}

TEST_F(PeerBroker, AWaitingTakeGetsAConnectionOfferedMeanwhile) {
    Worker owner(broker);
    ASSERT_EQ(owner.ask(enrol_request(token_id(12), 0, 2)).code(), Code::ok);
    // The take is sent, not answered: it waits (longer than a take may) on the broker's thread.
    Request take = take_request(token_id(12), 1, 0xFFFFFFFFu);
    store_channel::NoSigpipe no_sigpipe;
    ASSERT_TRUE(store_channel::send_message(owner.fd(), &take, sizeof(take), nullptr, 0));
    Worker dialled_in(broker);
    Answer offered;
    UniqueFd kept = dialled_in.offer(offer_request(token_id(12), 0, 1), &offered);
    ASSERT_EQ(offered.code(), Code::ok);
    Reply reply;
    std::vector<UniqueFd> fds;
    ASSERT_TRUE(store_channel::receive_message(owner.fd(), &reply, sizeof(reply), &fds, 1, kAnswerMs));
    EXPECT_EQ(reply.code, 0) << reply.message;
    EXPECT_EQ(fds.size(), 1u) << "a waiting take gets a connection offered meanwhile";
}

TEST_F(PeerBroker, ATakeGetsTheOfferedConnectionOnce) {
    Worker owner(broker), dialled_in(broker);
    ASSERT_EQ(owner.ask(enrol_request(token_id(13), 0, 2)).code(), Code::ok);
    Answer offered;
    UniqueFd kept = dialled_in.offer(offer_request(token_id(13), 0, 1), &offered);
    ASSERT_EQ(offered.code(), Code::ok) << offered.message();
    EXPECT_FALSE(offered.connection.valid());
    Answer taken = owner.ask(take_request(token_id(13), 1, 1000));
    ASSERT_EQ(taken.code(), Code::ok) << taken.message();
    ASSERT_TRUE(taken.connection.valid());
    ASSERT_TRUE(write_fully(kept.get(), "peer", 4));
    char read[4] = {};
    ASSERT_EQ(::recv(taken.connection.get(), read, sizeof(read), MSG_WAITALL), 4);
    EXPECT_EQ(std::string(read, 4), "peer") << "the same connection";
    ASSERT_TRUE(write_fully(taken.connection.get(), "back", 4));
    ASSERT_EQ(::recv(kept.get(), read, sizeof(read), MSG_WAITALL), 4);
    EXPECT_EQ(std::string(read, 4), "back");

    const Answer again = owner.ask(take_request(token_id(13), 1, 100));
    EXPECT_EQ(again.code(), Code::disconnected) << "taken once";
    EXPECT_FALSE(again.connection.valid());
}

TEST_F(PeerBroker, AnEndpointOffTheAllowListIsNotDialled) {
    Worker worker(broker);
    const Answer answer = worker.ask(dial_request(token_id(14), 1, 0, "tcp://127.0.0.1:9"));
    ASSERT_TRUE(answer.answered);
    EXPECT_EQ(answer.code(), Code::unsupported);
    EXPECT_THAT(answer.message(), HasSubstr("--tensor-peer tcp://127.0.0.1:9"));
    EXPECT_FALSE(answer.connection.valid());
}

TEST(PeerBrokerDial, OnlyAllowedTcpPeersAreDialledAndGetTheHello) {
    Endpoint peer;
    ASSERT_TRUE(parse_endpoint("tcp://127.0.0.1:0", &peer).ok());
    UniqueFd listening;
    ASSERT_TRUE(listen_endpoint(&peer, &listening).ok());
    Endpoint unix_peer;
    ASSERT_TRUE(parse_endpoint("unix:/tmp/ggml-remote-peer-broker-test.sock", &unix_peer).ok());
    Broker broker({peer, unix_peer});
    Worker worker(broker);
    const std::string address = "127.0.0.1:" + std::to_string(peer.port);

    const Answer unix_dial =
        worker.ask(dial_request(token_id(15), 1, 0, "unix:/tmp/ggml-remote-peer-broker-test.sock"));
    EXPECT_EQ(unix_dial.code(), Code::bad_request) << "a peer server is reached over TCP only";
    EXPECT_FALSE(unix_dial.connection.valid());
    const Answer other_port =
        worker.ask(dial_request(token_id(15), 1, 0, "tcp://127.0.0.1:" + std::to_string(peer.port + 1)));
    EXPECT_EQ(other_port.code(), Code::unsupported);
    Request unterminated = dial_request(token_id(15), 1, 0, "");
    std::memset(unterminated.endpoint, 'a', sizeof(unterminated.endpoint));
    EXPECT_EQ(worker.ask(unterminated).code(), Code::bad_request);
    ASSERT_EQ(poll_one(listening.get(), POLLIN, 0), 0) << "nothing was dialled";

    Answer dialled = worker.ask(dial_request(token_id(15), 3, 1, "tcp://" + address));
    ASSERT_EQ(dialled.code(), Code::ok) << dialled.message();
    ASSERT_TRUE(dialled.connection.valid());
    UniqueFd accepted(::accept4(listening.get(), nullptr, nullptr, SOCK_CLOEXEC));
    ASSERT_TRUE(accepted.valid());
    PeerLinks::Hello hello{};
    ASSERT_EQ(poll_one(accepted.get(), POLLIN, 2000), 1);
    ASSERT_EQ(::recv(accepted.get(), &hello, sizeof(hello), MSG_WAITALL), static_cast<ssize_t>(sizeof(hello)));
    EXPECT_EQ(std::memcmp(hello.magic, PeerLinks::kHelloMagic.data(), sizeof(hello.magic)), 0);
    EXPECT_EQ(std::memcmp(hello.token_id, token_id(15).data(), sizeof(hello.token_id)), 0);
    EXPECT_EQ(hello.from_rank, 3u);
    EXPECT_EQ(hello.to_rank, 1u);
    dialled.connection.reset();
    char more = 0;
    ASSERT_EQ(poll_one(accepted.get(), POLLIN, 2000), 1);
    EXPECT_EQ(::recv(accepted.get(), &more, 1, 0), 0) << "the hello and nothing else, and the broker kept no copy";

    const Answer tls = worker.ask(dial_request(token_id(16), 1, 0, "tls://" + address));
    EXPECT_EQ(tls.code(), Code::ok) << "the same server named tls://: " << tls.message();
}

// Class 4 of issue 40: whatever else a taken-over worker offers as a connection.
TEST_F(PeerBroker, AnOfferOfAnythingButAConnectedTcpSocketIsRefused) {
    Worker owner(broker), dialled_in(broker);
    ASSERT_EQ(owner.ask(enrol_request(token_id(30), 0, 2)).code(), Code::ok);
    const Request offer = offer_request(token_id(30), 0, 1);
    int pipe_ends[2];
    ASSERT_EQ(::pipe2(pipe_ends, O_CLOEXEC), 0);
    const UniqueFd pipe_read(pipe_ends[0]), pipe_write(pipe_ends[1]);
    const UniqueFd memfd(::memfd_create("not-a-connection", MFD_CLOEXEC));
    const UniqueFd path_only(::open("/tmp", O_PATH | O_CLOEXEC));
    const UniqueFd null(::open("/dev/null", O_RDWR | O_CLOEXEC));
    auto [unix_end, unix_other] = stream_pair();
    TcpServer listening;
    const UniqueFd unconnected(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    const UniqueFd datagram(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    const std::pair<const char *, int> wrong[] = {
        {"a pipe", pipe_read.get()},
        {"a memfd", memfd.get()},
        {"an O_PATH descriptor", path_only.get()},
        {"/dev/null", null.get()},
        {"a unix socket", unix_end.get()},
        {"a listening TCP socket", listening.listening.get()},
        {"an unconnected TCP socket", unconnected.get()},
        {"a UDP socket", datagram.get()},
    };
    for (const auto &[what, fd] : wrong) {
        ASSERT_GE(fd, 0) << what;
        const Answer answer = dialled_in.ask(offer, fd);
        ASSERT_TRUE(answer.answered) << what;
        EXPECT_EQ(answer.code(), Code::bad_request) << what;
        EXPECT_THAT(answer.message(), HasSubstr("an offer's connection is")) << what;
    }
    const Answer nothing = owner.ask(take_request(token_id(30), 1, 50));
    EXPECT_EQ(nothing.code(), Code::disconnected) << "nothing wrong was handed on";
    EXPECT_FALSE(nothing.connection.valid());
    EXPECT_EQ(dialled_in.offer_code(offer), Code::ok) << "the rank still awaits its real connection";
}

// Class 1 of issue 40: a guest that joins and leaves in a loop makes the listener
// dial its peer server at most its session's budget, not hundreds of times a second.
TEST(PeerBrokerDial, ASessionDialsAtMostItsBudgetAndAnotherSessionStillDials) {
    TcpServer peer;
    Broker broker({peer.endpoint});
    Worker greedy(broker), other(broker);
    int dialled = 0;
    Answer refused;
    for (int i = 0; i < 100; ++i) {
        Answer answer = greedy.ask(dial_request(token_id(static_cast<uint8_t>(40 + i % 4)), 1, 0, peer.address()));
        if (answer.code() != Code::ok) {
            refused = std::move(answer);
            break;
        }
        ++dialled;
    }
    EXPECT_EQ(dialled, static_cast<int>(host::kDialBurstPerSession));
    EXPECT_EQ(refused.code(), Code::limit_exceeded);
    EXPECT_THAT(refused.message(), HasSubstr("this session dialled as often as it may"));
    const Answer fair = other.ask(dial_request(token_id(50), 1, 0, peer.address()));
    EXPECT_EQ(fair.code(), Code::ok) << fair.message();
}

TEST(PeerBrokerDial, AGroupDialsAtMostItsBudgetWhicheverSessionsDial) {
    TcpServer peer;
    Broker broker({peer.endpoint});
    const int sessions = static_cast<int>(host::kDialBurstPerGroup / host::kDialBurstPerSession) + 1;
    std::vector<std::unique_ptr<Worker>> workers;
    int dialled = 0;
    Code last = Code::ok;
    const auto started = Clock::now();
    for (int s = 0; s < sessions && last == Code::ok; ++s) {
        workers.push_back(std::make_unique<Worker>(broker));
        for (int i = 0; i < host::kDialBurstPerSession && last == Code::ok; ++i) {
            // The server's own budget is the slowest part: each dial waits its turn there.
            last = workers.back()->ask(dial_request(token_id(60), 1, 0, peer.address()), -1, 30000).code();
            if (last == Code::ok) ++dialled;
        }
    }
    EXPECT_EQ(last, Code::limit_exceeded);
    // The burst, and what the group's rate gave back while the dials waited their turns.
    const double elapsed = std::chrono::duration<double>(Clock::now() - started).count();
    EXPECT_GE(dialled, static_cast<int>(host::kDialBurstPerGroup));
    EXPECT_LE(dialled, static_cast<int>(host::kDialBurstPerGroup + elapsed * host::kDialsPerSecondPerGroup) + 1);
}

TEST(PeerBrokerDial, DialsToOneServerPastItsBudgetWaitTheirTurnInsteadOfFailing) {
    TcpServer peer;
    Broker broker({peer.endpoint});
    const int past = 4;  // dials beyond the server's burst: each waits about 1/rate
    const int sessions = static_cast<int>(host::kDialBurstPerServer / host::kDialBurstPerSession) + 1;
    std::vector<std::unique_ptr<Worker>> workers;
    int dialled = 0;
    const auto started = Clock::now();
    for (int s = 0; s < sessions; ++s) {
        workers.push_back(std::make_unique<Worker>(broker));
        for (int i = 0; i < host::kDialBurstPerSession && dialled < host::kDialBurstPerServer + past; ++i) {
            const Answer answer = workers.back()->ask(
                dial_request(token_id(static_cast<uint8_t>(70 + s)), 1, 0, peer.address()), -1, 30000);
            ASSERT_EQ(answer.code(), Code::ok) << "dial " << dialled << ": " << answer.message();
            ++dialled;
        }
    }
    // The server's rate held: the dials past its burst took their time.
    const double least = (past - 1) / host::kDialsPerSecondPerServer;
    EXPECT_GE(std::chrono::duration<double>(Clock::now() - started).count(), least);
}

TEST_F(PeerBroker, AClosedChannelsGroupsAreForgotten) {
    Worker first(broker), second(broker);
    ASSERT_EQ(first.ask(enrol_request(token_id(17), 0, 2)).code(), Code::ok);
    ASSERT_EQ(second.ask(enrol_request(token_id(17), 0, 2)).code(), Code::bad_request);
    first.close();
    Code code = Code::bad_request;
    for (const auto deadline = Clock::now() + 2s; code != Code::ok && Clock::now() < deadline;) {
        code = second.ask(enrol_request(token_id(17), 1, 2)).code();
        if (code != Code::ok) std::this_thread::sleep_for(10ms);
    }
    EXPECT_EQ(code, Code::ok) << "the closed channel's group is gone";
}

TEST_F(PeerBroker, AMessageOfAnotherSizeEndsOnlyItsChannel) {
    Worker shorter(broker), longer(broker), bystander(broker);
    ASSERT_EQ(bystander.ask(enrol_request(token_id(18), 0, 2)).code(), Code::ok);
    ASSERT_EQ(shorter.ask(enrol_request(token_id(19), 0, 2)).code(), Code::ok);
    store_channel::NoSigpipe no_sigpipe;
    const Request request = enrol_request(token_id(20), 0, 2);
    ASSERT_TRUE(store_channel::send_message(shorter.fd(), &request, sizeof(request) - 1, nullptr, 0));
    std::vector<uint8_t> big(sizeof(request) + 8, 0);
    std::memcpy(big.data(), &request, sizeof(request));
    ASSERT_TRUE(store_channel::send_message(longer.fd(), big.data(), big.size(), nullptr, 0));
    EXPECT_TRUE(peer_closed(shorter.fd())) << "the broker ends the channel at once";
    EXPECT_TRUE(peer_closed(longer.fd()));
    EXPECT_FALSE(shorter.ask(enrol_request(token_id(21), 0, 2), -1, 500).answered);

    EXPECT_EQ(bystander.ask(enrol_request(token_id(22), 0, 2)).code(), Code::ok) << "others keep working";
    Worker next(broker);
    EXPECT_EQ(next.ask(enrol_request(token_id(19), 0, 2)).code(), Code::ok) << "the ended channel's group is gone";
    EXPECT_EQ(next.ask(enrol_request(token_id(18), 0, 2)).code(), Code::bad_request);
}

}  // namespace
}  // namespace ggml_remote
