// The server's settings from its environment (host/common/serving_options.h).
#include "host/common/serving_options.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "host/common/serving_flags.h"

namespace ggml_remote::host {
namespace {

using ::testing::HasSubstr;

// Each test starts without the variables (ctest runs it in a process of its own).
class ServerEnvironment : public ::testing::Test {
  protected:
    void SetUp() override { clear(); }
    void TearDown() override { clear(); }
    static void clear() {
        for (const char *name :
             {"GGML_REMOTE_RING_SPIN_US", "GGML_REMOTE_SPIN_SPARE", "GGML_REMOTE_RECORD_DIR", "GGML_BACKEND_PATH"}) {
            unsetenv(name);
        }
    }
};

TEST_F(ServerEnvironment, NoVariablesKeepTheDefaults) {
    ServingOptions options;
    ASSERT_TRUE(read_server_environment(&options).ok());
    EXPECT_EQ(options.waiting.max_spin_ns, 200000u);
    EXPECT_TRUE(options.waiting.spin_on_spare_cores);
    EXPECT_EQ(options.record_dir, "");
    EXPECT_EQ(options.backend_path, "");
}

TEST_F(ServerEnvironment, WaitSettingsAndRecordDirectoryAreRead) {
    setenv("GGML_REMOTE_RING_SPIN_US", "50", 1);
    setenv("GGML_REMOTE_SPIN_SPARE", "0", 1);
    setenv("GGML_REMOTE_RECORD_DIR", "/tmp/frames", 1);
    ServingOptions options;
    ASSERT_TRUE(read_server_environment(&options).ok());
    EXPECT_EQ(options.waiting.max_spin_ns, 50000u);
    EXPECT_FALSE(options.waiting.spin_on_spare_cores);
    EXPECT_EQ(options.record_dir, "/tmp/frames");
}

// The worker's sandbox grants both paths (landlock.h): they come from here only.
TEST_F(ServerEnvironment, BackendPathAndRecordDirectoryReachTheWorkersPaths) {
    setenv("GGML_BACKEND_PATH", "/opt/ggml/libggml-cuda.so", 1);
    setenv("GGML_REMOTE_RECORD_DIR", "/tmp/frames", 1);
    ServingOptions options;
    ASSERT_TRUE(read_server_environment(&options).ok());
    const WorkerPaths paths = worker_paths(options);
    EXPECT_EQ(paths.backend_path, "/opt/ggml/libggml-cuda.so");
    EXPECT_EQ(paths.record_dir, "/tmp/frames");
}

TEST_F(ServerEnvironment, MalformedSpinLimitIsNamedAndKeepsItsDefault) {
    setenv("GGML_REMOTE_RING_SPIN_US", "fast", 1);
    ServingOptions options;
    const Status status = read_server_environment(&options);
    EXPECT_FALSE(status.ok());
    EXPECT_THAT(status.message(), HasSubstr("GGML_REMOTE_RING_SPIN_US=fast"));
    EXPECT_EQ(options.waiting.max_spin_ns, 200000u);
}

// A command line as main() gets it.
struct Argv {
    explicit Argv(std::vector<std::string> words) : words(std::move(words)) {
        for (std::string &word : this->words) pointers.push_back(word.data());
    }
    int argc() const { return static_cast<int>(pointers.size()); }
    char **argv() { return pointers.data(); }
    std::vector<std::string> words;
    std::vector<char *> pointers;
};

TEST(CommandLine, AFlagTakesItsValueAfterItOrAfterAnEqualsSign) {
    Argv line({"ggml-remote-server", "--threads=3", "--listen", "unix:/x.sock", "--listen=tcp://127.0.0.1:1",
               "--keep-sessions", "-l", "unix:/y.sock"});
    CommandLineCursor args(line.argc(), line.argv());
    std::vector<std::pair<std::string, std::string>> seen;
    std::vector<std::string> given;
    while (args.next()) {
        const std::string flag = args.flag();
        seen.emplace_back(flag, flag == "--keep-sessions" ? "" : args.value());
        args.append_given(&given);
    }
    EXPECT_THAT(seen,
                ::testing::ElementsAre(std::make_pair("--threads", "3"), std::make_pair("--listen", "unix:/x.sock"),
                                       std::make_pair("--listen", "tcp://127.0.0.1:1"),
                                       std::make_pair("--keep-sessions", ""), std::make_pair("-l", "unix:/y.sock")));
    EXPECT_THAT(given, ::testing::ElementsAre("--threads=3", "--listen", "unix:/x.sock", "--listen=tcp://127.0.0.1:1",
                                              "--keep-sessions", "-l", "unix:/y.sock"))
        << "the workers are handed the flags as given";
}

TEST(CommandLineDeathTest, AValueForAFlagThatTakesNoneIsAnError) {
    Argv line({"ggml-remote-server", "--keep-sessions=yes"});
    CommandLineCursor args(line.argc(), line.argv());
    ASSERT_TRUE(args.next());
    EXPECT_EQ(args.flag(), "--keep-sessions");
    EXPECT_EXIT((void)args.next(), ::testing::ExitedWithCode(2), HasSubstr("--keep-sessions takes no value"));
}

TEST(CommandLineDeathTest, AFlagAtTheEndWithoutItsValueIsAnError) {
    Argv line({"ggml-remote-server", "--threads"});
    CommandLineCursor args(line.argc(), line.argv());
    ASSERT_TRUE(args.next());
    EXPECT_EXIT((void)args.value(), ::testing::ExitedWithCode(2), HasSubstr("--threads needs a value"));
}

TEST(CommandLine, LogFormatIsAServingFlagTheWorkersGet) {
    Argv line({"ggml-remote-server", "--log-format=json"});
    CommandLineCursor args(line.argc(), line.argv());
    ServingOptions options;
    ASSERT_TRUE(args.next());
    EXPECT_EQ(options.log_format, LogFormat::text) << "the default";
    ASSERT_TRUE(parse_serving_flag(args, &options));
    EXPECT_EQ(options.log_format, LogFormat::json);
}

TEST(CommandLineDeathTest, AnUnknownLogFormatIsAnError) {
    Argv line({"ggml-remote-server", "--log-format", "xml"});
    CommandLineCursor args(line.argc(), line.argv());
    ServingOptions options;
    ASSERT_TRUE(args.next());
    EXPECT_EXIT((void)parse_serving_flag(args, &options), ::testing::ExitedWithCode(2),
                HasSubstr("--log-format takes text or json, not 'xml'"));
}

TEST(CommandLineDeathTest, AnErrorNamesWhereTheFlagWasWritten) {
    Argv line({"ggml-remote-server", "--max-sessions=none"});
    CommandLineCursor args(line.argc(), line.argv());
    ServingOptions options;
    ASSERT_TRUE(args.next());
    const FlagOrigin origin("/etc/ggml-remote/server.conf:7");
    EXPECT_EXIT((void)parse_serving_flag(args, &options), ::testing::ExitedWithCode(2),
                HasSubstr("ggml-remote-server: /etc/ggml-remote/server.conf:7: --max-sessions: expected"));
}

}  // namespace
}  // namespace ggml_remote::host
