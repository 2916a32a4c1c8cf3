// MetricsEndpoint (--metrics): a minimal HTTP/1.0 server that answers Prometheus'
// scrapes from inside the listener's poll loop. A scraper is trusted no more than a
// guest: every socket is non-blocking, a connection carries one request of at most
// kMaxScrapeRequestBytes and must be done within kScrapeDeadline, at most
// kMaxScrapes are open at once, and nothing here waits, so the listener goes on
// admitting guests whatever a scraper does. There is no authentication: it belongs
// on loopback or a unix socket (docs/SECURITY.md).
#pragma once

#include <poll.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "protocol/status.h"
#include "transport/endpoint.h"
#include "transport/unique_fd.h"

namespace ggml_remote::host {

constexpr size_t kMaxScrapeRequestBytes = 8192;
constexpr std::chrono::milliseconds kScrapeDeadline{5000};
constexpr size_t kMaxScrapes = 8;

enum class ScrapeRequest { incomplete, metrics, other };
// What the bytes received so far ask for: GET /metrics, anything else (a complete
// request, or kMaxScrapeRequestBytes without the end of one), or not known yet.
ScrapeRequest classify_scrape_request(std::string_view received);

// The /metrics body, rendered only when a request asks for it.
using RenderMetrics = std::function<std::string()>;
// The whole HTTP/1.0 answer: 200 with the metrics, or 404.
std::string scrape_response(ScrapeRequest request, const RenderMetrics &render);

class MetricsEndpoint {
  public:
    using Clock = std::chrono::steady_clock;

    MetricsEndpoint() = default;
    ~MetricsEndpoint();  // removes the unix socket file it created
    MetricsEndpoint(const MetricsEndpoint &) = delete;
    MetricsEndpoint &operator=(const MetricsEndpoint &) = delete;

    // Listens on `endpoint`, unix: or tcp:// (port 0 picks a free one, written back).
    Status open(Endpoint *endpoint);
    bool listening() const { return listener_.valid(); }

    // This endpoint's descriptors, appended to `polled`.
    void add_poll_fds(std::vector<pollfd> *polled) const;
    // How long poll may sleep before a connection's deadline (-1: none).
    int poll_timeout_ms(Clock::time_point now) const;
    // Reads, answers and accepts what `polled` reports ready from index `first` on
    // (where add_poll_fds put this endpoint's descriptors), and ends connections past
    // their deadline.
    void serve(const std::vector<pollfd> &polled, size_t first, Clock::time_point now, const RenderMetrics &render);

  private:
    struct Scrape {
        UniqueFd fd;
        Clock::time_point deadline;
        std::string request;   // received so far
        std::string response;  // once the request is complete
        size_t sent = 0;
    };
    // Each returns false when the connection is done with (answered, gone, failed).
    bool advance(Scrape *scrape, short revents, const RenderMetrics &render);
    bool receive(Scrape *scrape, const RenderMetrics &render);
    bool send_some(Scrape *scrape);
    void accept_scrapers(Clock::time_point now);

    UniqueFd listener_;
    std::string unix_path_;  // to remove at exit
    std::vector<Scrape> scrapes_;
};

}  // namespace ggml_remote::host
