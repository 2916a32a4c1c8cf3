// Fairness between peers: who a connection counts against, and how many sessions
// each may hold (--max-sessions-per-peer).
#include "host/listener/peer_limits.h"

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <linux/vm_sockets.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "transport/peer_account.h"
#include "transport/socket.h"

namespace ggml_remote::host {
namespace {

using ::testing::HasSubstr;

constexpr uid_t kServerUid = 990;

PeerAccount user(uid_t uid) { return {PeerAccount::Kind::user, uid, "uid " + std::to_string(uid)}; }
PeerAccount address(const std::string &ip) { return {PeerAccount::Kind::address, 0, "address " + ip}; }

TEST(PeerLimits, APeerIsRefusedAtItsCapWithAReasonThatNamesItAndTheFlag) {
    PeerLimits peers(2, kServerUid);
    const PeerAccount alice = user(1000);
    EXPECT_EQ(peers.refusal(alice), "");
    peers.opened(101, alice);
    EXPECT_EQ(peers.refusal(alice), "");
    peers.opened(102, alice);
    const std::string why = peers.refusal(alice);
    EXPECT_THAT(why, HasSubstr("uid 1000 holds 2 sessions"));
    EXPECT_THAT(why, HasSubstr("--max-sessions-per-peer 2"));
}

TEST(PeerLimits, OnePeerAtItsCapLeavesOthersTheirShare) {
    PeerLimits peers(1, kServerUid);
    peers.opened(101, user(1000));
    peers.opened(102, address("10.0.0.7"));
    EXPECT_NE(peers.refusal(user(1000)), "");
    EXPECT_NE(peers.refusal(address("10.0.0.7")), "");
    EXPECT_EQ(peers.refusal(user(1001)), "");
    EXPECT_EQ(peers.refusal(address("10.0.0.8")), "");
}

TEST(PeerLimits, AClosedSessionGivesItsPeerTheSlotBack) {
    PeerLimits peers(1, kServerUid);
    peers.opened(101, user(1000));
    ASSERT_NE(peers.refusal(user(1000)), "");
    peers.closed(101);
    EXPECT_EQ(peers.sessions("uid 1000"), 0);
    EXPECT_EQ(peers.refusal(user(1000)), "");
}

TEST(PeerLimits, AWorkerThatWasNeverOpenedOrIsClosedTwiceChangesNothing) {
    PeerLimits peers(2, kServerUid);
    peers.opened(101, user(1000));
    peers.opened(102, user(1000));
    peers.closed(555);
    peers.closed(101);
    peers.closed(101);
    EXPECT_EQ(peers.sessions("uid 1000"), 1);
}

TEST(PeerLimits, TheServersOwnUserAndRootAreNotLimitedOnUnixSockets) {
    PeerLimits peers(1, kServerUid);
    for (pid_t worker = 1; worker <= 5; ++worker) {
        peers.opened(worker, user(kServerUid));
        peers.opened(100 + worker, user(0));
    }
    EXPECT_EQ(peers.refusal(user(kServerUid)), "");
    EXPECT_EQ(peers.refusal(user(0)), "");
    EXPECT_EQ(peers.sessions("uid 0"), 5);  // still counted
}

TEST(PeerLimits, AnAddressIsNeverExemptWhateverItsAccountsUidField) {
    PeerLimits peers(1, kServerUid);
    PeerAccount tcp = address("127.0.0.1");
    tcp.uid = 0;
    peers.opened(101, tcp);
    EXPECT_NE(peers.refusal(tcp), "");
}

TEST(PeerLimits, TheDefaultIsAQuarterOfMaxSessionsAndAtLeastOne) {
    ListenerOptions options;
    EXPECT_EQ(sessions_per_peer(options), 16);  // of the default 64
    options.max_sessions = 8;
    EXPECT_EQ(sessions_per_peer(options), 2);
    options.max_sessions = 3;
    EXPECT_EQ(sessions_per_peer(options), 1);
    options.max_sessions_per_peer = 5;
    EXPECT_EQ(sessions_per_peer(options), 5);
}

sockaddr_in ipv4(const char *text) {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(4711);
    EXPECT_EQ(inet_pton(AF_INET, text, &address.sin_addr), 1);
    return address;
}

sockaddr_in6 ipv6(const char *text) {
    sockaddr_in6 address{};
    address.sin6_family = AF_INET6;
    address.sin6_port = htons(4711);
    EXPECT_EQ(inet_pton(AF_INET6, text, &address.sin6_addr), 1);
    return address;
}

std::string account_of(const sockaddr_in &a) {
    return address_account(reinterpret_cast<const sockaddr *>(&a), sizeof(a));
}
std::string account_of(const sockaddr_in6 &a) {
    return address_account(reinterpret_cast<const sockaddr *>(&a), sizeof(a));
}

TEST(PeerAccount, AnIPv4PeerCountsByItsAddressWhateverItsPort) {
    EXPECT_EQ(account_of(ipv4("10.0.0.7")), "address 10.0.0.7");
    EXPECT_EQ(account_of(ipv4("127.0.0.2")), "address 127.0.0.2");
}

TEST(PeerAccount, AnIPv4MappedPeerCountsAsItsIPv4Address) {
    EXPECT_EQ(account_of(ipv6("::ffff:10.0.0.7")), account_of(ipv4("10.0.0.7")));
}

TEST(PeerAccount, AVsockPeerCountsByItsVmsCidWhateverItsPort) {
    sockaddr_vm vm{};
    vm.svm_family = AF_VSOCK;
    vm.svm_cid = 3;
    vm.svm_port = 1234;
    const auto *address = reinterpret_cast<const sockaddr *>(&vm);
    EXPECT_EQ(address_account(address, sizeof(vm)), "vsock cid 3");
    vm.svm_port = 99;
    EXPECT_EQ(address_account(address, sizeof(vm)), "vsock cid 3");
    EXPECT_EQ(address_account(address, sizeof(vm) - 1), "");
}

TEST(PeerAccount, AnIPv6PeerCountsByItsSlash64SoItCannotPickFreshAddresses) {
    EXPECT_EQ(account_of(ipv6("2001:db8:1:2::1")), "address 2001:db8:1:2::/64");
    EXPECT_EQ(account_of(ipv6("2001:db8:1:2:dead:beef:0:7")), account_of(ipv6("2001:db8:1:2::1")));
    EXPECT_NE(account_of(ipv6("2001:db8:1:3::1")), account_of(ipv6("2001:db8:1:2::1")));
}

TEST(PeerAccount, AShortOrForeignAddressHasNoAccount) {
    const sockaddr_in address = ipv4("10.0.0.7");
    EXPECT_EQ(address_account(reinterpret_cast<const sockaddr *>(&address), 4), "");
    sockaddr other{};
    other.sa_family = AF_UNIX;
    EXPECT_EQ(address_account(&other, sizeof(other)), "");
}

TEST(PeerAccount, AUnixPeerCountsAsItsUserFromTheKernel) {
    int pair[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, pair), 0);
    UniqueFd a(pair[0]), b(pair[1]);
    PeerAccount account;
    ASSERT_TRUE(peer_account(a.get(), &account).ok());
    EXPECT_EQ(account.kind, PeerAccount::Kind::user);
    EXPECT_EQ(account.uid, ::geteuid());
    EXPECT_EQ(account.key, "uid " + std::to_string(::geteuid()));
}

TEST(PeerAccount, ATcpPeerCountsAsItsAddress) {
    Endpoint endpoint;
    ASSERT_TRUE(parse_endpoint("tcp://127.0.0.1:0", &endpoint).ok());
    UniqueFd listener, client, accepted;
    ASSERT_TRUE(listen_endpoint(&endpoint, &listener).ok());
    ASSERT_TRUE(connect_endpoint(endpoint, 2000, &client).ok());
    std::string peer;
    ASSERT_TRUE(accept_connection(listener.get(), endpoint, &accepted, &peer).ok());
    PeerAccount account;
    ASSERT_TRUE(peer_account(accepted.get(), &account).ok());
    EXPECT_EQ(account.kind, PeerAccount::Kind::address);
    EXPECT_EQ(account.key, "address 127.0.0.1");
}

TEST(PeerAccount, ASocketThatIsNotConnectedIsAnError) {
    UniqueFd unconnected(::socket(AF_INET, SOCK_STREAM, 0));
    PeerAccount account;
    EXPECT_FALSE(peer_account(unconnected.get(), &account).ok());
}

}  // namespace
}  // namespace ggml_remote::host
