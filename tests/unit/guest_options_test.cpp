// GuestOptions: the plugin's environment, read once (guest/guest_options.h).
#include "guest/guest_options.h"

#include <ggml.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

namespace ggml_remote::guest {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;

// An environment of the given variables only, and the guest's log lines while it is read.
class GuestOptionsTest : public ::testing::Test {
  protected:
    static void keep_line(ggml_log_level, const char *text, void *lines) {
        static_cast<std::vector<std::string> *>(lines)->push_back(text);
    }
    void SetUp() override { ggml_log_set(keep_line, &log_lines); }
    void TearDown() override { ggml_log_set(nullptr, nullptr); }

    GuestOptions read(std::map<std::string, std::string> variables) {
        environment = std::move(variables);
        return read_guest_options([this](const char *name) -> const char * {
            auto found = environment.find(name);
            return found != environment.end() ? found->second.c_str() : nullptr;
        });
    }

    std::map<std::string, std::string> environment;
    std::vector<std::string> log_lines;
};

TEST_F(GuestOptionsTest, AnEmptyEnvironmentGivesTheDocumentedDefaults) {
    const GuestOptions options = read({});
    EXPECT_EQ(options.servers, "");
    EXPECT_EQ(options.connect_timeout_ms, 5000);
    EXPECT_EQ(options.tls_psk_file, "");
    EXPECT_EQ(options.tls_psk, "");
    EXPECT_FALSE(options.print_stats);
    EXPECT_TRUE(options.shared_ring);
    EXPECT_TRUE(options.mapped_weights);
    EXPECT_EQ(options.store_min_bytes, size_t(64) << 10);
    EXPECT_EQ(options.cache_dir, "") << "no HOME, no XDG_CACHE_HOME: digests are not kept";
    EXPECT_EQ(options.waiting.max_spin_ns, 200000u);
    EXPECT_TRUE(options.waiting.spin_on_spare_cores);
    EXPECT_TRUE(options.waiting.follow_worker);
    EXPECT_THAT(log_lines, IsEmpty());
}

TEST_F(GuestOptionsTest, EachVariableSetsItsOption) {
    const GuestOptions options = read({{"GGML_REMOTE_SERVERS", "unix:/a.sock,tcp://b:1"},
                                       {"GGML_REMOTE_CONNECT_TIMEOUT_MS", "250"},
                                       {"GGML_REMOTE_TLS_PSK_FILE", "/k.psk"},
                                       {"GGML_REMOTE_TLS_PSK", "vm:00ff"},
                                       {"GGML_REMOTE_STATS", "1"},
                                       {"GGML_REMOTE_SHARED_RING", "0"},
                                       {"GGML_REMOTE_MAPPED_WEIGHTS", "0"},
                                       {"GGML_REMOTE_STORE_MIN_BYTES", "4194304"},
                                       {"GGML_REMOTE_CACHE_DIR", "/tmp/digests"},
                                       {"GGML_REMOTE_RING_SPIN_US", "0"},
                                       {"GGML_REMOTE_SPIN_SPARE", "0"},
                                       {"GGML_REMOTE_FOLLOW_WORKER", "0"}});
    EXPECT_EQ(options.servers, "unix:/a.sock,tcp://b:1");
    EXPECT_EQ(options.connect_timeout_ms, 250);
    EXPECT_EQ(options.tls_psk_file, "/k.psk");
    EXPECT_EQ(options.tls_psk, "vm:00ff");
    EXPECT_TRUE(options.print_stats);
    EXPECT_FALSE(options.shared_ring);
    EXPECT_FALSE(options.mapped_weights);
    EXPECT_EQ(options.store_min_bytes, 4194304u);
    EXPECT_EQ(options.cache_dir, "/tmp/digests");
    EXPECT_EQ(options.waiting.max_spin_ns, 0u);
    EXPECT_FALSE(options.waiting.spin_on_spare_cores);
    EXPECT_FALSE(options.waiting.follow_worker);
    EXPECT_THAT(log_lines, IsEmpty());
}

TEST_F(GuestOptionsTest, ReconnectingIsOnByDefaultAndItsPauseBounded) {
    GuestOptions options = read({});
    EXPECT_TRUE(options.reconnect);
    EXPECT_EQ(options.reconnect_max_delay_ms, 1000);
    options = read({{"GGML_REMOTE_RECONNECT", "0"}, {"GGML_REMOTE_RECONNECT_MAX_DELAY_MS", "250"}});
    EXPECT_FALSE(options.reconnect);
    EXPECT_EQ(options.reconnect_max_delay_ms, 250);
    EXPECT_THAT(log_lines, IsEmpty());
    options = read({{"GGML_REMOTE_RECONNECT_MAX_DELAY_MS", "1"}});  // below 10 ms: attempts would spin
    EXPECT_EQ(options.reconnect_max_delay_ms, 1000);
    ASSERT_EQ(log_lines.size(), 1u);
    EXPECT_THAT(log_lines[0], HasSubstr("GGML_REMOTE_RECONNECT_MAX_DELAY_MS"));
}

TEST_F(GuestOptionsTest, ReplyTimeoutIsMinutesByDefaultAndZeroTurnsItOff) {
    EXPECT_EQ(read({}).reply_timeout_ms, 600000);
    EXPECT_EQ(read({{"GGML_REMOTE_REPLY_TIMEOUT_MS", "2000"}}).reply_timeout_ms, 2000);
    EXPECT_EQ(read({{"GGML_REMOTE_REPLY_TIMEOUT_MS", "0"}}).reply_timeout_ms, 0);
    EXPECT_THAT(log_lines, IsEmpty());
    EXPECT_EQ(read({{"GGML_REMOTE_REPLY_TIMEOUT_MS", "soon"}}).reply_timeout_ms, 600000);
    ASSERT_EQ(log_lines.size(), 1u);
    EXPECT_THAT(log_lines[0], HasSubstr("GGML_REMOTE_REPLY_TIMEOUT_MS"));
}

TEST_F(GuestOptionsTest, ASilenceOfSecondsEndsTheSessionOnlyWhereTheServerKeepsItAlive) {
    const GuestOptions defaults = read({});
    EXPECT_EQ(defaults.silence_timeout_ms, kKeepAliveSilenceMs);
    EXPECT_EQ(defaults.silence_limit_ms(true), 15000);
    EXPECT_EQ(defaults.silence_limit_ms(false), 600000) << "an older server is silent while it computes";
    const GuestOptions shorter = read({{"GGML_REMOTE_SILENCE_TIMEOUT_MS", "4000"}});
    EXPECT_EQ(shorter.silence_limit_ms(true), 4000);
    const GuestOptions impatient = read({{"GGML_REMOTE_REPLY_TIMEOUT_MS", "2000"}});
    EXPECT_EQ(impatient.silence_limit_ms(true), 2000) << "never above the reply timeout";
    const GuestOptions unbounded = read({{"GGML_REMOTE_REPLY_TIMEOUT_MS", "0"}});
    EXPECT_EQ(unbounded.silence_limit_ms(true), 15000);
    EXPECT_EQ(unbounded.silence_limit_ms(false), 0);
    EXPECT_EQ(read({{"GGML_REMOTE_SILENCE_TIMEOUT_MS", "0"}}).silence_limit_ms(true), 600000);
    EXPECT_THAT(log_lines, IsEmpty());
    EXPECT_EQ(read({{"GGML_REMOTE_SILENCE_TIMEOUT_MS", "soon"}}).silence_timeout_ms, kKeepAliveSilenceMs);
    ASSERT_EQ(log_lines.size(), 1u);
    EXPECT_THAT(log_lines[0], HasSubstr("GGML_REMOTE_SILENCE_TIMEOUT_MS"));
}

TEST_F(GuestOptionsTest, WeightStoreZeroTurnsDigestsOffWhateverTheMinimum) {
    EXPECT_EQ(read({{"GGML_REMOTE_WEIGHT_STORE", "0"}, {"GGML_REMOTE_STORE_MIN_BYTES", "4194304"}}).store_min_bytes,
              0u);
    EXPECT_EQ(read({{"GGML_REMOTE_WEIGHT_STORE", "1"}}).store_min_bytes, size_t(64) << 10);
}

// Every weight a guest may name is worth a lookup (a layer's small matrices are a
// quarter of a mid-sized quantized model), unless the guest says otherwise.
TEST_F(GuestOptionsTest, EveryNameableWeightIsLookedUpUnlessToldOtherwise) {
    EXPECT_EQ(read({}).store_min_bytes, protocol::kMinWeightLookupBytes);
    EXPECT_EQ(read({{"GGML_REMOTE_STORE_MIN_BYTES", "4194304"}}).store_min_bytes, 4194304u);
    EXPECT_EQ(read({{"GGML_REMOTE_WEIGHT_STORE", "0"}}).store_min_bytes, 0u);
}

TEST_F(GuestOptionsTest, StoreMinimumNeverGoesBelowTheProtocolsMinimum) {
    EXPECT_EQ(read({{"GGML_REMOTE_STORE_MIN_BYTES", "1"}}).store_min_bytes, 65536u);
}

TEST_F(GuestOptionsTest, CacheDirectoryFallsBackToXdgThenHome) {
    EXPECT_EQ(read({{"XDG_CACHE_HOME", "/xdg"}, {"HOME", "/home/u"}}).cache_dir, "/xdg/ggml-remote");
    EXPECT_EQ(read({{"HOME", "/home/u"}}).cache_dir, "/home/u/.cache/ggml-remote");
    EXPECT_EQ(read({{"XDG_CACHE_HOME", "relative"}, {"HOME", "/home/u"}}).cache_dir, "/home/u/.cache/ggml-remote")
        << "a relative XDG_CACHE_HOME is ignored, as the XDG specification asks";
}

TEST_F(GuestOptionsTest, MalformedNumberIsLoggedByNameAndKeepsItsDefault) {
    const GuestOptions options = read({{"GGML_REMOTE_CONNECT_TIMEOUT_MS", "5s"},
                                       {"GGML_REMOTE_RING_SPIN_US", "200000"},
                                       {"GGML_REMOTE_STORE_MIN_BYTES", "-1"}});
    EXPECT_EQ(options.connect_timeout_ms, 5000);
    EXPECT_EQ(options.waiting.max_spin_ns, 200000u);
    EXPECT_EQ(options.store_min_bytes, size_t(64) << 10);
    ASSERT_EQ(log_lines.size(), 3u);
    EXPECT_THAT(log_lines[0], HasSubstr("GGML_REMOTE_CONNECT_TIMEOUT_MS=5s is not a number from 1 to"));
    EXPECT_THAT(log_lines[1], HasSubstr("GGML_REMOTE_STORE_MIN_BYTES=-1"));
    EXPECT_THAT(log_lines[2], HasSubstr("GGML_REMOTE_RING_SPIN_US=200000 is not a number from 0 to 100000"));
}

TEST_F(GuestOptionsTest, ZeroTimeoutIsMalformedNotAnEndlessWait) {
    EXPECT_EQ(read({{"GGML_REMOTE_CONNECT_TIMEOUT_MS", "0"}}).connect_timeout_ms, 5000);
    EXPECT_EQ(log_lines.size(), 1u);
}

}  // namespace
}  // namespace ggml_remote::guest
