// Pre-shared key files: psktool's "identity:hexkey" lines, or a bare hex key.
#include "transport/tls_key.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

namespace ggml_remote {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

const std::string kHex32 = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
const std::string kHex16 = "0f1e2d3c4b5a69788796a5b4c3d2e1f0";

std::vector<PreSharedKey> parse_ok(const std::string &text) {
    std::vector<PreSharedKey> keys;
    Status status = parse_psk_text(text, &keys);
    EXPECT_TRUE(status.ok()) << status.message();
    return keys;
}

Status parse_error(const std::string &text) {
    std::vector<PreSharedKey> keys;
    Status status = parse_psk_text(text, &keys);
    EXPECT_FALSE(status.ok()) << "accepted: " << text;
    EXPECT_TRUE(keys.empty());
    return status;
}

TEST(TlsKey, PsktoolLineGivesIdentityAndKeyBytes) {
    const auto keys = parse_ok("guest:" + kHex32 + "\n");
    ASSERT_EQ(keys.size(), 1u);
    EXPECT_EQ(keys[0].identity, "guest");
    ASSERT_EQ(keys[0].key.size(), 32u);
    EXPECT_EQ(keys[0].key[0], 0x00);
    EXPECT_EQ(keys[0].key[1], 0x11);
    EXPECT_EQ(keys[0].key[15], 0xff);
}

TEST(TlsKey, BareHexKeyHasNoIdentity) {
    const auto keys = parse_ok(kHex16);
    ASSERT_EQ(keys.size(), 1u);
    EXPECT_EQ(keys[0].identity, "");
    EXPECT_EQ(keys[0].key.size(), 16u);
    EXPECT_EQ(keys[0].key[0], 0x0f);
}

TEST(TlsKey, ServerFileHoldsOneKeyPerIdentitySkippingCommentsAndBlankLines) {
    const auto keys = parse_ok("# guests of this host\n\nalice:" + kHex32 + "\r\n  bob:" + kHex16 + "  \n");
    ASSERT_EQ(keys.size(), 2u);
    EXPECT_EQ(keys[0].identity, "alice");
    EXPECT_EQ(keys[1].identity, "bob");
    EXPECT_EQ(keys[1].key.size(), 16u);
}

TEST(TlsKey, UppercaseHexIsTheSameKey) {
    std::string upper = kHex32;
    for (char &c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    EXPECT_EQ(parse_ok("g:" + upper)[0].key, parse_ok("g:" + kHex32)[0].key);
}

TEST(TlsKey, IdentityMayContainColons) {
    const auto keys = parse_ok("host:guest:" + kHex16);
    ASSERT_EQ(keys.size(), 1u);
    EXPECT_EQ(keys[0].identity, "host:guest");
}

TEST(TlsKey, KeyShorterThanSixteenBytesIsRefused) {
    Status status = parse_error("guest:" + kHex16.substr(0, 30));
    EXPECT_THAT(status.message(), AllOf(HasSubstr("line 1"), HasSubstr("15 bytes"), HasSubstr("at least 16")));
}

TEST(TlsKey, MalformedKeysAreRefusedWithoutEchoingTheKey) {
    const std::string secret_part = "0123456789abcdef0123456789abcdeZ";
    Status status = parse_error("# comment\nguest:" + secret_part);
    EXPECT_THAT(status.message(),
                AllOf(HasSubstr("line 2"), HasSubstr("not hexadecimal"), Not(HasSubstr("0123456789"))));
    EXPECT_THAT(parse_error("guest:" + kHex16 + "a").message(), HasSubstr("odd number"));
    EXPECT_THAT(parse_error("guest:").message(), HasSubstr("no key"));
    EXPECT_THAT(parse_error(":" + kHex16).message(), HasSubstr("empty identity"));
}

TEST(TlsKey, SecondKeyForAnIdentityIsRefused) {
    EXPECT_THAT(parse_error("a:" + kHex16 + "\na:" + kHex32).message(), HasSubstr("second key for identity 'a'"));
    EXPECT_THAT(parse_error(kHex16 + "\n" + kHex32).message(), HasSubstr("second bare key"));
}

TEST(TlsKey, TextWithoutAnyKeyIsRefused) {
    EXPECT_THAT(parse_error("").message(), HasSubstr("no key"));
    EXPECT_THAT(parse_error("# nothing\n\n").message(), HasSubstr("no key"));
}

TEST(TlsKey, FileErrorsNameTheFile) {
    std::vector<PreSharedKey> keys;
    Status status = read_psk_file("/nonexistent/ggml-remote.psk", &keys);
    EXPECT_FALSE(status.ok());
    EXPECT_THAT(status.message(), AllOf(HasSubstr("/nonexistent/ggml-remote.psk"), HasSubstr("No such file")));

    char path[] = "/tmp/ggml-remote-psk-XXXXXX";
    const int fd = ::mkstemp(path);
    ASSERT_GE(fd, 0);
    ::close(fd);
    std::ofstream(path) << "guest:abcd\n";
    status = read_psk_file(path, &keys);
    EXPECT_THAT(status.message(), AllOf(HasSubstr(path), HasSubstr("line 1"), HasSubstr("at least 16")));

    std::ofstream(path) << "guest:" << kHex32 << "\n";
    status = read_psk_file(path, &keys);
    EXPECT_TRUE(status.ok()) << status.message();
    ASSERT_EQ(keys.size(), 1u);
    EXPECT_EQ(keys[0].identity, "guest");
    std::remove(path);
}

TEST(TlsKey, OnlyARegularFileOfAtMostOneMebibyteIsAKeyFile) {
    char dir[] = "/tmp/ggml-remote-psk-XXXXXX";
    ASSERT_NE(::mkdtemp(dir), nullptr);
    std::vector<PreSharedKey> keys;
    EXPECT_THAT(read_psk_file(dir, &keys).message(), AllOf(HasSubstr(dir), HasSubstr("not a regular file")));
    // A FIFO is refused, not waited on.
    const std::string fifo = std::string(dir) + "/fifo";
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    EXPECT_THAT(read_psk_file(fifo, &keys).message(), HasSubstr("not a regular file"));
    const std::string huge = std::string(dir) + "/huge";
    std::ofstream(huge) << "guest:" << kHex32 << "\n";
    ASSERT_EQ(::truncate(huge.c_str(), (1 << 20) + 1), 0);
    EXPECT_THAT(read_psk_file(huge, &keys).message(), HasSubstr("too large"));
    std::remove(fifo.c_str());
    std::remove(huge.c_str());
    ::rmdir(dir);
}

TEST(TlsKey, WipeZeroesTheKeyBytesAndKeepsTheIdentity) {
    PreSharedKey key("guest", std::vector<uint8_t>(32, 0xaa));
    key.wipe();
    EXPECT_EQ(key.key, std::vector<uint8_t>(32, 0));
    EXPECT_EQ(key.identity, "guest");
}

}  // namespace
}  // namespace ggml_remote
