// PeerLinks: servers of one tensor-parallel group sum their partials over TLS
// links between them; everything a peer sends is hostile input.
#include "transport/peer_links.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <future>
#include <thread>
#include <tuple>
#include <vector>

#include "peer_test_support.h"
#include "transport/tls_session.h"

namespace ggml_remote {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr uint64_t kSlotBytes = 64ull << 20;
constexpr auto kTimeout = 5s;

PeerExchange::Place place_of(uint32_t rank, uint32_t ranks, uint8_t token_byte = 7) {
    return test_support::group_place(rank, ranks, kSlotBytes, token_byte);
}

std::pair<UniqueFd, UniqueFd> unix_pair() {
    int fds[2] = {-1, -1};
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
    return {UniqueFd(fds[0]), UniqueFd(fds[1])};
}

// Both ends of one TCP connection over loopback, as the listeners would make it.
std::pair<UniqueFd, UniqueFd> tcp_pair() {
    UniqueFd listener(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof(address);
    EXPECT_EQ(::bind(listener.get(), reinterpret_cast<sockaddr *>(&address), sizeof(address)), 0);
    EXPECT_EQ(::listen(listener.get(), 1), 0);
    EXPECT_EQ(::getsockname(listener.get(), reinterpret_cast<sockaddr *>(&address), &length), 0);
    UniqueFd client(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    EXPECT_EQ(::connect(client.get(), reinterpret_cast<sockaddr *>(&address), sizeof(address)), 0);
    UniqueFd server(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
    return {std::move(client), std::move(server)};
}

// Every rank of a group opened at once, each in its own thread, over one
// connection per pair of ranks; `token_bytes[r]` is the token rank r was given.
struct Group {
    Group(std::vector<uint8_t> token_bytes, bool tcp = false)
        : members(token_bytes.size()), opened(token_bytes.size()) {
        const auto ranks = static_cast<uint32_t>(token_bytes.size());
        std::vector<std::vector<UniqueFd>> links(ranks);
        for (auto &row : links) row.resize(ranks);
        for (uint32_t a = 0; a < ranks; ++a) {
            for (uint32_t b = a + 1; b < ranks; ++b)
                std::tie(links[a][b], links[b][a]) = tcp ? tcp_pair() : unix_pair();
        }
        std::vector<std::thread> threads;
        for (uint32_t rank = 0; rank < ranks; ++rank) {
            threads.emplace_back([&, rank] {
                opened[rank] = PeerLinks::open(place_of(rank, ranks, token_bytes[rank]), std::move(links[rank]),
                                               kTimeout, &members[rank]);
            });
        }
        for (auto &thread : threads) thread.join();
    }
    explicit Group(uint32_t ranks, bool tcp = false) : Group(std::vector<uint8_t>(ranks, 7), tcp) {}

    // One all-reduce on every rank at once.
    std::vector<Status> all_reduce(std::vector<std::vector<float>> &values) {
        std::vector<Status> results(members.size());
        std::vector<std::thread> threads;
        for (size_t rank = 0; rank < members.size(); ++rank) {
            threads.emplace_back([&, rank] {
                results[rank] = members[rank].all_reduce_f32(values[rank].data(), values[rank].size(), kTimeout);
            });
        }
        for (auto &thread : threads) thread.join();
        return results;
    }

    std::vector<PeerLinks> members;
    std::vector<Status> opened;
};

// What every rank must hold: rank 0's partial plus rank 1's plus ..., in that order.
std::vector<float> rank_order_sum(const std::vector<std::vector<float>> &partials) {
    std::vector<float> sum = partials[0];
    for (size_t rank = 1; rank < partials.size(); ++rank) {
        for (size_t i = 0; i < sum.size(); ++i) sum[i] += partials[rank][i];
    }
    return sum;
}

// Partials whose sum depends on the order of the additions with three ranks or
// more ((1 + 1e8) - 1e8 is 0, (-1e8 + 1e8) + 1 is 1), so a rank that adds in
// another order holds other bits.
std::vector<std::vector<float>> partials_for(uint32_t ranks, size_t count, int step) {
    std::vector<std::vector<float>> partials(ranks, std::vector<float>(count));
    for (uint32_t rank = 0; rank < ranks; ++rank) {
        for (size_t i = 0; i < count; ++i) {
            const float big = rank == 1 ? 1e8f : (rank == ranks - 1 && rank > 1) ? -1e8f : 0.0f;
            partials[rank][i] = big + float(rank + 1) * 0.37f + float(i % 97) * 0.01f + float(step);
        }
    }
    return partials;
}

void expect_rank_order_sums(uint32_t ranks, bool tcp = false) {
    Group group(ranks, tcp);
    for (uint32_t rank = 0; rank < ranks; ++rank) ASSERT_TRUE(group.opened[rank].ok()) << group.opened[rank].message();
    for (int step = 1; step <= 5; ++step) {
        std::vector<std::vector<float>> values = partials_for(ranks, 1000 + step, step);
        const std::vector<float> expected = rank_order_sum(values);
        ASSERT_NE(expected, values[0]);  // the sum really takes in the peers' partials
        const std::vector<Status> results = group.all_reduce(values);
        for (uint32_t rank = 0; rank < ranks; ++rank) {
            ASSERT_TRUE(results[rank].ok()) << results[rank].message();
            EXPECT_EQ(std::memcmp(values[rank].data(), expected.data(), expected.size() * sizeof(float)), 0)
                << "rank " << rank << ", step " << step;
        }
    }
    EXPECT_EQ(group.members[0].steps(), 5u);
}

TEST(PeerLinks, TwoRanksHoldTheRankOrderSumBitForBit) { expect_rank_order_sums(2); }

TEST(PeerLinks, ThreeRanksHoldTheRankOrderSumBitForBit) { expect_rank_order_sums(3); }

TEST(PeerLinks, TcpLoopbackLinksCarryTheSum) { expect_rank_order_sums(3, true); }

TEST(PeerLinks, SixteenMebibytePartialsBothWaysComplete) {
    Group group(2);
    ASSERT_TRUE(group.opened[0].ok() && group.opened[1].ok());
    constexpr size_t kCount = (16u << 20) / sizeof(float);
    std::vector<std::vector<float>> values = {std::vector<float>(kCount, 1.5f), std::vector<float>(kCount, 2.25f)};
    values[1][kCount - 1] = 8.0f;
    const std::vector<Status> results = group.all_reduce(values);
    for (uint32_t rank = 0; rank < 2; ++rank) {
        ASSERT_TRUE(results[rank].ok()) << results[rank].message();
        EXPECT_EQ(values[rank][0], 3.75f);
        EXPECT_EQ(values[rank][kCount - 1], 9.5f);
    }
    EXPECT_EQ(values[0], values[1]);
}

TEST(PeerLinks, PeerWithAnotherTokenFailsTheOpenOnBothSides) {
    const auto start = Clock::now();
    Group group(std::vector<uint8_t>{7, 8});
    EXPECT_LT(Clock::now() - start, kTimeout);  // refused, not timed out
    for (uint32_t rank = 0; rank < 2; ++rank) {
        EXPECT_FALSE(group.opened[rank].ok()) << "rank " << rank;
        EXPECT_NE(group.opened[rank].message().find("TLS with peer rank"), std::string::npos)
            << group.opened[rank].message();
        EXPECT_FALSE(group.members[rank].is_open());
    }
}

TEST(PeerLinks, TokenIdIsStableAndDiffersBetweenTokens) {
    PeerLinks::Token a{}, b{};
    a.fill(1);
    b.fill(1);
    b[15] = 2;
    EXPECT_EQ(PeerLinks::token_id(a), PeerLinks::token_id(a));
    EXPECT_NE(PeerLinks::token_id(a), PeerLinks::token_id(b));
    EXPECT_NE(PeerLinks::token_id(a), PeerLinks::TokenId{});
    // The id names the group; it is neither the token nor the key.
    EXPECT_NE(std::memcmp(PeerLinks::token_id(a).data(), a.data(), a.size()), 0);
    const PreSharedKey key = PeerLinks::tls_key(a);
    ASSERT_EQ(key.key.size(), 32u);
    EXPECT_NE(std::memcmp(key.key.data(), PeerLinks::token_id(a).data(), 16), 0);
}

// A real rank 0 of a two-rank group against a fake rank 1 that the test drives:
// its own TLS with the group's key, then whatever bytes the test sends.
struct AgainstFakePeer {
    // `named_rank`: the rank the fake names after the handshake.
    explicit AgainstFakePeer(uint32_t named_rank = 1) {
        auto [ours, theirs] = unix_pair();
        fake_fd = std::move(theirs);
        auto opening = std::async(std::launch::async, [this, link = std::move(ours)]() mutable {
            std::vector<UniqueFd> links(2);
            links[1] = std::move(link);
            return PeerLinks::open(place_of(0, 2), std::move(links), kTimeout, &real);
        });
        Status fake = TlsSession::connect(fake_fd.get(), PeerLinks::tls_key(place_of(1, 2).token), 5000, &fake_tls);
        uint32_t rank_of_real = 99;
        if (fake) fake = fake_tls->write(&named_rank, sizeof(named_rank));
        if (fake) fake = fake_tls->read(&rank_of_real, sizeof(rank_of_real));
        EXPECT_TRUE(fake.ok()) << fake.message();
        EXPECT_EQ(rank_of_real, 0u);
        opened = opening.get();
    }

    void send_header(uint32_t step, uint64_t bytes) {
        const uint32_t header[4] = {step, 0, static_cast<uint32_t>(bytes), static_cast<uint32_t>(bytes >> 32)};
        ASSERT_TRUE(fake_tls->write(header, sizeof(header)).ok());
    }

    // One step of the real rank with 4 floats, and how long it took.
    Status step(std::chrono::milliseconds timeout, Clock::duration *took = nullptr) {
        float values[4] = {1, 2, 3, 4};
        const auto start = Clock::now();
        Status status = real.all_reduce_f32(values, 4, timeout);
        if (took != nullptr) *took = Clock::now() - start;
        return status;
    }

    // The step fails with `code` and `message`, and so does the next one, at once.
    void expect_broken(Code code, const std::string &message, std::chrono::milliseconds timeout = kTimeout) {
        const Status first = step(timeout);
        EXPECT_EQ(first.code(), code) << first.message();
        EXPECT_NE(first.message().find(message), std::string::npos) << first.message();
        Clock::duration took{};
        const Status later = step(kTimeout, &took);
        EXPECT_EQ(later.code(), first.code());
        EXPECT_EQ(later.message(), first.message());
        EXPECT_LT(took, 50ms);
    }

    PeerLinks real;
    Status opened;
    UniqueFd fake_fd;
    std::unique_ptr<TlsSession> fake_tls;
};

TEST(PeerLinks, FakePeerThatFollowsTheProtocolIsSummed) {
    AgainstFakePeer group;
    ASSERT_TRUE(group.opened.ok()) << group.opened.message();
    group.send_header(1, 16);
    const float theirs[4] = {10, 20, 30, 40};
    ASSERT_TRUE(group.fake_tls->write(theirs, sizeof(theirs)).ok());
    float values[4] = {1, 2, 3, 4};
    ASSERT_TRUE(group.real.all_reduce_f32(values, 4, kTimeout).ok());
    EXPECT_EQ(values[0], 11.0f);
    EXPECT_EQ(values[3], 44.0f);
    // The real rank sent its own partial, under the same header.
    uint32_t header[4] = {};
    float ours[4] = {};
    ASSERT_TRUE(group.fake_tls->read(header, sizeof(header)).ok());
    ASSERT_TRUE(group.fake_tls->read(ours, sizeof(ours)).ok());
    EXPECT_EQ(header[0], 1u);
    EXPECT_EQ(header[2], 16u);
    EXPECT_EQ(ours[2], 3.0f);
}

TEST(PeerLinks, WrongStepFailsThisStepAndEveryLaterOne) {
    AgainstFakePeer group;
    ASSERT_TRUE(group.opened.ok()) << group.opened.message();
    group.send_header(7, 16);
    group.expect_broken(Code::bad_request, "peer rank 1 sent step 7 where 1 was due");
}

TEST(PeerLinks, WrongSizeFailsThisStepAndEveryLaterOne) {
    AgainstFakePeer group;
    ASSERT_TRUE(group.opened.ok()) << group.opened.message();
    group.send_header(1, 12);
    group.expect_broken(Code::bad_request, "peer rank 1 sent 12 bytes where 16 were due");
}

TEST(PeerLinks, SilentPeerFailsTheStepAtTheTimeout) {
    AgainstFakePeer group;
    ASSERT_TRUE(group.opened.ok()) << group.opened.message();
    Clock::duration took{};
    const Status status = group.step(300ms, &took);
    EXPECT_EQ(status.code(), Code::disconnected);
    EXPECT_NE(status.message().find("peer rank 1, step 1: no answer within"), std::string::npos) << status.message();
    EXPECT_GE(took, 250ms);
    EXPECT_LT(took, 2s);
    group.expect_broken(status.code(), status.message());
}

TEST(PeerLinks, SilenceAfterTheHeaderFailsAtTheTimeoutToo) {
    AgainstFakePeer group;
    ASSERT_TRUE(group.opened.ok()) << group.opened.message();
    group.send_header(1, 16);
    group.expect_broken(Code::disconnected, "peer rank 1, step 1: no answer within", 300ms);
}

TEST(PeerLinks, ClosedPeerIsADisconnectNamingItsRank) {
    AgainstFakePeer group;
    ASSERT_TRUE(group.opened.ok()) << group.opened.message();
    group.fake_tls.reset();
    group.fake_fd.reset();
    group.expect_broken(Code::disconnected, "peer rank 1, step 1: ");
}

TEST(PeerLinks, RawBytesAfterTheHandshakeFailTheStep) {
    AgainstFakePeer group;
    ASSERT_TRUE(group.opened.ok()) << group.opened.message();
    const char raw[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    ASSERT_EQ(::write(group.fake_fd.get(), raw, sizeof(raw)), static_cast<ssize_t>(sizeof(raw)));
    const Status status = group.step(kTimeout);
    EXPECT_FALSE(status.ok());
    EXPECT_NE(status.message().find("peer rank 1, step 1: "), std::string::npos) << status.message();
    group.expect_broken(status.code(), status.message());
}

TEST(PeerLinks, RawBytesInsteadOfTlsFailTheOpenAtOnce) {
    auto [ours, theirs] = unix_pair();
    const char raw[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    ASSERT_EQ(::write(theirs.get(), raw, sizeof(raw)), static_cast<ssize_t>(sizeof(raw)));
    std::vector<UniqueFd> links(2);
    links[1] = std::move(ours);
    PeerLinks real;
    const auto start = Clock::now();
    const Status status = PeerLinks::open(place_of(0, 2), std::move(links), kTimeout, &real);
    EXPECT_LT(Clock::now() - start, 1s);
    EXPECT_FALSE(status.ok());
    EXPECT_NE(status.message().find("TLS with peer rank 1"), std::string::npos) << status.message();
    EXPECT_FALSE(real.is_open());
}

TEST(PeerLinks, SilentPeerFailsTheOpenAtTheTimeout) {
    auto [ours, theirs] = unix_pair();
    std::vector<UniqueFd> links(2);
    links[0] = std::move(ours);  // we are rank 1: the client of rank 0
    PeerLinks real;
    const auto start = Clock::now();
    const Status status = PeerLinks::open(place_of(1, 2), std::move(links), 300ms, &real);
    EXPECT_LT(Clock::now() - start, 2s);
    EXPECT_FALSE(status.ok());
    EXPECT_NE(status.message().find("TLS with peer rank 0"), std::string::npos) << status.message();
}

TEST(PeerLinks, PeerThatNamesAnotherRankFailsTheOpen) {
    AgainstFakePeer group(/*named_rank=*/0);
    EXPECT_EQ(group.opened.code(), Code::bad_request);
    EXPECT_NE(group.opened.message().find("peer rank 1 leads to a peer that says it is rank 0"), std::string::npos)
        << group.opened.message();
    EXPECT_FALSE(group.real.is_open());
}

TEST(PeerLinks, OpenChecksItsLinks) {
    PeerLinks links;
    std::vector<UniqueFd> too_few(1);
    EXPECT_FALSE(PeerLinks::open(place_of(0, 2), std::move(too_few), kTimeout, &links).ok());
    std::vector<UniqueFd> missing(2);
    const Status status = PeerLinks::open(place_of(0, 2), std::move(missing), kTimeout, &links);
    EXPECT_NE(status.message().find("no link to peer rank 1"), std::string::npos) << status.message();
    float value = 1;
    EXPECT_FALSE(links.all_reduce_f32(&value, 1, kTimeout).ok());
}

}  // namespace
}  // namespace ggml_remote
