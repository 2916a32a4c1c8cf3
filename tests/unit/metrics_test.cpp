// Metrics (src/host/listener/metrics.h): the text Prometheus scrapes, from the listener's
// counts and the status board.
#include "host/listener/metrics.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace ggml_remote::host {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

std::vector<std::string> lines_of(const std::string &text) {
    std::vector<std::string> lines;
    std::istringstream stream(text);
    for (std::string line; std::getline(stream, line);) lines.push_back(line);
    return lines;
}

// What a line of the text format (version 0.0.4) may be; an empty list when every
// line is one, else the lines that are not, with why.
std::vector<std::string> exposition_errors(const std::string &text) {
    static const std::string name = "[a-zA-Z_:][a-zA-Z0-9_:]*";
    static const std::string label_value = R"("(?:[^"\\\n]|\\[\\"n])*")";
    static const std::string labels = "\\{" + name + "=" + label_value + "(?:," + name + "=" + label_value + ")*\\}";
    static const std::string value = R"((?:[-+]?[0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?|[-+]Inf|NaN))";
    static const std::regex help("# HELP (" + name + R"() (?:[^\\]|\\[\\n])*)");
    static const std::regex type("# TYPE (" + name + ") (counter|gauge|histogram|summary|untyped)");
    static const std::regex histogram_part("(" + name + ")_(?:bucket|sum|count)");
    static const std::regex sample("(" + name + ")(?:" + labels + ")? " + value);
    std::vector<std::string> errors;
    std::set<std::string> described, typed, histograms;
    std::string family;  // the family whose samples may follow
    std::smatch match;
    if (text.empty() || text.back() != '\n') errors.push_back("the text does not end with a newline");
    for (const std::string &line : lines_of(text)) {
        if (std::regex_match(line, match, help)) {
            if (!described.insert(match[1]).second) errors.push_back("second HELP: " + line);
            family = match[1];
        } else if (std::regex_match(line, match, type)) {
            if (match[1] != family || !typed.insert(match[1]).second) errors.push_back("TYPE out of place: " + line);
            if (match[2] == "histogram") histograms.insert(match[1]);
        } else if (std::regex_match(line, match, sample)) {
            std::string sample_family = match[1];
            std::smatch part;
            if (histograms.count(family) != 0 && std::regex_match(sample_family, part, histogram_part)) {
                sample_family = part[1];
            }
            if (sample_family != family || typed.count(family) == 0) {
                errors.push_back("sample outside its family: " + line);
            }
        } else {
            errors.push_back("not a line of the format: " + line);
        }
    }
    return errors;
}

// The value of the sample that starts with `series` (name and labels), or "".
std::string value_of(const std::string &text, const std::string &series) {
    for (const std::string &line : lines_of(text)) {
        if (line.rfind(series + " ", 0) == 0) return line.substr(series.size() + 1);
    }
    return "";
}

SessionFigures session(int32_t id, const std::string &peer, uint64_t commands) {
    SessionFigures figures;
    figures.id = id;
    figures.peer = peer;
    figures.commands = commands;
    figures.max_buffers = 65536;
    return figures;
}

TEST(MetricsText, LabelValuesEscapeBackslashQuoteAndNewline) {
    EXPECT_EQ(escape_label_value(R"(a\b"c)"
                                 "\n"
                                 "d"),
              R"(a\\b\"c\nd)");
    EXPECT_EQ(escape_label_value("unix:/run/x.sock pid 7 uid 0"), "unix:/run/x.sock pid 7 uid 0");
}

TEST(MetricsText, OtherControlAndNonAsciiBytesBecomeQuestionMarks) {
    EXPECT_EQ(escape_label_value(std::string("a\rb\tc\x7f"
                                             "d\xc3\xa9",
                                             9)),
              "a?b?c?d??");
    EXPECT_EQ(escape_label_value(std::string("x\0y", 3)), "x?y");
}

TEST(MetricsText, EveryLineFollowsTheExpositionFormat) {
    MetricsSnapshot snapshot;
    snapshot.per_session = true;
    snapshot.sessions = {session(1, "unix:/tmp/a.sock pid 1 uid 0", 5),
                         session(2, "tcp://\"quoted\"\\slash\nnewline", 7)};
    const std::string text = render_metrics(snapshot);
    EXPECT_THAT(exposition_errors(text), IsEmpty()) << text;
    EXPECT_THAT(text, HasSubstr(R"(peer="tcp://\"quoted\"\\slash\nnewline")"));
}

TEST(MetricsText, TheCheckerRejectsWhatTheFormatDoesNotAllow) {
    EXPECT_THAT(exposition_errors("# HELP a x\n# TYPE a gauge\na{peer=\"un\"escaped\"} 1\n"), Not(IsEmpty()));
    EXPECT_THAT(exposition_errors("# HELP a x\n# TYPE a gauge\nb 1\n"), Not(IsEmpty()));
    EXPECT_THAT(exposition_errors("# HELP a x\n# TYPE a gauge\na one\n"), Not(IsEmpty()));
    EXPECT_THAT(exposition_errors("# HELP a x\n# TYPE a gauge\na 1\n# HELP a y\n"), Not(IsEmpty()));
}

TEST(MetricsText, EachSessionIsLabelledWithItsIdAndPeerOnlyWhenAskedFor) {
    MetricsSnapshot snapshot;
    snapshot.sessions = {session(3, "tcp://127.0.0.1:4000", 11)};
    snapshot.sessions[0].commands_refused[static_cast<size_t>(CommandRefusal::limit_reached)] = 2;
    EXPECT_THAT(render_metrics(snapshot), Not(HasSubstr("session=")));
    snapshot.per_session = true;
    const std::string text = render_metrics(snapshot);
    const std::string labels = R"({session="3",peer="tcp://127.0.0.1:4000")";
    EXPECT_EQ(value_of(text, "ggml_remote_session_commands_total" + labels + "}"), "11");
    EXPECT_EQ(value_of(text, "ggml_remote_session_commands_refused_total" + labels + R"(,reason="limit_reached"})"),
              "2");
    EXPECT_THAT(text, Not(HasSubstr("ggml_remote_session_buffers_max")));  // limits: once, unlabelled
}

TEST(MetricsText, LimitsAreListedOnceFromTheServersSettings) {
    MetricsSnapshot snapshot;
    snapshot.per_session = true;
    snapshot.sessions = {session(1, "p", 0), session(2, "q", 0)};
    SessionLimits limits;
    limits.max_buffers = 77;
    limits.mapped_file_quota = 0;  // the host's memory, as a worker resolves it
    snapshot.limits = limit_figures(limits);
    std::string text = render_metrics(snapshot);
    EXPECT_EQ(value_of(text, "ggml_remote_buffers_max"), "77");
    EXPECT_EQ(value_of(text, "ggml_remote_memory_quota_bytes"), "+Inf");
    EXPECT_EQ(value_of(text, "ggml_remote_mapped_file_quota_bytes"), std::to_string(physical_memory()));
    EXPECT_EQ(snapshot.limits.commands, 0u);  // no other figure
    limits.memory_quota = 1 << 20;
    snapshot.limits = limit_figures(limits);
    text = render_metrics(snapshot);
    EXPECT_EQ(value_of(text, "ggml_remote_memory_quota_bytes"), "1048576");
    EXPECT_THAT(text, Not(HasSubstr("quota_bytes{")));
}

TEST(MetricsText, BuildInfoAndEachDevicesMemory) {
    MetricsSnapshot snapshot;
    snapshot.version = "1.2.3";
    snapshot.ggml_version = "0.9.\"x\"";
    ProbedDevice cpu;
    cpu.name = "CPU";
    cpu.total_bytes = 64;
    cpu.free_bytes = 32;
    ProbedDevice gpu = cpu;
    gpu.name = "Vulkan0";
    gpu.total_bytes = 8;
    snapshot.devices = {cpu, gpu};
    const std::string text = render_metrics(snapshot);
    EXPECT_THAT(exposition_errors(text), IsEmpty()) << text;
    EXPECT_EQ(value_of(text, R"(ggml_remote_build_info{version="1.2.3",ggml="0.9.\"x\""})"), "1");
    EXPECT_EQ(value_of(text, R"(ggml_remote_device_memory_total_bytes{device="CPU"})"), "64");
    EXPECT_EQ(value_of(text, R"(ggml_remote_device_memory_total_bytes{device="Vulkan0"})"), "8");
    EXPECT_EQ(value_of(text, R"(ggml_remote_device_memory_free_bytes{device="Vulkan0"})"), "32");
}

TEST(MetricsText, LiveSessionsAndTheirMemoryAreCountedByTenant) {
    MetricsSnapshot snapshot;
    snapshot.sessions = {session(1, "p", 5), session(2, "q", 7), session(3, "r", 1)};
    snapshot.sessions[0].tenant = snapshot.sessions[1].tenant = "uid 1000";
    snapshot.sessions[2].tenant = "address 10.0.0.7";
    snapshot.sessions[0].memory_in_use = 100;
    snapshot.sessions[1].memory_in_use = 20;
    snapshot.sessions[2].memory_in_use = 3;
    const std::string text = render_metrics(snapshot);
    EXPECT_EQ(value_of(text, R"(ggml_remote_tenant_sessions_live{tenant="uid 1000"})"), "2");
    EXPECT_EQ(value_of(text, R"(ggml_remote_tenant_sessions_live{tenant="address 10.0.0.7"})"), "1");
    EXPECT_EQ(value_of(text, R"(ggml_remote_tenant_memory_bytes{tenant="uid 1000"})"), "120");
    EXPECT_EQ(value_of(text, R"(ggml_remote_tenant_memory_bytes{tenant="address 10.0.0.7"})"), "3");
    EXPECT_THAT(exposition_errors(text), IsEmpty()) << text;
    snapshot.sessions.clear();  // a tenant with no live session has no series
    EXPECT_THAT(render_metrics(snapshot), Not(HasSubstr("tenant=")));
}

TEST(MetricsText, CounterTotalsIncludeEndedSessionsAndGaugeTotalsOnlyLiveOnes) {
    MetricsSnapshot snapshot;
    snapshot.sessions = {session(1, "p", 5), session(2, "q", 7)};
    snapshot.sessions[0].memory_in_use = 100;
    snapshot.sessions[1].memory_in_use = 20;
    snapshot.sessions[1].store_bytes_saved = 4096;
    snapshot.sessions[1].commands_refused[static_cast<size_t>(CommandRefusal::invalid_request)] = 1;
    SessionFigures ended = session(0, "", 10);
    ended.memory_in_use = 1000;  // a gauge of a session that ended counts no more
    ended.store_bytes_saved = 1;
    ended.commands_refused[static_cast<size_t>(CommandRefusal::invalid_request)] = 3;
    add_counters(ended, &snapshot.ended);
    const std::string text = render_metrics(snapshot);
    EXPECT_EQ(value_of(text, "ggml_remote_commands_total"), "22");
    EXPECT_EQ(value_of(text, "ggml_remote_store_saved_bytes_total"), "4097");
    EXPECT_EQ(value_of(text, "ggml_remote_memory_bytes"), "120");
    EXPECT_EQ(value_of(text, R"(ggml_remote_commands_refused_total{reason="invalid_request"})"), "4");
    EXPECT_EQ(value_of(text, R"(ggml_remote_commands_refused_total{reason="unsupported"})"), "0");
}

TEST(MetricsText, WeightUploadsAreGaugesPerSessionAndSummedOverLiveOnes) {
    MetricsSnapshot snapshot;
    snapshot.per_session = true;
    snapshot.sessions = {session(1, "p", 0), session(2, "q", 0)};
    snapshot.sessions[0].weights_expected = 620;
    snapshot.sessions[0].weights_received = 412;
    snapshot.sessions[0].weights_found = 200;
    snapshot.sessions[1].weights_expected = 100;
    SessionFigures ended = session(0, "", 0);
    ended.weights_expected = 1000;  // an upload that ended is no longer under way
    add_counters(ended, &snapshot.ended);
    const std::string text = render_metrics(snapshot);
    EXPECT_THAT(text, HasSubstr("# HELP ggml_remote_session_weights_expected_bytes Bytes of weights guests upload"));
    EXPECT_THAT(text, HasSubstr("# TYPE ggml_remote_session_weights_received_bytes gauge\n"));
    EXPECT_THAT(text, HasSubstr("# HELP ggml_remote_weights_found_bytes Bytes of weights found in the host's weight "
                                "store instead of sent, live sessions\n"));
    EXPECT_EQ(value_of(text, R"(ggml_remote_session_weights_received_bytes{session="1",peer="p"})"), "412");
    EXPECT_EQ(value_of(text, R"(ggml_remote_session_weights_found_bytes{session="1",peer="p"})"), "200");
    EXPECT_EQ(value_of(text, "ggml_remote_weights_expected_bytes"), "720");
}

TEST(MetricsText, ServerFiguresAndEveryRefusalReasonAreListed) {
    MetricsSnapshot snapshot;
    snapshot.sessions_live = 2;
    snapshot.max_sessions = 64;
    snapshot.sessions_started = 9;
    snapshot.guests_refused[static_cast<size_t>(GuestRefusal::peer_limit)] = 4;
    const std::string text = render_metrics(snapshot);
    EXPECT_EQ(value_of(text, "ggml_remote_sessions_live"), "2");
    EXPECT_EQ(value_of(text, "ggml_remote_sessions_max"), "64");
    EXPECT_EQ(value_of(text, "ggml_remote_sessions_started_total"), "9");
    EXPECT_EQ(value_of(text, R"(ggml_remote_guests_refused_total{reason="peer_limit"})"), "4");
    for (size_t reason = 0; reason < kGuestRefusalReasons; ++reason) {
        const std::string name = refusal_name(static_cast<GuestRefusal>(reason));
        EXPECT_EQ(value_of(text, "ggml_remote_guests_refused_total{reason=\"" + name + "\"}"),
                  reason == static_cast<size_t>(GuestRefusal::peer_limit) ? "4" : "0");
    }
    EXPECT_THAT(exposition_errors(text), IsEmpty());
}

TEST(MetricsText, ErrorCodesFallIntoTheirRefusalClasses) {
    EXPECT_EQ(command_refusal_for(Code::bad_request), CommandRefusal::invalid_request);
    EXPECT_EQ(command_refusal_for(Code::not_found), CommandRefusal::invalid_request);
    EXPECT_EQ(command_refusal_for(Code::limit_exceeded), CommandRefusal::limit_reached);
    EXPECT_EQ(command_refusal_for(Code::out_of_memory), CommandRefusal::limit_reached);
    EXPECT_EQ(command_refusal_for(Code::unsupported), CommandRefusal::unsupported);
    EXPECT_EQ(command_refusal_for(Code::error), CommandRefusal::host_error);
    EXPECT_EQ(handshake_refusal_for(Code::version_mismatch), GuestRefusal::version_mismatch);
    EXPECT_EQ(handshake_refusal_for(Code::bad_request), GuestRefusal::handshake_failed);
}

TEST(MetricsHistogram, AnObservationOnABoundCountsInThatBucket) {
    HistogramCounts counts;
    counts.observe(kShortBoundsNs, 0);
    counts.observe(kShortBoundsNs, 100'000);  // on the first bound: le="0.0001"
    counts.observe(kShortBoundsNs, 100'001);
    counts.observe(kShortBoundsNs, 20'000'000'000);  // above every bound
    EXPECT_EQ(counts.buckets[0], 2u);
    EXPECT_EQ(counts.buckets[1], 1u);
    EXPECT_EQ(counts.buckets[kHistogramBounds], 1u);
    EXPECT_EQ(counts.count(), 4u);
    EXPECT_EQ(counts.sum_ns, 20'000'200'001u);
}

TEST(MetricsHistogram, BucketsAreCumulativeInSecondsAndInfEqualsTheCount) {
    HistogramCounts counts;
    counts.observe(kShortBoundsNs, 250'000);
    counts.observe(kShortBoundsNs, 3'000'000'000);
    counts.observe(kShortBoundsNs, 20'000'000'000);
    const std::string text = render_histogram(kSessionHistogramSpecs[0], counts);
    EXPECT_THAT(exposition_errors(text), IsEmpty()) << text;
    EXPECT_THAT(text, HasSubstr("# TYPE ggml_remote_graph_compute_seconds histogram\n"));
    const std::string bucket = "ggml_remote_graph_compute_seconds_bucket";
    EXPECT_EQ(value_of(text, bucket + R"({le="0.0001"})"), "0");
    EXPECT_EQ(value_of(text, bucket + R"({le="0.0005"})"), "1");
    EXPECT_EQ(value_of(text, bucket + R"({le="1"})"), "1");
    EXPECT_EQ(value_of(text, bucket + R"({le="10"})"), "2");
    EXPECT_EQ(value_of(text, bucket + R"({le="+Inf"})"), "3");
    EXPECT_EQ(value_of(text, "ggml_remote_graph_compute_seconds_count"), "3");
    EXPECT_EQ(value_of(text, "ggml_remote_graph_compute_seconds_sum"), "23.00025");
}

TEST(MetricsHistogram, SecondsAreWrittenExactly) {
    EXPECT_EQ(seconds_text(0), "0");
    EXPECT_EQ(seconds_text(250'000), "0.00025");
    EXPECT_EQ(seconds_text(1'500'000'000), "1.5");
    EXPECT_EQ(seconds_text(86400 * kSecondNs), "86400");
    EXPECT_EQ(seconds_text(1), "0.000000001");
}

TEST(MetricsHistogram, TotalsIncludeEndedSessionsAndTheListenersSessionLengths) {
    MetricsSnapshot snapshot;
    snapshot.sessions = {session(1, "p", 0)};
    const auto round_trip = static_cast<size_t>(SessionHistogram::compute_round_trip);
    snapshot.sessions[0].histograms[round_trip].observe(kShortBoundsNs, 1'000'000);
    SessionFigures ended = session(0, "", 0);
    ended.histograms[round_trip].observe(kShortBoundsNs, 2'000'000);
    add_counters(ended, &snapshot.ended);
    snapshot.session_lengths.observe(kSessionBoundsNs, 90 * kSecondNs);
    const std::string text = render_metrics(snapshot);
    EXPECT_THAT(exposition_errors(text), IsEmpty()) << text;
    EXPECT_EQ(value_of(text, "ggml_remote_compute_round_trip_seconds_count"), "2");
    EXPECT_EQ(value_of(text, "ggml_remote_compute_round_trip_seconds_sum"), "0.003");
    EXPECT_EQ(value_of(text, R"(ggml_remote_session_length_seconds_bucket{le="60"})"), "0");
    EXPECT_EQ(value_of(text, R"(ggml_remote_session_length_seconds_bucket{le="300"})"), "1");
    EXPECT_EQ(value_of(text, "ggml_remote_cores_wait_seconds_count"), "0");
}

// The status board: what the listener reads of a worker's slot.

class MetricsBoard : public ::testing::Test {
  protected:
    void SetUp() override {
        ASSERT_TRUE(StatusBoard::create(2, &board).ok());
        slot = board.slot(1);
    }
    StatusBoard board;
    SessionSlot *slot = nullptr;
};

TEST_F(MetricsBoard, FiguresAreReadFromTheSlot) {
    slot->commands.store(12);
    slot->store_hits.store(3);
    slot->store_misses.store(4);
    slot->store_bytes_saved.store(5);
    slot->commands_refused[static_cast<size_t>(CommandRefusal::unsupported)].store(6);
    const SessionFigures figures = read_figures(*slot);
    EXPECT_EQ(figures.commands, 12u);
    EXPECT_EQ(figures.store_hits, 3u);
    EXPECT_EQ(figures.store_misses, 4u);
    EXPECT_EQ(figures.store_bytes_saved, 5u);
    EXPECT_EQ(figures.commands_refused[static_cast<size_t>(CommandRefusal::unsupported)], 6u);
}

TEST_F(MetricsBoard, ClearingASlotForItsNextSessionZeroesEveryFigure) {
    slot->backends.store(2);
    slot->store_bytes_saved.store(9);
    slot->commands_refused[0].store(1);
    record_turned_away(slot, GuestRefusal::tls_failed);
    clear_figures(slot);
    const SessionFigures figures = read_figures(*slot);
    EXPECT_EQ(figures.backends, 0u);
    EXPECT_EQ(figures.store_bytes_saved, 0u);
    EXPECT_EQ(figures.commands_refused[0], 0u);
    EXPECT_FALSE(turned_away(*slot).has_value());
}

TEST_F(MetricsBoard, HistogramsAreReadFromTheSlotAndForgedOnesClamped) {
    SessionFigures figures;
    figures.histograms[1].observe(kShortBoundsNs, 3'000'000);
    store_figures(slot, figures);
    EXPECT_EQ(read_figures(*slot).histograms[1].buckets, figures.histograms[1].buckets);
    EXPECT_EQ(read_figures(*slot).histograms[1].sum_ns, 3'000'000u);
    // What a compromised worker might write: more than a session observes, a sum
    // longer than its observations could be.
    slot->histogram_buckets[0][0].store(UINT64_MAX);
    slot->histogram_buckets[2][3].store(5);
    slot->histogram_sum_ns[2].store(UINT64_MAX);
    const SessionFigures read = read_figures(*slot);
    EXPECT_EQ(read.histograms[0].buckets[0], kMaxBucketCount);
    EXPECT_EQ(read.histograms[2].sum_ns, 5 * kMaxObservationNs);
}

TEST_F(MetricsBoard, ATurnedAwayReasonOutsideTheListReadsAsNone) {
    EXPECT_FALSE(turned_away(*slot).has_value());
    record_turned_away(slot, GuestRefusal::version_mismatch);
    EXPECT_EQ(turned_away(*slot), GuestRefusal::version_mismatch);
    slot->turned_away.store(kGuestRefusalReasons + 1);  // what a compromised worker might write
    EXPECT_FALSE(turned_away(*slot).has_value());
}

TEST_F(MetricsBoard, AWorkersSlotCannotNameARefusalTheListenerDecides) {
    for (GuestRefusal forged : {GuestRefusal::server_full, GuestRefusal::peer_limit, GuestRefusal::start_budget,
                                GuestRefusal::unauthenticated_full}) {
        record_turned_away(slot, forged);  // what a compromised worker might write
        EXPECT_FALSE(turned_away(*slot).has_value()) << refusal_name(forged);
    }
    record_turned_away(slot, GuestRefusal::tls_failed);
    EXPECT_EQ(turned_away(*slot), GuestRefusal::tls_failed);
}

}  // namespace
}  // namespace ggml_remote::host
