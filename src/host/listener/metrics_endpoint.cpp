#include "host/listener/metrics_endpoint.h"

#include <fcntl.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

#include "transport/socket.h"

namespace ggml_remote::host {

namespace {

// The request line's method and target: the text up to the first and second space.
bool asks_for_metrics(std::string_view request_line) {
    const size_t method_end = request_line.find(' ');
    if (method_end == std::string_view::npos || request_line.substr(0, method_end) != "GET") return false;
    const std::string_view rest = request_line.substr(method_end + 1);
    const std::string_view target = rest.substr(0, rest.find(' '));
    return target == "/metrics" || target.rfind("/metrics?", 0) == 0;
}

std::string http_response(std::string_view status, std::string_view content_type, std::string_view body) {
    std::string response = "HTTP/1.0 ";
    response.append(status).append("\r\nContent-Type: ").append(content_type);
    response.append("\r\nContent-Length: ").append(std::to_string(body.size()));
    response.append("\r\nConnection: close\r\n\r\n").append(body);
    return response;
}

}  // namespace

ScrapeRequest classify_scrape_request(std::string_view received) {
    size_t header_end = received.find("\r\n\r\n");
    if (header_end == std::string_view::npos) header_end = received.find("\n\n");
    if (header_end == std::string_view::npos) {
        return received.size() < kMaxScrapeRequestBytes ? ScrapeRequest::incomplete : ScrapeRequest::other;
    }
    std::string_view request_line = received.substr(0, received.find('\n'));
    if (!request_line.empty() && request_line.back() == '\r') request_line.remove_suffix(1);
    return asks_for_metrics(request_line) ? ScrapeRequest::metrics : ScrapeRequest::other;
}

std::string scrape_response(ScrapeRequest request, const RenderMetrics &render) {
    if (request != ScrapeRequest::metrics) return http_response("404 Not Found", "text/plain", "not found\n");
    return http_response("200 OK", "text/plain; version=0.0.4", render());
}

MetricsEndpoint::~MetricsEndpoint() {
    if (!unix_path_.empty()) ::unlink(unix_path_.c_str());
}

Status MetricsEndpoint::open(Endpoint *endpoint) {
    if (endpoint->kind != Endpoint::Kind::unix_socket && endpoint->kind != Endpoint::Kind::tcp) {
        return error(Code::bad_request, "--metrics " + endpoint->to_string() + ": use unix:/path or tcp://host:port");
    }
    UniqueFd fd;
    Status status = listen_endpoint(endpoint, &fd);
    if (!status) return status;
    if (::fcntl(fd.get(), F_SETFL, ::fcntl(fd.get(), F_GETFL) | O_NONBLOCK) != 0) {
        return error(Code::error, "--metrics " + endpoint->to_string() + ": " + std::strerror(errno));
    }
    listener_ = std::move(fd);
    if (endpoint->uses_unix_socket()) unix_path_ = endpoint->path;
    return Status::success();
}

void MetricsEndpoint::add_poll_fds(std::vector<pollfd> *polled) const {
    if (!listening()) return;
    polled->push_back({listener_.get(), POLLIN, 0});
    for (const Scrape &scrape : scrapes_) {
        polled->push_back({scrape.fd.get(), static_cast<short>(scrape.response.empty() ? POLLIN : POLLOUT), 0});
    }
}

int MetricsEndpoint::poll_timeout_ms(Clock::time_point now) const {
    if (scrapes_.empty()) return -1;
    const auto next = std::min_element(scrapes_.begin(), scrapes_.end(), [](const Scrape &a, const Scrape &b) {
                          return a.deadline < b.deadline;
                      })->deadline;
    if (next <= now) return 0;
    const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count() + 1;
    return static_cast<int>(std::min<long long>(wait, INT_MAX));
}

void MetricsEndpoint::serve(const std::vector<pollfd> &polled, size_t first, Clock::time_point now,
                            const RenderMetrics &render) {
    if (!listening() || polled.size() < first + 1 + scrapes_.size()) return;
    std::vector<Scrape> open;
    for (size_t i = 0; i < scrapes_.size(); ++i) {
        Scrape &scrape = scrapes_[i];
        const short revents = polled[first + 1 + i].revents;
        if (scrape.deadline > now && (revents == 0 || advance(&scrape, revents, render))) {
            open.push_back(std::move(scrape));
        }
    }
    scrapes_ = std::move(open);
    if (polled[first].revents & POLLIN) accept_scrapers(now);
}

bool MetricsEndpoint::advance(Scrape *scrape, short revents, const RenderMetrics &render) {
    if (scrape->response.empty()) return receive(scrape, render);
    if (revents & (POLLERR | POLLHUP)) return false;
    return send_some(scrape);
}

bool MetricsEndpoint::receive(Scrape *scrape, const RenderMetrics &render) {
    char bytes[1024];
    const size_t room = std::min(sizeof(bytes), kMaxScrapeRequestBytes - scrape->request.size());
    const ssize_t got = ::recv(scrape->fd.get(), bytes, room, MSG_DONTWAIT);
    if (got < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
    if (got == 0) return false;  // gone before its request was complete
    scrape->request.append(bytes, static_cast<size_t>(got));
    const ScrapeRequest request = classify_scrape_request(scrape->request);
    if (request == ScrapeRequest::incomplete) return true;
    scrape->response = scrape_response(request, render);
    return send_some(scrape);  // most answers fit the socket's buffer at once
}

bool MetricsEndpoint::send_some(Scrape *scrape) {
    const std::string &response = scrape->response;
    while (scrape->sent < response.size()) {
        const ssize_t sent = ::send(scrape->fd.get(), response.data() + scrape->sent, response.size() - scrape->sent,
                                    MSG_NOSIGNAL | MSG_DONTWAIT);
        if (sent < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
        scrape->sent += static_cast<size_t>(sent);
    }
    ::shutdown(scrape->fd.get(), SHUT_WR);
    return false;
}

// Accepts what is waiting, up to a few per round; beyond kMaxScrapes open, a new
// connection is closed at once, so that idle scrapers cannot hold the backlog.
void MetricsEndpoint::accept_scrapers(Clock::time_point now) {
    for (size_t accepted = 0; accepted < kMaxScrapes; ++accepted) {
        UniqueFd fd(::accept4(listener_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
        if (!fd.valid()) return;
        if (scrapes_.size() >= kMaxScrapes) continue;
        scrapes_.push_back(Scrape{std::move(fd), now + kScrapeDeadline, {}, {}, 0});
    }
}

}  // namespace ggml_remote::host
