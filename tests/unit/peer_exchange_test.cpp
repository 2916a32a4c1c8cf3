// PeerExchange: servers of one tensor-parallel group sum their partials through a
// memory file; everything in it is hostile input.
#include "transport/peer_exchange.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <thread>
#include <vector>

#include "peer_test_support.h"

namespace ggml_remote {
namespace {

using namespace std::chrono_literals;

constexpr uint64_t kSlotBytes = 4096;

PeerExchange::Place place_of(uint32_t rank, uint32_t ranks, uint8_t token_byte = 7) {
    return test_support::group_place(rank, ranks, kSlotBytes, token_byte);
}

// A group's file and one attached member per rank.
struct Group {
    explicit Group(uint32_t ranks, uint8_t token_byte = 7) : members(ranks) {
        EXPECT_TRUE(PeerExchange::create_area(place_of(0, ranks), &file).ok());
        for (uint32_t rank = 0; rank < ranks; ++rank) {
            EXPECT_TRUE(
                PeerExchange::attach(UniqueFd(::dup(file.get())), place_of(rank, ranks, token_byte), &members[rank])
                    .ok());
            members[rank].watch_peer_processes(false);  // one process: no locks between its ranks
        }
    }
    UniqueFd file;
    std::vector<PeerExchange> members;
};

TEST(PeerExchange, EveryRankHoldsTheSameSumInRankOrder) {
    Group group(3);
    std::vector<std::vector<float>> values = {{1.0f, 1e8f, 0.5f}, {2.0f, 1.0f, 0.25f}, {4.0f, -1e8f, 0.125f}};
    std::vector<std::thread> ranks;
    std::vector<Status> results(3);
    for (uint32_t rank = 0; rank < 3; ++rank) {
        ranks.emplace_back(
            [&, rank] { results[rank] = group.members[rank].all_reduce_f32(values[rank].data(), 3, 5s); });
    }
    for (auto &thread : ranks) thread.join();
    const float expected[3] = {(1.0f + 2.0f) + 4.0f, (1e8f + 1.0f) + -1e8f, (0.5f + 0.25f) + 0.125f};
    for (uint32_t rank = 0; rank < 3; ++rank) {
        ASSERT_TRUE(results[rank].ok()) << results[rank].message();
        EXPECT_EQ(std::memcmp(values[rank].data(), expected, sizeof(expected)), 0) << "rank " << rank;
    }
}

TEST(PeerExchange, ManyStepsInARowReuseTheSlotsSafely) {
    Group group(2);
    constexpr int kSteps = 500;
    std::vector<int> wrong(2, 0);
    auto member = [&](uint32_t rank) {
        std::vector<float> values(64);
        for (int step = 0; step < kSteps; ++step) {
            std::fill(values.begin(), values.end(), float(step * 2 + rank));
            if (!group.members[rank].all_reduce_f32(values.data(), values.size(), 5s).ok()) ++wrong[rank];
            for (float v : values) wrong[rank] += v != float(step * 4 + 1);
        }
    };
    std::thread other(member, 1);
    member(0);
    other.join();
    EXPECT_EQ(wrong[0], 0);
    EXPECT_EQ(wrong[1], 0);
    EXPECT_EQ(group.members[0].steps(), uint32_t{kSteps});
}

TEST(PeerExchange, APeerThatSendsNothingFailsTheStepAtItsDeadline) {
    Group group(2);
    float values[4] = {};
    const Status status = group.members[0].all_reduce_f32(values, 4, 50ms);
    EXPECT_EQ(status.code(), Code::error);
    EXPECT_NE(status.message().find("sent nothing"), std::string::npos) << status.message();
    EXPECT_EQ(group.members[0].all_reduce_f32(values, 4, 5s).message(), status.message())
        << "a broken exchange fails at once, for good";
}

TEST(PeerExchange, APeerOfAnotherTokenIsRefused) {
    UniqueFd file;
    ASSERT_TRUE(PeerExchange::create_area(place_of(0, 2), &file).ok());
    PeerExchange ours, theirs;
    ASSERT_TRUE(PeerExchange::attach(UniqueFd(::dup(file.get())), place_of(0, 2, 7), &ours).ok());
    ASSERT_TRUE(PeerExchange::attach(UniqueFd(::dup(file.get())), place_of(1, 2, 9), &theirs).ok());
    ours.watch_peer_processes(false);
    float mine[2] = {1, 2}, other[2] = {3, 4};
    std::thread peer([&] { (void)theirs.all_reduce_f32(other, 2, 200ms); });
    const Status status = ours.all_reduce_f32(mine, 2, 5s);
    peer.join();
    EXPECT_EQ(status.code(), Code::bad_request);
    EXPECT_NE(status.message().find("another token"), std::string::npos) << status.message();
    EXPECT_EQ(mine[0], 1.0f) << "nothing of the stranger's was added";
}

TEST(PeerExchange, APeerThatSendsAnotherSizeIsRefused) {
    Group group(2);
    float mine[8] = {}, other[4] = {};
    std::thread peer([&] { (void)group.members[1].all_reduce_f32(other, 4, 200ms); });
    const Status status = group.members[0].all_reduce_f32(mine, 8, 5s);
    peer.join();
    EXPECT_EQ(status.code(), Code::bad_request);
    EXPECT_NE(status.message().find("16 bytes where 32"), std::string::npos) << status.message();
}

TEST(PeerExchange, APeerThatJumpsStepsIsRefused) {
    Group group(2);
    // What a hostile peer (or guest) can write: any step number in its header.
    Mapping raw;
    ASSERT_TRUE(Mapping::map(group.file.get(), 0, PeerExchange::kHeaderBytes * 2, true, &raw).ok());
    auto *published = reinterpret_cast<uint32_t *>(static_cast<uint8_t *>(raw.data()) + PeerExchange::kHeaderBytes);
    *published = 1000;
    float values[2] = {};
    const Status status = group.members[0].all_reduce_f32(values, 2, 5s);
    EXPECT_EQ(status.code(), Code::bad_request);
    EXPECT_NE(status.message().find("at step 1000"), std::string::npos) << status.message();
}

TEST(PeerExchange, ARankMarkedGoneFailsTheOthersAtOnce) {
    Group group(2);
    PeerExchange guest;
    ASSERT_TRUE(PeerExchange::watch(group.file.get(), place_of(0, 2), &guest).ok());
    float values[2] = {};
    std::thread lost([&] {
        std::this_thread::sleep_for(20ms);
        guest.mark_gone(1);
    });
    const auto start = std::chrono::steady_clock::now();
    const Status status = group.members[0].all_reduce_f32(values, 2, 30s);
    lost.join();
    EXPECT_EQ(status.code(), Code::error) << "not this session's own connection";
    EXPECT_NE(status.message().find("left the group"), std::string::npos) << status.message();
    EXPECT_LT(std::chrono::steady_clock::now() - start, 10s) << "woken, not timed out";
}

// A member in another process that dies: its lock goes with it, and the rank
// waiting for it fails at once instead of at its deadline.
TEST(PeerExchange, APeerWhoseProcessEndedFailsTheStepAtOnce) {
    UniqueFd file;
    ASSERT_TRUE(PeerExchange::create_area(place_of(0, 2), &file).ok());
    PeerExchange ours;
    ASSERT_TRUE(PeerExchange::attach(UniqueFd(::dup(file.get())), place_of(0, 2), &ours).ok());
    int ready[2];
    ASSERT_EQ(::pipe(ready), 0);
    const pid_t peer = ::fork();
    if (peer == 0) {
        PeerExchange theirs;
        const bool attached = PeerExchange::attach(UniqueFd(::dup(file.get())), place_of(1, 2), &theirs).ok();
        const char byte = attached ? 1 : 0;
        (void)!::write(ready[1], &byte, 1);
        ::usleep(200 * 1000);  // alive while the parent starts waiting, then gone
        ::_exit(0);
    }
    ::close(ready[1]);
    char attached = 0;
    ASSERT_EQ(::read(ready[0], &attached, 1), 1);
    ::close(ready[0]);
    ASSERT_EQ(attached, 1);
    const auto start = std::chrono::steady_clock::now();
    float values[2] = {};
    const Status status = ours.all_reduce_f32(values, 2, 30s);
    const auto waited = std::chrono::steady_clock::now() - start;
    ::waitpid(peer, nullptr, 0);
    EXPECT_EQ(status.code(), Code::error);
    EXPECT_NE(status.message().find("process ended"), std::string::npos) << status.message();
    EXPECT_GE(waited, 150ms) << "not gone while it lived";
    EXPECT_LT(waited, 5s);
}

TEST(PeerExchange, ARankBelongsToOneProcess) {
    UniqueFd file;
    ASSERT_TRUE(PeerExchange::create_area(place_of(0, 2), &file).ok());
    const pid_t other = ::fork();
    if (other == 0) {
        PeerExchange first;
        const bool attached = PeerExchange::attach(UniqueFd(::dup(file.get())), place_of(0, 2), &first).ok();
        ::usleep(300 * 1000);
        ::_exit(attached ? 0 : 1);
    }
    ::usleep(100 * 1000);
    PeerExchange second;
    const Status status = PeerExchange::attach(UniqueFd(::dup(file.get())), place_of(0, 2), &second);
    int child = 0;
    ::waitpid(other, &child, 0);
    ASSERT_TRUE(WIFEXITED(child) && WEXITSTATUS(child) == 0);
    EXPECT_EQ(status.code(), Code::bad_request) << "two servers cannot both be rank 0";
}

TEST(PeerExchange, PlacesOutOfBoundsAndUnsealedFilesAreRefused) {
    EXPECT_FALSE(PeerExchange::check_place(place_of(0, 1)).ok()) << "one server is no group";
    EXPECT_FALSE(PeerExchange::check_place(place_of(2, 2)).ok());
    EXPECT_FALSE(PeerExchange::check_place(place_of(0, PeerExchange::kMaxRanks + 1)).ok());
    PeerExchange::Place odd = place_of(0, 2);
    odd.slot_bytes = 100;
    EXPECT_FALSE(PeerExchange::check_place(odd).ok());
    odd.slot_bytes = PeerExchange::kMaxSlotBytes + 64;
    EXPECT_FALSE(PeerExchange::check_place(odd).ok());

    UniqueFd small;
    ASSERT_TRUE(create_shared_memory(4096, "too-small", &small).ok());
    PeerExchange exchange;
    EXPECT_FALSE(PeerExchange::attach(std::move(small), place_of(0, 2), &exchange).ok()) << "shorter than the area";
}

TEST(PeerExchange, AnAllReduceLargerThanTheSlotIsRefused) {
    Group group(2);
    std::vector<float> values(kSlotBytes / sizeof(float) + 1);
    EXPECT_EQ(group.members[0].all_reduce_f32(values.data(), values.size(), 1s).code(), Code::bad_request);
}

}  // namespace
}  // namespace ggml_remote
