// What `ggml-remote-server status` shows (tools/ggml-remote-server/status_view.h).
#include "ggml-remote-server/status_view.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>

#include "protocol/wire.h"

namespace ggml_remote::status {
namespace {

using namespace protocol;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr uint64_t kMiB = 1 << 20;

StatusSession session(int32_t id, const char *peer) {
    StatusSession s{};
    s.id = id;
    s.pid = 4000 + id;
    std::snprintf(s.peer, sizeof(s.peer), "%s", peer);
    s.started_unix = 100;
    s.buffers = 3;
    return s;
}

// A reply's tail as a server sends it: its devices (none here), sessions, and uploads.
std::vector<uint8_t> tail_of(const std::vector<StatusSession> &sessions, const std::vector<StatusUpload> &uploads) {
    std::vector<uint8_t> tail;
    for (const StatusSession &s : sessions) append_pod(tail, s);
    for (const StatusUpload &u : uploads) append_pod(tail, u);
    return tail;
}

TEST(StatusView, TheUploadColumnSaysHowMuchOfTheWeightsIsThere) {
    EXPECT_EQ(upload_cell({0, 0, 0}), "-") << "no weights flagged";
    EXPECT_EQ(upload_cell({620 * kMiB, 412 * kMiB, 200 * kMiB}), "98%") << "sent and found both count";
    EXPECT_EQ(upload_cell({1000, 999, 0}), "99%") << "rounded down: 100% only when complete";
    EXPECT_EQ(upload_cell({1000, 600, 400}), "100%");
}

TEST(StatusView, TheUploadLineTellsSentFoundAndWhatIsToCome) {
    EXPECT_EQ(upload_line({0, 0, 0}), "");
    EXPECT_EQ(upload_line({620 * kMiB, 412 * kMiB, 200 * kMiB}),
              "weights: 412.0 of 620.0 MiB sent, 200.0 MiB found in the weight store; 8.0 MiB to come");
    EXPECT_EQ(upload_line({620 * kMiB, 620 * kMiB, 0}),
              "weights: 620.0 of 620.0 MiB sent, 0.0 MiB found in the weight store; all there");
}

TEST(StatusView, ASessionRowShowsItsUploadAndTheLineBelowIt) {
    ServerReport report;
    report.reply = {7, 4, 0, 2};
    report.sessions = {session(1, "tcp://127.0.0.1:9 pid 5 uid 6"), session(2, "unix:/x pid 8 uid 9")};
    report.uploads = {{620 * kMiB, 412 * kMiB, 200 * kMiB}, {0, 0, 0}};
    const std::string text = status_text("unix:/x", report, 160);
    EXPECT_THAT(text, HasSubstr(" BUFFERS UPLOAD\n"));
    EXPECT_THAT(text, HasSubstr("       3    98%\n     limits:"));
    EXPECT_THAT(text, HasSubstr("\n     weights: 412.0 of 620.0 MiB sent, 200.0 MiB found in the weight store; 8.0 "
                                "MiB to come\n"));
    EXPECT_THAT(text, HasSubstr("       3      -\n     limits:")) << "the session without weights";
    const std::string json = status_json("unix:/x", report, 160);
    EXPECT_THAT(json, HasSubstr("\"weights_expected_bytes\": 650117120, \"weights_received_bytes\": 432013312, "
                                "\"weights_found_bytes\": 209715200}"));
}

TEST(StatusView, AServerThatDoesNotCountUploadsShowsAQuestionMark) {
    ServerReport report;
    report.reply = {7, 4, 0, 1};
    report.sessions = {session(1, "unix:/x pid 8 uid 9")};
    const std::string text = status_text("unix:/x", report, 160);
    EXPECT_THAT(text, HasSubstr("       3      ?\n"));
    EXPECT_THAT(text, Not(HasSubstr("weights:")));
    EXPECT_THAT(status_json("unix:/x", report, 160), HasSubstr("\"weights_found_bytes\": null}"));
}

TEST(StatusView, TheUploadTableIsReadOnlyWhenAskedForAndSent) {
    const std::vector<StatusSession> sessions = {session(1, "a"), session(2, "b")};
    const std::vector<StatusUpload> uploads = {{10, 1, 2}, {20, 3, 4}};
    ServerReport report;
    report.reply = {7, 4, 0, 2};
    ASSERT_TRUE(read_tables({kStatusUploads}, tail_of(sessions, uploads), &report));
    ASSERT_EQ(report.uploads.size(), 2u);
    EXPECT_EQ(report.uploads[1].weights_found, 4u);
    EXPECT_EQ(report.sessions[1].id, 2);

    ASSERT_TRUE(read_tables({kStatusUploads}, tail_of(sessions, {}), &report)) << "an older server's reply";
    EXPECT_TRUE(report.uploads.empty());
    EXPECT_FALSE(read_tables({0}, tail_of(sessions, uploads), &report)) << "a table nobody asked for";
    EXPECT_FALSE(read_tables({kStatusUploads}, tail_of(sessions, {{1, 1, 1}}), &report)) << "a row short";
}

}  // namespace
}  // namespace ggml_remote::status
