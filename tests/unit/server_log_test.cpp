// One write per log line (host/server_log.h).
#include "host/common/server_log.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <sstream>
#include <string>

namespace ggml_remote::host {
namespace {

using ::testing::EndsWith;
using ::testing::StartsWith;

TEST(ServerLog, ALineHasItsTimeZoneAndLevel) {
    setenv("TZ", "UTC", 1);
    tzset();
    const std::time_t when = 1796529600;  // 2026-12-06 04:00:00 UTC
    EXPECT_EQ(format_log_line("serving CPU", LogLevel::info, false, when),
              "2026-12-06 04:00:00 +0000 INFO ggml-remote-server: serving CPU");
    EXPECT_EQ(format_log_line("worker died", LogLevel::error, false, when),
              "2026-12-06 04:00:00 +0000 ERROR ggml-remote-server: worker died");
    EXPECT_EQ(format_log_line("refused", LogLevel::warning, false, when),
              "2026-12-06 04:00:00 +0000 WARN ggml-remote-server: refused");
}

// Under systemd the journal stamps each line itself and reads its priority from
// a <N> prefix (sd-daemon.h).
TEST(ServerLog, ForTheJournalALineHasItsPriorityAndNoTime) {
    EXPECT_EQ(format_log_line("worker died", LogLevel::error, true, 0), "<3>ggml-remote-server: worker died");
    EXPECT_EQ(format_log_line("refused", LogLevel::warning, true, 0), "<4>ggml-remote-server: refused");
    EXPECT_EQ(format_log_line("serving", LogLevel::info, true, 0), "<6>ggml-remote-server: serving");
    EXPECT_EQ(format_log_line("a\nforged", LogLevel::info, true, 0), "<6>ggml-remote-server: a\\x0aforged")
        << "still one line";
}

TEST(ServerLog, AShortLineIsKeptAndEnded) { EXPECT_EQ(whole_log_line("hello"), "hello\n"); }

TEST(ServerLog, ALongLineIsCutToFitOneAtomicWrite) {
    const std::string line = whole_log_line(std::string(10000, 'a'));
    EXPECT_LE(line.size(), kMaxLogLine);
    EXPECT_THAT(line, StartsWith(std::string(1000, 'a')));
    EXPECT_THAT(line, EndsWith(" bytes)\n"));
    EXPECT_EQ(line.find('\n'), line.size() - 1);
    EXPECT_EQ(whole_log_line(std::string(kMaxLogLine - 1, 'b')).size(), kMaxLogLine);  // fits exactly: not cut
}

TEST(ServerLog, ACutNeverSplitsACharacter) {
    std::string text;
    while (text.size() < 2 * kMaxLogLine) text += "\xc3\xa9";  // é, two bytes each
    const std::string line = whole_log_line(text);
    const size_t kept = line.find("...(cut ");
    ASSERT_NE(kept, std::string::npos);
    EXPECT_EQ(kept % 2, 0u);
}

// --log-format json: one object a line, for collectors.
TEST(JsonLog, ALineIsAnObjectWithTimeLevelAndMessage) {
    const std::time_t when = 1796529600;  // 2026-12-06 04:00:00 UTC
    EXPECT_EQ(format_json_log_line("serving CPU", LogLevel::info, {}, false, when),
              R"({"time":"2026-12-06T04:00:00Z","level":"info","message":"serving CPU"})");
    EXPECT_EQ(format_json_log_line("refused", LogLevel::warning, {}, false, when),
              R"({"time":"2026-12-06T04:00:00Z","level":"warning","message":"refused"})");
    EXPECT_EQ(format_json_log_line("died", LogLevel::error, {}, false, when),
              R"({"time":"2026-12-06T04:00:00Z","level":"error","message":"died"})");
}

TEST(JsonLog, ALineAboutASessionNamesItAndItsPeer) {
    EXPECT_EQ(format_json_log_line("connected", LogLevel::info, {3, "tcp://10.0.0.2:4000"}, false, 0),
              R"({"time":"1970-01-01T00:00:00Z","level":"info","message":"connected","session":3,)"
              R"("peer":"tcp://10.0.0.2:4000"})");
    EXPECT_EQ(format_json_log_line("refused", LogLevel::warning, {std::nullopt, "unix pid 7"}, false, 0),
              R"({"time":"1970-01-01T00:00:00Z","level":"warning","message":"refused","peer":"unix pid 7"})");
}

TEST(JsonLog, ForTheJournalTheObjectFollowsThePriority) {
    EXPECT_THAT(format_json_log_line("died", LogLevel::error, {}, true, 0), StartsWith("<3>{\"time\":"));
}

TEST(JsonLog, AGuestsBytesCannotBreakTheObjectOrTheLine) {
    const std::string line =
        format_json_log_line("tensor 'a\"}\n{\"level\":\"error\x9b'", LogLevel::info, {1, "id\n\"x"}, false, 0);
    EXPECT_EQ(line.find('\n'), std::string::npos);
    EXPECT_THAT(line, EndsWith(R"("message":"tensor 'a\"}\n{\"level\":\"error\u009b'","session":1,"peer":"id\n\"x"})"));
}

TEST(JsonLog, ALongMessageIsCutSoTheObjectStaysWhole) {
    const std::string line = format_json_log_line(std::string(3 * kMaxLogLine, '\x01'), LogLevel::info, {}, false, 0);
    EXPECT_LE(line.size() + 1, kMaxLogLine);
    EXPECT_THAT(line, EndsWith(" bytes)\"}"));
}

TEST(JsonLog, ACutNeverSplitsACharacter) {
    std::string text;
    while (text.size() < 2 * kMaxLogLine) text += "\xc3\xa9";  // é: kept as it is
    const std::string line = format_json_log_line(text, LogLevel::info, {}, false, 0);
    EXPECT_LE(line.size() + 1, kMaxLogLine);
    EXPECT_EQ(line.find("\\u00"), std::string::npos) << "no byte of a character left alone";
}

// Reads what the joiner wrote into a pipe.
class Joiner : public ::testing::Test {
  protected:
    void SetUp() override { ASSERT_EQ(::pipe(ends_), 0); }
    void TearDown() override {
        ::close(ends_[0]);
        ::close(ends_[1]);
    }
    std::string written() {
        ::close(ends_[1]);
        ends_[1] = ::open("/dev/null", O_WRONLY);
        std::string text;
        char chunk[4096];
        for (ssize_t n; (n = ::read(ends_[0], chunk, sizeof(chunk))) > 0;) text.append(chunk, static_cast<size_t>(n));
        return text;
    }
    static bool errors_only(ggml_log_level level) { return level == GGML_LOG_LEVEL_ERROR; }
    int ends_[2] = {-1, -1};
};

TEST_F(Joiner, AMessageAndItsContinuationsBecomeOneLine) {
    GgmlLogJoiner joiner(ends_[1], errors_only);
    joiner.add(GGML_LOG_LEVEL_ERROR, "ggml: tensor ");
    joiner.add(GGML_LOG_LEVEL_CONT, "'a' ");
    joiner.add(GGML_LOG_LEVEL_CONT, "is bad\n");
    EXPECT_EQ(written(), "ggml: tensor 'a' is bad\n");
}

TEST_F(Joiner, ContinuationsTakeTheirMessagesLevel) {
    GgmlLogJoiner joiner(ends_[1], errors_only);
    joiner.add(GGML_LOG_LEVEL_INFO, "loaded ");
    joiner.add(GGML_LOG_LEVEL_CONT, "a backend\n");
    joiner.add(GGML_LOG_LEVEL_ERROR, "failed");
    joiner.add(GGML_LOG_LEVEL_CONT, "\n");
    EXPECT_EQ(written(), "failed\n");
}

TEST_F(Joiner, ANewMessageEndsAnUnfinishedLine) {
    GgmlLogJoiner joiner(ends_[1], errors_only);
    joiner.add(GGML_LOG_LEVEL_ERROR, "no newline");
    joiner.add(GGML_LOG_LEVEL_ERROR, "next\n");
    EXPECT_EQ(written(), "no newline\nnext\n");
}

TEST_F(Joiner, ANewlineInsideAMessageNeverStartsALine) {
    GgmlLogJoiner joiner(ends_[1], errors_only);
    joiner.add(GGML_LOG_LEVEL_ERROR, "tensor 'x\n2026-12-01 12:00:00 ggml-remote-server: FORGED' is bad\n");
    EXPECT_EQ(written(), "tensor 'x\\x0a2026-12-01 12:00:00 ggml-remote-server: FORGED' is bad\n");
}

TEST_F(Joiner, AnEndlessMessageIsWrittenOnceItFillsALine) {
    GgmlLogJoiner joiner(ends_[1], errors_only);
    for (int i = 0; i < 100; ++i) {
        joiner.add(i == 0 ? GGML_LOG_LEVEL_ERROR : GGML_LOG_LEVEL_CONT, std::string(100, 'z'));
    }
    joiner.flush();
    std::istringstream text(written());
    int lines = 0;
    for (std::string line; std::getline(text, line); ++lines) EXPECT_LT(line.size(), kMaxLogLine);
    EXPECT_EQ(lines, 3);  // two full ones, and the rest at flush()
}

TEST_F(Joiner, InTheJsonFormatGgmlsLinesAreObjectsWithTheirLevel) {
    set_log_format(LogFormat::json);
    set_log_subject({5, "tcp://127.0.0.1:9"});
    GgmlLogJoiner joiner(ends_[1], errors_only);
    joiner.add(GGML_LOG_LEVEL_ERROR, "ggml: out of ");
    joiner.add(GGML_LOG_LEVEL_CONT, "memory\n");
    const std::string text = written();
    set_log_format(LogFormat::text);
    set_log_subject({});
    EXPECT_THAT(text, StartsWith("{\"time\":\""));
    EXPECT_THAT(text, EndsWith(R"("level":"error","message":"ggml: out of memory","session":5,)"
                               R"("peer":"tcp://127.0.0.1:9"})"
                               "\n"));
}

}  // namespace
}  // namespace ggml_remote::host
