// MetricsEndpoint (src/host/listener/metrics_endpoint.h): the HTTP side of --metrics, which
// answers one request per connection and never makes the listener wait.
#include "host/listener/metrics_endpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "transport/socket.h"

namespace ggml_remote::host {
namespace {

using ::testing::EndsWith;
using ::testing::Not;
using ::testing::StartsWith;

TEST(ScrapeRequests, OnlyACompleteGetOfMetricsAsksForThem) {
    EXPECT_EQ(classify_scrape_request("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"), ScrapeRequest::metrics);
    EXPECT_EQ(classify_scrape_request("GET /metrics?x=1 HTTP/1.0\n\n"), ScrapeRequest::metrics);
    EXPECT_EQ(classify_scrape_request("GET /metrics HTTP/1.1\r\nHost: x\r\n"), ScrapeRequest::incomplete);
    EXPECT_EQ(classify_scrape_request(""), ScrapeRequest::incomplete);
    EXPECT_EQ(classify_scrape_request("GET / HTTP/1.1\r\n\r\n"), ScrapeRequest::other);
    EXPECT_EQ(classify_scrape_request("GET /metricsx HTTP/1.1\r\n\r\n"), ScrapeRequest::other);
    EXPECT_EQ(classify_scrape_request("POST /metrics HTTP/1.1\r\n\r\n"), ScrapeRequest::other);
    EXPECT_EQ(classify_scrape_request("get /metrics HTTP/1.1\r\n\r\n"), ScrapeRequest::other);
}

TEST(ScrapeRequests, ARequestThatNeverEndsIsAnsweredAtItsSizeLimit) {
    const std::string endless = "GET /metrics HTTP/1.1\r\nX: " + std::string(kMaxScrapeRequestBytes, 'a');
    EXPECT_EQ(classify_scrape_request(endless.substr(0, kMaxScrapeRequestBytes - 1)), ScrapeRequest::incomplete);
    EXPECT_EQ(classify_scrape_request(endless.substr(0, kMaxScrapeRequestBytes)), ScrapeRequest::other);
}

TEST(ScrapeRequests, TheAnswerIsPrometheusTextOr404) {
    const RenderMetrics render = [] { return std::string("m 1\n"); };
    EXPECT_EQ(scrape_response(ScrapeRequest::metrics, render),
              "HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: 4\r\n"
              "Connection: close\r\n\r\nm 1\n");
    const std::string not_found = scrape_response(ScrapeRequest::other, render);
    EXPECT_THAT(not_found, StartsWith("HTTP/1.0 404 Not Found\r\n"));
    EXPECT_THAT(not_found, Not(::testing::HasSubstr("m 1")));
}

// A MetricsEndpoint on a unix socket, driven as the listener drives it.
class MetricsEndpointTest : public ::testing::Test {
  protected:
    void SetUp() override {
        char dir_template[] = "/tmp/ggml-remote-metrics-test.XXXXXX";
        ASSERT_NE(::mkdtemp(dir_template), nullptr);
        dir = dir_template;
        ASSERT_TRUE(parse_endpoint("unix:" + dir + "/metrics.sock", &endpoint).ok());
        Status status = metrics.open(&endpoint);
        ASSERT_TRUE(status.ok()) << status.message();
    }
    void TearDown() override {
        ::unlink(endpoint.path.c_str());
        ::rmdir(dir.c_str());
    }

    UniqueFd connect_scraper() {
        UniqueFd fd;
        EXPECT_TRUE(connect_endpoint(endpoint, 1000, &fd).ok());
        return fd;
    }
    // One turn of the listener's loop, `later` past now.
    void turn(std::chrono::milliseconds later = std::chrono::milliseconds(0)) {
        std::vector<pollfd> polled;
        metrics.add_poll_fds(&polled);
        ::poll(polled.data(), polled.size(), 100);
        metrics.serve(polled, 0, MetricsEndpoint::Clock::now() + later, [this] {
            ++renders;
            return std::string("ggml_remote_sessions_live 0\n");
        });
    }
    // What the scraper receives until the endpoint closes, within a few turns.
    std::string answer(int fd) {
        std::string received;
        for (int i = 0; i < 20; ++i) {
            turn();
            char bytes[4096];
            ssize_t got;
            while ((got = ::recv(fd, bytes, sizeof(bytes), MSG_DONTWAIT)) > 0) received.append(bytes, got);
            if (got == 0) return received;
        }
        return received + "(not closed)";
    }

    std::string dir;
    Endpoint endpoint;
    MetricsEndpoint metrics;
    int renders = 0;
};

TEST_F(MetricsEndpointTest, AScrapeGetsTheMetricsAndTheConnectionCloses) {
    UniqueFd scraper = connect_scraper();
    const std::string request = "GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n";
    ASSERT_EQ(::send(scraper.get(), request.data(), request.size(), 0), static_cast<ssize_t>(request.size()));
    const std::string received = answer(scraper.get());
    EXPECT_THAT(received, StartsWith("HTTP/1.0 200 OK\r\n"));
    EXPECT_THAT(received, EndsWith("\r\n\r\nggml_remote_sessions_live 0\n"));
    EXPECT_EQ(renders, 1);
}

TEST_F(MetricsEndpointTest, OtherPathsGet404WithoutRendering) {
    UniqueFd scraper = connect_scraper();
    const std::string request = "GET /admin HTTP/1.0\r\n\r\n";
    ASSERT_EQ(::send(scraper.get(), request.data(), request.size(), 0), static_cast<ssize_t>(request.size()));
    EXPECT_THAT(answer(scraper.get()), StartsWith("HTTP/1.0 404 Not Found\r\n"));
    EXPECT_EQ(renders, 0);
}

TEST_F(MetricsEndpointTest, ASilentScraperIsDroppedAtItsDeadline) {
    UniqueFd scraper = connect_scraper();
    turn();  // accepted
    turn();  // still within its deadline
    char byte;
    EXPECT_EQ(::recv(scraper.get(), &byte, 1, MSG_DONTWAIT), -1) << "closed before its deadline";
    turn(kScrapeDeadline + std::chrono::milliseconds(1));
    EXPECT_EQ(::recv(scraper.get(), &byte, 1, MSG_DONTWAIT), 0) << "still open after its deadline";
}

TEST_F(MetricsEndpointTest, ConnectionsBeyondTheCapAreClosedAtOnce) {
    std::vector<UniqueFd> scrapers;
    for (size_t i = 0; i < kMaxScrapes + 1; ++i) scrapers.push_back(connect_scraper());
    turn();
    turn();
    char byte;
    EXPECT_EQ(::recv(scrapers.back().get(), &byte, 1, MSG_DONTWAIT), 0) << "the one over the cap stayed open";
    EXPECT_EQ(::recv(scrapers.front().get(), &byte, 1, MSG_DONTWAIT), -1) << "one within the cap was closed";
}

TEST_F(MetricsEndpointTest, TheSocketFileIsRemovedWithTheEndpoint) {
    Endpoint other;
    ASSERT_TRUE(parse_endpoint("unix:" + dir + "/other.sock", &other).ok());
    {
        MetricsEndpoint scoped;
        ASSERT_TRUE(scoped.open(&other).ok());
        EXPECT_EQ(::access(other.path.c_str(), F_OK), 0);
    }
    EXPECT_NE(::access(other.path.c_str(), F_OK), 0);
}

TEST_F(MetricsEndpointTest, OnlyUnixAndTcpEndpointsServeMetrics) {
    Endpoint shm;
    ASSERT_TRUE(parse_endpoint("shm:" + dir + "/shm.sock", &shm).ok());
    MetricsEndpoint refused;
    EXPECT_FALSE(refused.open(&shm).ok());
    EXPECT_FALSE(refused.listening());
}

}  // namespace
}  // namespace ggml_remote::host
