// PSK binders (psk_binder.h): the proof a TLS worker sends its listener before the
// listener gives it a key. Taken from real handshakes; a proof for a key the
// client does not hold, or a forged one, must never match.
#include "transport/psk_binder.h"

#include <gtest/gtest.h>
#include <sys/socket.h>

#include <cstring>
#include <future>
#include <random>
#include <string>
#include <vector>

#include "transport/tls_session.h"
#include "transport/unique_fd.h"

namespace ggml_remote {
namespace {

constexpr int kTimeoutMs = 5000;

std::vector<uint8_t> key_bytes(uint8_t fill) { return std::vector<uint8_t>(32, fill); }

// A real guest's handshake against a server whose oracle answers with `answer`;
// the proof the server's side saw, and both sides' outcomes.
struct Handshake {
    BinderProof proof;
    int asked = 0;
    Status guest, host;
};

Handshake handshake(const PreSharedKey &guest_key, const TlsSession::KeyOracle &answer) {
    int fds[2] = {-1, -1};
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
    UniqueFd guest_end(fds[0]), host_end(fds[1]);
    Handshake result;
    auto accepted = std::async(std::launch::async, [&] {
        std::unique_ptr<TlsSession> tls;
        const TlsSession::KeyOracle oracle = [&](const BinderProof &proof, std::vector<uint8_t> *key) {
            result.proof = proof;
            ++result.asked;
            return answer(proof, key);
        };
        Status status = TlsSession::accept(host_end.get(), oracle, kTimeoutMs, &tls);
        if (!status) host_end.reset();  // the guest then sees the end
        return status;
    });
    std::unique_ptr<TlsSession> tls;
    result.guest = TlsSession::connect(guest_end.get(), guest_key, kTimeoutMs, &tls);
    if (!result.guest) guest_end.reset();
    result.host = accepted.get();
    return result;
}

TEST(PskBinder, ARealClientsProofMatchesItsKeyAndNoOther) {
    const std::vector<PreSharedKey> keys = {{"alice", key_bytes(1)}, {"bob", key_bytes(2)}};
    const Handshake done = handshake(
        keys[0], [&](const BinderProof &proof, std::vector<uint8_t> *key) { return key_for_proof(keys, proof, key); });
    ASSERT_TRUE(done.host.ok()) << done.host.message();
    ASSERT_TRUE(done.guest.ok()) << done.guest.message();
    EXPECT_EQ(done.asked, 1);
    EXPECT_EQ(done.proof.identity_text(), "alice");
    EXPECT_EQ(done.proof.hash_bytes, 32u);
    EXPECT_TRUE(binder_matches(key_bytes(1), done.proof));
    EXPECT_FALSE(binder_matches(key_bytes(2), done.proof)) << "bob's key";
    std::vector<uint8_t> almost = key_bytes(1);
    almost.back() ^= 1;
    EXPECT_FALSE(binder_matches(almost, done.proof)) << "one bit off";
}

TEST(PskBinder, AForgedProofMatchesNothing) {
    const std::vector<PreSharedKey> keys = {{"alice", key_bytes(1)}};
    const Handshake done = handshake(
        keys[0], [&](const BinderProof &proof, std::vector<uint8_t> *key) { return key_for_proof(keys, proof, key); });
    ASSERT_TRUE(done.host.ok()) << done.host.message();
    BinderProof forged = done.proof;
    forged.binder[0] ^= 0x80;
    EXPECT_FALSE(binder_matches(key_bytes(1), forged)) << "a changed binder";
    forged = done.proof;
    forged.transcript_hash[5] ^= 1;
    EXPECT_FALSE(binder_matches(key_bytes(1), forged)) << "the binder of another ClientHello";
    forged = done.proof;
    forged.hash_bytes = 16;
    EXPECT_FALSE(binder_matches(key_bytes(1), forged)) << "a hash size of no TLS hash";
    forged = BinderProof();
    std::memcpy(forged.identity, "alice", 5);
    forged.identity_size = 5;
    forged.hash_bytes = 32;
    std::vector<uint8_t> key;
    EXPECT_EQ(key_for_proof(keys, forged, &key).code(), Code::bad_request) << "a proof of zeros";
    EXPECT_TRUE(key.empty());
    forged.identity_size = kMaxProofIdentityBytes + 1;
    EXPECT_EQ(key_for_proof(keys, forged, &key).code(), Code::bad_request) << "an identity past its field";
}

TEST(PskBinder, AnUnknownIdentityOrAWrongKeyFailsTheHandshakeWithItsReason) {
    const std::vector<PreSharedKey> keys = {{"alice", key_bytes(1)}};
    const auto oracle = [&](const BinderProof &proof, std::vector<uint8_t> *key) {
        return key_for_proof(keys, proof, key);
    };
    const Handshake unknown = handshake({"mallory", key_bytes(1)}, oracle);
    EXPECT_FALSE(unknown.host.ok());
    EXPECT_NE(unknown.host.message().find("unknown identity 'mallory'"), std::string::npos) << unknown.host.message();
    EXPECT_FALSE(unknown.guest.ok());
    const Handshake wrong = handshake({"alice", key_bytes(9)}, oracle);
    EXPECT_FALSE(wrong.host.ok());
    EXPECT_NE(wrong.host.message().find("wrong pre-shared key for identity 'alice'"), std::string::npos)
        << wrong.host.message();
    EXPECT_NE(wrong.guest.message().find("wrong pre-shared key"), std::string::npos) << wrong.guest.message();
}

TEST(PskBinder, ClientHellosThatDoNotParseAreRefusedNotRead) {
    std::mt19937 random(7);
    BinderProof proof;
    for (size_t size = 0; size < 600; ++size) {
        std::vector<uint8_t> bytes(size);
        for (uint8_t &byte : bytes) byte = static_cast<uint8_t>(random());
        EXPECT_FALSE(binder_proof_from_client_hello(bytes.data(), bytes.size(), "alice", &proof).ok());
    }
    // Lengths that point past the end at every level.
    std::vector<uint8_t> lying(2 + 32, 0);
    for (uint8_t byte : {0xff, 0xff, 0xff, 0xff, 0xff, 0xff}) lying.push_back(byte);
    EXPECT_FALSE(binder_proof_from_client_hello(lying.data(), lying.size(), "alice", &proof).ok());
}

}  // namespace
}  // namespace ggml_remote
