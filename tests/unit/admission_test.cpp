// Admission (src/host/listener/admission.h): unauthenticated connections have a cap of their
// own and never hold a session place; a TLS worker gets its place by asking.
#include "host/listener/admission.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "transport/socket.h"

namespace ggml_remote::host {
namespace {

using namespace std::chrono_literals;

// The worker's end of a control socket pair, and the listener's.
struct ControlPair {
    UniqueFd worker, listener;
    ControlPair() {
        int fds[2];
        if (::socketpair(AF_UNIX, SOCK_SEQPACKET, 0, fds) == 0) {
            worker.reset(fds[0]);
            listener.reset(fds[1]);
        }
    }
};

class AdmissionTest : public ::testing::Test {
  protected:
    void SetUp() override { ASSERT_TRUE(StatusBoard::create(8, &board_).ok()); }

    // One round of the listener's loop over `admission`'s control sockets.
    void serve(Admission *admission, bool peer_may_open = true) {
        std::vector<pollfd> polled;
        admission->add_poll_fds(&polled);
        EXPECT_GT(::poll(polled.data(), polled.size(), 1000), 0);
        admission->answer_requests(
            polled, [peer_may_open](pid_t) { return peer_may_open; },
            [this](pid_t, const KeyRequest &request) {
                ++keys_asked_;
                Admission::KeyAnswer answer;
                answer.reply.code = request.proof.identity_size == 0 ? 4 : 0;
                answer.reply.key_size = 32;
                return answer;
            });
    }

    // The worker's key request (its guest's proof: an identity, for this test's
    // answerer; none is refused); returns the reply's code, or -1 for none.
    int ask_key(Admission *admission, int worker_fd, const std::string &identity = "guest") {
        KeyRequest request;
        request.proof.identity_size = static_cast<uint32_t>(identity.size());
        std::memcpy(request.proof.identity, identity.data(), identity.size());
        EXPECT_EQ(::send(worker_fd, &request, sizeof(request), 0), static_cast<ssize_t>(sizeof(request)));
        serve(admission);
        KeyReply reply;
        if (poll_one(worker_fd, POLLIN, 0) <= 0) return -1;
        return ::recv(worker_fd, &reply, sizeof(reply), MSG_DONTWAIT) == sizeof(reply) ? reply.code : -1;
    }

    // The worker asks for a place, after a key when `with_key`; returns the
    // listener's answer byte (0: none).
    char ask(Admission *admission, int worker_fd, bool peer_may_open = true, bool with_key = true) {
        if (with_key) {
            EXPECT_EQ(ask_key(admission, worker_fd), 0);
        }
        const char request = kAdmissionRequest;
        EXPECT_EQ(::send(worker_fd, &request, 1, 0), 1);
        serve(admission, peer_may_open);
        char answer = 0;
        return ::recv(worker_fd, &answer, 1, MSG_DONTWAIT) == 1 ? answer : 0;
    }

    int keys_asked_ = 0;
    StatusBoard board_;
};

TEST_F(AdmissionTest, UnauthenticatedConnectionsNeverTakeASessionPlace) {
    Admission admission(1, 4, 10s, &board_);
    for (pid_t pid = 100; pid < 104; ++pid) admission.add_unauthenticated(pid, admission.free_slot(), UniqueFd());
    EXPECT_EQ(admission.unauthenticated(), 4);
    EXPECT_EQ(admission.sessions(), 0);
    EXPECT_FALSE(admission.sessions_full());
}

TEST_F(AdmissionTest, TheCapEvictsTheOldestUnauthenticatedConnection) {
    Admission admission(1, 2, 10s, &board_);
    EXPECT_FALSE(admission.evict_oldest_unauthenticated_if_full().has_value());
    admission.add_unauthenticated(200, admission.free_slot(), UniqueFd());
    admission.add_unauthenticated(100, admission.free_slot(), UniqueFd());
    const std::optional<pid_t> evicted = admission.evict_oldest_unauthenticated_if_full();
    ASSERT_TRUE(evicted.has_value());
    EXPECT_EQ(*evicted, 200);  // the first accepted, not the lowest pid
    EXPECT_EQ(admission.unauthenticated(), 1);
    EXPECT_TRUE(admission.ended_by_listener(200)) << "its SIGKILL would be logged as a crash";
    EXPECT_FALSE(admission.ended_by_listener(100));
    admission.release(200);  // reaped later: counted once only
    EXPECT_EQ(admission.unauthenticated(), 1);
}

TEST_F(AdmissionTest, AWorkerThatAsksAfterItsHandshakeGetsAPlaceWhileOneIsFree) {
    Admission admission(1, 4, 10s, &board_);
    ControlPair first, second;
    const int first_slot = admission.free_slot();
    admission.add_unauthenticated(100, first_slot, std::move(first.listener));
    admission.add_unauthenticated(101, admission.free_slot(), std::move(second.listener));
    EXPECT_EQ(board_.slot(first_slot)->live.load(), 0u) << "listed before it authenticated";
    EXPECT_EQ(ask(&admission, first.worker.get()), kAdmissionGranted);
    EXPECT_EQ(admission.sessions(), 1);
    EXPECT_EQ(admission.unauthenticated(), 1);
    EXPECT_EQ(board_.slot(first_slot)->live.load(), 1u);
    EXPECT_EQ(ask(&admission, second.worker.get()), kAdmissionFull);
    EXPECT_EQ(admission.sessions(), 1);
    admission.release(100);
    EXPECT_EQ(admission.sessions(), 0);
    EXPECT_EQ(board_.slot(first_slot)->live.load(), 0u);
}

// A TLS guest counts against its peer's cap only once it authenticated, and is
// told which cap turned it away.
TEST_F(AdmissionTest, AWorkerWhosePeerHoldsItsShareIsRefusedAsSuch) {
    Admission admission(4, 4, 10s, &board_);
    ControlPair pair;
    admission.add_unauthenticated(100, admission.free_slot(), std::move(pair.listener));
    EXPECT_EQ(ask(&admission, pair.worker.get(), false), kAdmissionPeerFull);
    EXPECT_EQ(admission.sessions(), 0);
}

TEST_F(AdmissionTest, AnythingButTheRequestIsNoRequest) {
    Admission admission(1, 4, 10s, &board_);
    ControlPair pair;
    admission.add_unauthenticated(100, admission.free_slot(), std::move(pair.listener));
    const char forged = kAdmissionGranted;
    ASSERT_EQ(::send(pair.worker.get(), &forged, 1, 0), 1);
    serve(&admission);
    EXPECT_EQ(admission.sessions(), 0);
    EXPECT_EQ(keys_asked_, 0);
    std::vector<pollfd> polled;
    admission.add_poll_fds(&polled);
    EXPECT_TRUE(polled.empty()) << "a worker gets one question";
}

TEST_F(AdmissionTest, UnauthenticatedConnectionsPastTheirDeadlineAreTakenOut) {
    Admission admission(1, 4, 50ms, &board_);
    admission.add_unauthenticated(100, admission.free_slot(), UniqueFd());
    const auto now = Admission::Clock::now();
    EXPECT_TRUE(admission.take_overdue(now).empty());
    EXPECT_GT(admission.poll_timeout_ms(now), 0);
    EXPECT_EQ(admission.take_overdue(now + 60ms), std::vector<pid_t>{100});
    EXPECT_EQ(admission.unauthenticated(), 0);
    EXPECT_EQ(admission.poll_timeout_ms(now), -1);
}

TEST_F(AdmissionTest, AuthenticatedAtAcceptTakesAPlaceAndASlot) {
    Admission admission(2, 4, 10s, &board_);
    const int slot = admission.free_slot();
    admission.add_authenticated(100, slot);
    EXPECT_NE(admission.free_slot(), slot);
    admission.add_authenticated(101, admission.free_slot());
    EXPECT_TRUE(admission.sessions_full());
    admission.release(100);
    EXPECT_FALSE(admission.sessions_full());
    EXPECT_EQ(admission.free_slot(), slot);
}

// Issue 40, class 5: a worker a guest took over before its handshake gets no place
// by asking: only one whose guest's key the listener checked.
TEST_F(AdmissionTest, AWorkerWithoutACheckedKeyGetsNoPlace) {
    Admission admission(2, 4, 10s, &board_);
    ControlPair pair;
    admission.add_unauthenticated(100, 0, std::move(pair.listener));
    EXPECT_EQ(ask(&admission, pair.worker.get(), true, false), 0) << "no answer";
    EXPECT_EQ(admission.sessions(), 0);
    EXPECT_FALSE(admission.holds_session(100));
}

TEST_F(AdmissionTest, ARefusedKeyEndsTheWorkersQuestions) {
    Admission admission(2, 4, 10s, &board_);
    ControlPair pair;
    admission.add_unauthenticated(101, 0, std::move(pair.listener));
    EXPECT_EQ(ask_key(&admission, pair.worker.get(), ""), 4) << "refused, with the reason's code";
    const char request = kAdmissionRequest;
    EXPECT_EQ(::send(pair.worker.get(), &request, 1, MSG_NOSIGNAL), -1) << "the listener closed its end";
    EXPECT_EQ(admission.sessions(), 0);
}

TEST_F(AdmissionTest, AWorkerAsksForOneKeyOnly) {
    Admission admission(2, 4, 10s, &board_);
    ControlPair pair;
    admission.add_unauthenticated(102, 0, std::move(pair.listener));
    EXPECT_EQ(ask_key(&admission, pair.worker.get(), "guest"), 0);
    EXPECT_EQ(ask_key(&admission, pair.worker.get(), "another"), -1) << "a second key: no answer";
    EXPECT_EQ(keys_asked_, 1);
    EXPECT_FALSE(admission.holds_session(102));
}

}  // namespace
}  // namespace ggml_remote::host
