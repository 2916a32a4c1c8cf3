// Listener handover (src/host/listener/listener_handover.h, adopted_sessions.h,
// session_ledger.h, key_snapshot.h): a new listener takes over only the workers
// whose pidfds it was handed, whatever the board says, learns when they end without
// being their parent, receives the descriptors it is handed under their names, and
// keeps the last good key file.
#include "host/listener/listener_handover.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

#include "fifo_watchdog.h"
#include "host/common/status_board.h"
#include "host/listener/adopted_sessions.h"
#include "host/listener/key_snapshot.h"
#include "host/listener/session_ledger.h"
#include "host/listener/worker_jail.h"
#include "transport/tls_key.h"

namespace ggml_remote::host {
namespace {

using namespace std::chrono_literals;

sigset_t empty_mask() {
    sigset_t mask;
    sigemptyset(&mask);
    return mask;
}

// A worker's stand-in: a shell that sleeps (not exec'd: its command line keeps the
// listener's per-connection arguments, --worker-fd and --status-slot), and ends its
// sleep when it is told to end.
WorkerJail sleeper_jail() {
    return WorkerJail({"sh", "-c", "trap 'kill $! 2>/dev/null; exit 0' TERM; sleep 30 & wait", "worker"}, empty_mask(),
                      "/bin/sh");
}

pid_t spawn_sleeper(WorkerJail *jail, int slot, int board_fd, int session_id = 1) {
    pid_t pid = -1;
    EXPECT_TRUE(jail->spawn({0, session_id, "unix:uid 1", board_fd, slot, -1, -1}, &pid).ok());
    return pid;
}

// What a listener records of a session it hands over.
void record(SessionLedger *ledger, pid_t pid, int slot, int id, const char *key) {
    LedgerEntry entry;
    entry.pid = pid;
    entry.session_id = id;
    entry.slot = slot;
    entry.peer = "unix:uid " + std::to_string(id);
    entry.account.kind = PeerAccount::Kind::user;
    entry.account.uid = 1000;
    entry.account.key = key;
    ASSERT_TRUE(ledger->record(entry));
}

// What a taken-over worker can write on the board: a live slot for any pid.
void forge_slot(StatusBoard *board, int index, pid_t pid, int id) {
    SessionSlot *slot = board->slot(static_cast<uint32_t>(index));
    slot->live.store(1);
    slot->pid = pid;
    slot->id = id;
    std::memset(slot->peer, 'k', sizeof(slot->peer));  // unterminated
}

std::vector<UniqueFd> pidfds_of(std::initializer_list<pid_t> pids) {
    std::vector<UniqueFd> pidfds;
    for (pid_t pid : pids) pidfds.push_back(open_pidfd(pid));
    return pidfds;
}

// Polls the adopted sessions' pidfds until one reports its end (up to 10 s).
std::vector<std::pair<pid_t, AdoptedSession>> ended_within_10s(AdoptedSessions *adopted) {
    for (auto deadline = std::chrono::steady_clock::now() + 10s; std::chrono::steady_clock::now() < deadline;) {
        std::vector<pollfd> polled;
        adopted->add_poll_fds(&polled);
        ::poll(polled.data(), polled.size(), 100);
        auto ended = adopted->take_ended(polled);
        if (!ended.empty()) return ended;
    }
    return {};
}

// Only the handed pidfds are adopted, labelled by the ledger; the board's slots,
// forged or not, decide nothing.
TEST(AdoptedSessions, AdoptsOnlyTheHandedWorkers) {
    StatusBoard board;
    ASSERT_TRUE(StatusBoard::create(8, &board).ok());
    SessionLedger ledger;
    ASSERT_TRUE(SessionLedger::create(4, &ledger).ok());
    WorkerJail jail = sleeper_jail();
    const pid_t worker = spawn_sleeper(&jail, 2, board.fd());
    const pid_t decoy = spawn_sleeper(&jail, 5, board.fd());  // a real process of the same shape, not handed
    const pid_t ended = spawn_sleeper(&jail, 6, board.fd());
    ASSERT_GT(worker, 0);
    record(&ledger, worker, 2, 7, "uid 1000");
    record(&ledger, decoy, 5, 8, "uid 1000");
    std::vector<UniqueFd> handed = pidfds_of({worker, worker, ended});  // the same worker twice
    ::kill(ended, SIGKILL);
    for (int i = 0; i < 100 && pid_of_pidfd(handed[2].get()) > 0; ++i) {
        jail.reap();
        std::this_thread::sleep_for(10ms);
    }
    forge_slot(&board, 5, decoy, 8);
    forge_slot(&board, 6, ::getpid(), 9);

    AdoptedSessions adopted;
    std::vector<pid_t> gone;
    EXPECT_EQ(adopted.adopt(std::move(handed), ledger, board.slots(), &gone), 1);
    ASSERT_EQ(adopted.sessions().count(worker), 1u);
    EXPECT_EQ(adopted.sessions().count(decoy), 0u);
    const AdoptedSession &session = adopted.sessions().at(worker);
    EXPECT_EQ(session.session_id, 7);
    EXPECT_EQ(session.slot, 2);
    EXPECT_EQ(session.peer, "unix:uid 7");
    EXPECT_EQ(session.account.key, "uid 1000");
    EXPECT_EQ(session.account.kind, PeerAccount::Kind::user);
    EXPECT_EQ(adopted.highest_id(), 7);
    adopted.end_all(2s);
    EXPECT_EQ(::kill(decoy, 0), 0) << "a process that was never handed over was ended";
    jail.shut_down(2s);
}

// A worker the ledger does not know (its entry lost) still counts; a slot past
// the board, or taken twice, is dropped.
TEST(AdoptedSessions, AnUnlabelledWorkerStillCounts) {
    SessionLedger ledger;
    ASSERT_TRUE(SessionLedger::create(4, &ledger).ok());
    WorkerJail jail = sleeper_jail();
    const pid_t unknown = spawn_sleeper(&jail, 0, -1);
    const pid_t far = spawn_sleeper(&jail, 1, -1);
    const pid_t twice = spawn_sleeper(&jail, 2, -1);
    record(&ledger, far, 40, 2, "a");
    record(&ledger, twice, 40, 3, "b");
    AdoptedSessions adopted;
    EXPECT_EQ(adopted.adopt(pidfds_of({unknown, far, twice}), ledger, 8), 3);
    EXPECT_EQ(adopted.sessions().at(unknown).slot, -1);
    EXPECT_EQ(adopted.sessions().at(unknown).peer, "worker " + std::to_string(unknown));
    EXPECT_EQ(adopted.sessions().at(far).slot, -1);
    EXPECT_EQ(adopted.sessions().at(twice).slot, -1);
    adopted.end_all(2s);
    jail.shut_down(2s);
}

TEST(AdoptedSessions, LearnsOfTheEndThroughThePidfd) {
    SessionLedger ledger;
    ASSERT_TRUE(SessionLedger::create(4, &ledger).ok());
    WorkerJail jail = sleeper_jail();
    const pid_t worker = spawn_sleeper(&jail, 1, -1);
    record(&ledger, worker, 1, 3, "uid 1000");
    AdoptedSessions adopted;
    ASSERT_EQ(adopted.adopt(pidfds_of({worker}), ledger, 4), 1);

    std::vector<pollfd> polled;
    adopted.add_poll_fds(&polled);
    ASSERT_EQ(::poll(polled.data(), polled.size(), 0), 0) << "a live worker reported as ended";
    adopted.signal_all(SIGTERM);
    const auto ended = ended_within_10s(&adopted);
    ASSERT_EQ(ended.size(), 1u);
    EXPECT_EQ(ended[0].first, worker);
    EXPECT_EQ(ended[0].second.session_id, 3);
    EXPECT_TRUE(adopted.sessions().empty());
    jail.reap();
}

TEST(AdoptedSessions, EndAllStopsThemWithinTheGrace) {
    // Session 1's worker ends on SIGTERM; session 2's ignores it and must be killed.
    WorkerJail jail({"sh", "-c",
                     "case \"$*\" in *'--session-id 2 '*) trap '' TERM; while :; do sleep 0.1; done;; esac; "
                     "trap 'kill $! 2>/dev/null; exit 0' TERM; sleep 30 & wait",
                     "worker"},
                    empty_mask(), "/bin/sh");
    const pid_t first = spawn_sleeper(&jail, 0, -1, 1);
    const pid_t second = spawn_sleeper(&jail, 1, -1, 2);
    std::this_thread::sleep_for(100ms);
    SessionLedger ledger;
    ASSERT_TRUE(SessionLedger::create(4, &ledger).ok());
    AdoptedSessions adopted;
    ASSERT_EQ(adopted.adopt(pidfds_of({first, second}), ledger, 4), 2);
    const auto started = std::chrono::steady_clock::now();
    adopted.end_all(500ms);
    EXPECT_LT(std::chrono::steady_clock::now() - started, 3s);
    EXPECT_TRUE(adopted.sessions().empty());
    std::vector<EndedWorker> ended;
    for (int i = 0; i < 100 && ended.size() < 2; ++i, std::this_thread::sleep_for(20ms)) {
        for (EndedWorker &worker : jail.reap()) ended.push_back(worker);
    }
    ASSERT_EQ(ended.size(), 2u) << "a worker survived end_all";
    for (const EndedWorker &worker : ended) {
        const int expected = worker.pid == second ? SIGKILL : 0;
        EXPECT_EQ(WIFSIGNALED(worker.wait_status) ? WTERMSIG(worker.wait_status) : 0, expected) << worker.pid;
    }
    jail.shut_down(1s);  // none left, unless end_all failed
}

TEST(SessionLedger, RecordsForgetsAndIsHandedWhole) {
    SessionLedger ledger;
    ASSERT_TRUE(SessionLedger::create(2, &ledger).ok());
    ledger.set_next_session_id(42);
    record(&ledger, 100, 0, 1, "a");
    record(&ledger, 200, 1, 2, std::string(200, 'x').c_str());
    LedgerEntry third;
    third.pid = 300;
    EXPECT_FALSE(ledger.record(third)) << "a full ledger";
    SessionLedger next;
    ASSERT_TRUE(SessionLedger::attach(::dup(ledger.fd()), &next).ok());
    EXPECT_EQ(next.next_session_id(), 42);
    ASSERT_TRUE(next.find(200).has_value());
    EXPECT_EQ(next.find(200)->account.key.size(), 63u);
    next.forget(100);
    EXPECT_FALSE(ledger.find(100).has_value());
    EXPECT_EQ(ledger.pids(), std::vector<pid_t>{200});
    SessionLedger larger;
    ASSERT_TRUE(next.grown(8, &larger).ok());
    EXPECT_EQ(larger.capacity(), 8u);
    EXPECT_EQ(larger.next_session_id(), 42);
    EXPECT_EQ(larger.pids(), std::vector<pid_t>{200});
    // Only a sealed ledger is taken over.
    SessionLedger unsealed;
    EXPECT_FALSE(SessionLedger::attach(::memfd_create("x", MFD_CLOEXEC), &unsealed).ok());
}

TEST(StatusBoard, RefusesTheBoardOfAnotherLayoutAndCountsSlotsBySize) {
    StatusBoard board;
    ASSERT_TRUE(StatusBoard::create(2, &board).ok());
    // The header's second word is the slot count: a worker's forged 0 hides no slot.
    void *header = ::mmap(nullptr, 64, PROT_READ | PROT_WRITE, MAP_SHARED, board.fd(), 0);
    ASSERT_NE(header, MAP_FAILED);
    static_cast<uint32_t *>(header)[1] = 0;
    StatusBoard same;
    ASSERT_TRUE(StatusBoard::attach(::dup(board.fd()), &same).ok());
    EXPECT_EQ(same.slots(), 2u);
    // The header's third word is the slot size; another version's differs.
    static_cast<uint32_t *>(header)[2] += 8;
    StatusBoard other;
    const Status attached = StatusBoard::attach(::dup(board.fd()), &other);
    EXPECT_FALSE(attached.ok());
    EXPECT_NE(attached.message().find("layout"), std::string::npos) << attached.message();
    // The fourth word stands for the list of session figures: another version's
    // may hold as many in another order, in a slot of the same size.
    static_cast<uint32_t *>(header)[2] -= 8;
    static_cast<uint32_t *>(header)[3] ^= 1;
    StatusBoard reordered;
    EXPECT_FALSE(StatusBoard::attach(::dup(board.fd()), &reordered).ok());
    static_cast<uint32_t *>(header)[3] ^= 1;
    StatusBoard again;
    EXPECT_TRUE(StatusBoard::attach(::dup(board.fd()), &again).ok());
    ::munmap(header, 64);
}

// exec_with_fds in a child: the new program finds the descriptors from 3 on,
// named, and LISTEN_PID names its own (unchanged) pid.
TEST(ListenerHandover, ExecHandsDescriptorsInSystemdsWay) {
    int pipe_fds[2];
    ASSERT_EQ(::pipe2(pipe_fds, O_CLOEXEC), 0);
    int out[2];
    ASSERT_EQ(::pipe2(out, O_CLOEXEC), 0);
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        ::dup2(out[1], 1);
        const std::string script =
            "echo $LISTEN_PID $$ $LISTEN_FDS $LISTEN_FDNAMES; "
            "[ -e /proc/self/fd/3 ] && [ -e /proc/self/fd/4 ] && [ ! -e /proc/self/fd/5 ] && echo fds-ok";
        (void)exec_with_fds("/bin/sh", {"sh", "-c", script}, {{pipe_fds[1], "first"}, {pipe_fds[0], "second"}},
                            empty_mask());
        ::_exit(99);
    }
    ::close(out[1]);
    std::string text;
    char chunk[256];
    for (ssize_t got; (got = ::read(out[0], chunk, sizeof(chunk))) > 0;) text.append(chunk, static_cast<size_t>(got));
    int status = 0;
    ::waitpid(child, &status, 0);
    ::close(out[0]);
    ::close(pipe_fds[0]);
    ::close(pipe_fds[1]);
    const std::string pid = std::to_string(child);
    EXPECT_EQ(text, pid + " " + pid + " 2 first:second\nfds-ok\n");
}

TEST(ListenerHandover, ExecOfAMissingProgramFails) {
    const Status status = exec_with_fds("/nonexistent/ggml-remote-server", {"x"}, {}, empty_mask());
    EXPECT_FALSE(status.ok());
    EXPECT_NE(status.message().find("/nonexistent/ggml-remote-server"), std::string::npos);
}

TEST(ListenerHandover, NoServiceManagerNoStore) {
    ::unsetenv("NOTIFY_SOCKET");
    EXPECT_FALSE(store_with_service_manager(0, kHandedBoardName).ok());
}

std::string write_file(const std::string &name, const std::string &text) {
    const std::string path = ::testing::TempDir() + name;
    std::ofstream(path) << text;
    return path;
}

constexpr const char *kGoodKey = "guest:00112233445566778899aabbccddeeff\n";

TEST(KeySnapshot, KeepsTheLastGoodKeysSealed) {
    KeySnapshot keys;
    size_t count = 0;
    const std::string path = write_file("keys.psk", kGoodKey);
    ASSERT_TRUE(keys.load(path, &count).ok());
    EXPECT_EQ(count, 1u);
    const int first = keys.fd();
    ASSERT_GE(first, 0);
    EXPECT_LT(::pwrite(first, "x", 1, 0), 0) << "a worker could change the next one's keys";

    write_file("keys.psk", "guest:not-hex\n");
    const Status bad = keys.load(path, &count);
    EXPECT_FALSE(bad.ok());
    EXPECT_EQ(keys.fd(), first) << "a bad file replaced the keys";
    std::vector<PreSharedKey> read;
    ASSERT_TRUE(read_psk_fd(keys.fd(), "copy", &read).ok());
    ASSERT_EQ(read.size(), 1u);
    EXPECT_EQ(read[0].identity, "guest");

    write_file("keys.psk", std::string(kGoodKey) + "other:ffeeddccbbaa99887766554433221100\n");
    ASSERT_TRUE(keys.load(path, &count).ok());
    EXPECT_EQ(count, 2u);
    EXPECT_FALSE(keys.load(::testing::TempDir() + "missing.psk", &count).ok());
    read.clear();
    ASSERT_TRUE(read_psk_fd(keys.fd(), "copy", &read).ok());
    EXPECT_EQ(read.size(), 2u);
}

TEST(KeySnapshot, AFifoInTheKeyFilesPlaceIsRefusedWithoutAWriter) {
    const std::string path = ::testing::TempDir() + "fifo.psk";
    ::unlink(path.c_str());
    ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
    KeySnapshot keys;
    Status status = Status::success();
    EXPECT_TRUE(test_support::returns_without_a_writer(path, [&] {
        size_t count = 0;
        status = keys.load(path, &count);
    })) << "loading the keys waited for a writer to the FIFO";
    EXPECT_EQ(status.message(), "key file " + path + ": not a regular file (a FIFO)");
    EXPECT_LT(keys.fd(), 0);
    ::unlink(path.c_str());
}

}  // namespace
}  // namespace ggml_remote::host
