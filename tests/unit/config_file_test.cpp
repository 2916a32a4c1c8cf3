// The server's configuration file, split into flags (host/common/config_file.h).
#include "host/common/config_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "fifo_watchdog.h"

namespace ggml_remote::host {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<std::string> arguments_of(const std::string &text) {
    std::vector<ConfigArgument> settings;
    const Status status = parse_config_text(text, "server.conf", &settings);
    EXPECT_TRUE(status.ok()) << status.message();
    std::vector<std::string> arguments;
    for (const ConfigArgument &setting : settings) arguments.push_back(setting.argument);
    return arguments;
}

std::string refusal_of(const std::string &text) {
    std::vector<ConfigArgument> settings;
    const Status status = parse_config_text(text, "server.conf", &settings);
    EXPECT_FALSE(status.ok());
    return status.message();
}

TEST(ConfigFile, EachSettingBecomesTheFlagWithItsValue) {
    EXPECT_THAT(arguments_of("listen = unix:/run/x.sock\nmax-sessions=8\n"),
                ElementsAre("--listen=unix:/run/x.sock", "--max-sessions=8"));
}

TEST(ConfigFile, ABareNameIsASwitch) {
    EXPECT_THAT(arguments_of("keep-sessions\n  no-repack  \n"), ElementsAre("--keep-sessions", "--no-repack"));
}

TEST(ConfigFile, CommentsAndBlankLinesAreSkipped) {
    EXPECT_THAT(arguments_of("# a comment\n\n   \n\t# indented comment\r\ncores = 4\r\n"), ElementsAre("--cores=4"));
}

TEST(ConfigFile, TheValueKeepsItsInnerSpacesAndEqualsSigns) {
    EXPECT_THAT(arguments_of("worker-user = a b=c "), ElementsAre("--worker-user=a b=c"));
}

TEST(ConfigFile, ALineWithoutItsNewlineIsRead) { EXPECT_THAT(arguments_of("verbose"), ElementsAre("--verbose")); }

TEST(ConfigFile, EachSettingKnowsItsLine) {
    std::vector<ConfigArgument> settings;
    ASSERT_TRUE(parse_config_text("# one\n\ncores = 2\n", "/etc/s.conf", &settings).ok());
    ASSERT_EQ(settings.size(), 1u);
    EXPECT_EQ(settings[0].origin, "/etc/s.conf:3");
}

TEST(ConfigFile, ConfigInsideTheFileIsRefused) {
    EXPECT_THAT(refusal_of("cores = 2\nconfig = other.conf\n"), HasSubstr("server.conf:2: config cannot be set"));
}

TEST(ConfigFile, NamesWithDashesAreRefusedWithAHint) {
    EXPECT_THAT(refusal_of("--listen = x\n"), HasSubstr("server.conf:1: expected `name = value`"));
    EXPECT_THAT(refusal_of("--listen = x\n"), HasSubstr("without its dashes"));
    EXPECT_THAT(refusal_of("-l x\n"), HasSubstr("server.conf:1:"));
}

TEST(ConfigFile, ALineThatIsNoSettingIsRefused) {
    EXPECT_THAT(refusal_of("cores = 2\nlisten unix:/x\n"), HasSubstr("server.conf:2: expected"));
    EXPECT_THAT(refusal_of("= 4\n"), HasSubstr("server.conf:1: expected"));
    EXPECT_THAT(refusal_of("Listen = x\n"), HasSubstr("server.conf:1: expected"));
}

TEST(ConfigFile, AnEmptyValueIsRefused) {
    EXPECT_THAT(refusal_of("\n\nmemory-quota =\n"), HasSubstr("server.conf:3: memory-quota: no value after '='"));
}

TEST(ConfigFile, ANulByteIsRefused) {
    EXPECT_THAT(refusal_of(std::string("cores = 2\0\n", 11)), HasSubstr("server.conf:1: a NUL byte"));
}

TEST(ConfigFile, AMissingFileIsNamed) {
    std::vector<ConfigArgument> settings;
    const Status status = read_config_file("/nonexistent/server.conf", &settings);
    EXPECT_FALSE(status.ok());
    EXPECT_THAT(status.message(), HasSubstr("cannot read /nonexistent/server.conf: No such file"));
}

TEST(ConfigFile, ADirectoryIsNoFile) {
    std::vector<ConfigArgument> settings;
    EXPECT_THAT(read_config_file("/", &settings).message(), HasSubstr("not a regular file"));
}

TEST(ConfigFile, AFifoIsRefusedWithoutWaitingForAWriter) {
    char directory[] = "/tmp/config-file-test-XXXXXX";
    ASSERT_NE(::mkdtemp(directory), nullptr);
    const std::string path = std::string(directory) + "/server.conf";
    ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
    Status status = Status::success();
    EXPECT_TRUE(test_support::returns_without_a_writer(path, [&] {
        std::vector<ConfigArgument> settings;
        status = read_config_file(path, &settings);
    })) << "read_config_file waited for a writer to the FIFO";
    EXPECT_EQ(status.message(), "cannot read " + path + ": not a regular file (a FIFO)");
    ::unlink(path.c_str());
    ::rmdir(directory);
}

TEST(ConfigFile, ADeviceIsRefusedUnread) {
    std::vector<ConfigArgument> settings;
    EXPECT_EQ(read_config_file("/dev/zero", &settings).message(),
              "cannot read /dev/zero: not a regular file (a character device)");
}

TEST(ConfigFile, AFileIsReadAndSplit) {
    char path[] = "/tmp/config-file-test-XXXXXX";
    const int fd = ::mkstemp(path);
    ASSERT_GE(fd, 0);
    const std::string text = "# server\nlisten = unix:/tmp/a.sock\ninsecure\n";
    ASSERT_EQ(::write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
    ::close(fd);
    std::vector<ConfigArgument> settings;
    const Status status = read_config_file(path, &settings);
    ::unlink(path);
    ASSERT_TRUE(status.ok()) << status.message();
    ASSERT_EQ(settings.size(), 2u);
    EXPECT_EQ(settings[1].argument, "--insecure");
    EXPECT_EQ(settings[1].origin, std::string(path) + ":3");
}

}  // namespace
}  // namespace ggml_remote::host
