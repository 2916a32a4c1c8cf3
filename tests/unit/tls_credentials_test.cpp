// The guest's key for a tls:// server: the server's own psk-file= first, else the
// global GGML_REMOTE_TLS_PSK_FILE / GGML_REMOTE_TLS_PSK.
#include "guest/tls_credentials.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

namespace ggml_remote::guest {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

const std::string kHexA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
const std::string kHexB = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

// A directory of key files, removed with everything in it.
class KeyFiles {
  public:
    KeyFiles() {
        char pattern[] = "/tmp/ggml-remote-keys-XXXXXX";
        dir_ = ::mkdtemp(pattern);
    }
    ~KeyFiles() { std::system(("rm -rf " + dir_).c_str()); }
    std::string write(const std::string &name, const std::string &text) {
        const std::string path = dir_ + "/" + name;
        std::ofstream(path) << text;
        ::chmod(path.c_str(), 0600);
        return path;
    }
    std::string path(const std::string &name) const { return dir_ + "/" + name; }

  private:
    std::string dir_;
};

Endpoint tls_endpoint(const std::string &options) {
    Endpoint endpoint;
    Status status = parse_endpoint("tls://127.0.0.1:50053" + options, &endpoint);
    EXPECT_TRUE(status.ok()) << status.message();
    return endpoint;
}

std::vector<uint8_t> bytes_of(uint8_t fill) { return std::vector<uint8_t>(32, fill); }

TEST(TlsCredentials, ServersOwnKeyFileComesBeforeTheGlobalKey) {
    KeyFiles files;
    const std::string own = files.write("own.psk", "guest:" + kHexA + "\n");
    GuestOptions options;
    options.tls_psk = "guest:" + kHexB;
    PreSharedKey key;
    ASSERT_TRUE(tls_key_for(tls_endpoint("?psk-file=" + own), options, &key).ok());
    EXPECT_EQ(key.identity, "guest");
    EXPECT_EQ(key.key, bytes_of(0xaa));
    ASSERT_TRUE(tls_key_for(tls_endpoint(""), options, &key).ok());
    EXPECT_EQ(key.key, bytes_of(0xbb));
}

TEST(TlsCredentials, ServerWithoutItsOwnKeyNeedsTheGlobalOne) {
    PreSharedKey key;
    Status status = tls_key_for(tls_endpoint(""), GuestOptions{}, &key);
    EXPECT_FALSE(status.ok());
    EXPECT_THAT(status.message(),
                AllOf(HasSubstr("no pre-shared key"), HasSubstr("GGML_REMOTE_TLS_PSK_FILE"), HasSubstr("psk-file=")));
}

TEST(TlsCredentials, IdentityPicksItsLineOfTheKeyFile) {
    KeyFiles files;
    const std::string both = files.write("both.psk", "alice:" + kHexA + "\nbob:" + kHexB + "\n");
    PreSharedKey key;
    ASSERT_TRUE(tls_key_for(tls_endpoint("?psk-file=" + both + "&psk-identity=bob"), {}, &key).ok());
    EXPECT_EQ(key.identity, "bob");
    EXPECT_EQ(key.key, bytes_of(0xbb));
}

TEST(TlsCredentials, KeyFileWithSeveralKeysNeedsAnIdentity) {
    KeyFiles files;
    const std::string both = files.write("both.psk", "alice:" + kHexA + "\nbob:" + kHexB + "\n");
    PreSharedKey key;
    Status status = tls_key_for(tls_endpoint("?psk-file=" + both), {}, &key);
    EXPECT_THAT(status.message(), AllOf(HasSubstr(both), HasSubstr("2 keys"), HasSubstr("psk-identity=")));
    status = tls_key_for(tls_endpoint("?psk-file=" + both + "&psk-identity=carol"), {}, &key);
    EXPECT_THAT(status.message(), AllOf(HasSubstr("no key for identity 'carol'"), HasSubstr("'alice', 'bob'")));
    EXPECT_THAT(status.message(), Not(HasSubstr(kHexA.substr(0, 8))));
}

TEST(TlsCredentials, BareKeyIsPresentedUnderTheGivenIdentity) {
    KeyFiles files;
    const std::string bare = files.write("bare.psk", kHexA + "\n");
    PreSharedKey key;
    ASSERT_TRUE(tls_key_for(tls_endpoint("?psk-file=" + bare + "&psk-identity=gpu-guest"), {}, &key).ok());
    EXPECT_EQ(key.identity, "gpu-guest");
    EXPECT_EQ(key.key, bytes_of(0xaa));
}

TEST(TlsCredentials, ServersKeyFileIsCheckedAsTheGlobalOne) {
    KeyFiles files;
    PreSharedKey key;
    const std::string missing = files.path("missing.psk");
    EXPECT_THAT(tls_key_for(tls_endpoint("?psk-file=" + missing), {}, &key).message(),
                AllOf(HasSubstr("psk-file"), HasSubstr(missing), HasSubstr("No such file")));
    const std::string short_key = files.write("short.psk", "guest:abcd\n");
    EXPECT_THAT(tls_key_for(tls_endpoint("?psk-file=" + short_key), {}, &key).message(),
                AllOf(HasSubstr(short_key), HasSubstr("line 1"), HasSubstr("at least 16")));
    const std::string not_hex = files.write("nothex.psk", "guest:" + std::string(64, 'z') + "\n");
    EXPECT_THAT(tls_key_for(tls_endpoint("?psk-file=" + not_hex), {}, &key).message(), HasSubstr("not hexadecimal"));
    const std::string huge = files.write("huge.psk", "");
    ASSERT_EQ(::truncate(huge.c_str(), 2 << 20), 0);
    EXPECT_THAT(tls_key_for(tls_endpoint("?psk-file=" + huge), {}, &key).message(), HasSubstr("too large"));
    EXPECT_THAT(tls_key_for(tls_endpoint("?psk-file=/tmp"), {}, &key).message(), HasSubstr("not a regular file"));
    const std::string fifo = files.path("fifo.psk");
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    EXPECT_THAT(tls_key_for(tls_endpoint("?psk-file=" + fifo), {}, &key).message(), HasSubstr("not a regular file"));
}

TEST(TlsCredentials, GlobalKeyFileWithSeveralKeysIsRefused) {
    KeyFiles files;
    GuestOptions options;
    options.tls_psk_file = files.write("both.psk", "alice:" + kHexA + "\nbob:" + kHexB + "\n");
    PreSharedKey key;
    EXPECT_THAT(tls_key_for(tls_endpoint(""), options, &key).message(),
                AllOf(HasSubstr("GGML_REMOTE_TLS_PSK_FILE"), HasSubstr("2 keys")));
}

}  // namespace
}  // namespace ggml_remote::guest
