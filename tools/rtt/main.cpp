// ggml-remote-rtt: the round trip of an empty command to a ggml-remote-server,
// and the bandwidth of tensor reads and writes, as the guest plugin sees them.
#include "guest/remote_session.h"
#include "transport/endpoint.h"
#include "transport/shared_memory.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

using namespace ggml_remote;
using namespace ggml_remote::protocol;
using Clock = std::chrono::steady_clock;

namespace {

[[noreturn]] void fail(const std::string &message) {
    std::fprintf(stderr, "ggml-remote-rtt: %s\n", message.c_str());
    std::exit(1);
}

double percentile(std::vector<double> values, double p) {
    std::sort(values.begin(), values.end());
    const size_t index = std::min(values.size() - 1, static_cast<size_t>(p * (values.size() - 1) + 0.5));
    return values[index];
}

constexpr size_t kTransferSize = 16u << 20;

std::unique_ptr<guest::RemoteSession> open_session(const Endpoint &endpoint) {
    std::unique_ptr<guest::RemoteSession> session;
    guest::GuestOptions options = guest::read_guest_options();
    options.connect_timeout_ms = 5000;
    const Status status = guest::RemoteSession::open(endpoint, options, &session);
    if (!status) fail(status.message());
    return session;
}

// Empty command: Synchronize on an idle backend, after a thousand to warm up.
void measure_round_trips(const std::string &where, guest::RemoteSession &session, uint64_t backend, int round_trips) {
    std::vector<double> samples;
    samples.reserve(round_trips);
    for (int i = 0; i < round_trips + 1000; ++i) {
        const auto start = Clock::now();
        const Status status = session.call<Synchronize>({backend}).run();
        const auto end = Clock::now();
        if (!status) fail(status.message());
        if (i >= 1000) samples.push_back(std::chrono::duration<double, std::micro>(end - start).count());
    }
    std::printf("%s: empty round trip: median %.1f us, p99 %.1f us, min %.1f us (%d round trips)\n", where.c_str(),
                percentile(samples, 0.5), percentile(samples, 0.99), percentile(samples, 0.0), round_trips);
}

// GB/s of 50 copies of kTransferSize bytes.
std::vector<double> memcpy_rates(uint8_t *to, const uint8_t *from) {
    std::vector<double> rates;
    for (int i = 0; i < 50; ++i) {
        const auto start = Clock::now();
        std::memcpy(to, from, kTransferSize);
        rates.push_back(kTransferSize / std::chrono::duration<double>(Clock::now() - start).count() / 1e9);
    }
    return rates;
}

// A shared-memory session's set_tensor and get_tensor are a memcpy into the
// buffer's memory file, mapped here as the plugin maps it; local copies beside them.
void measure_shared_memory(const std::string &where, int shared_fd) {
    Mapping mapping;
    const Status status = Mapping::map(shared_fd, 0, kTransferSize, true, &mapping);
    if (!status) fail(status.message());
    std::vector<uint8_t> data(kTransferSize, 0x5a), local(kTransferSize, 0);
    auto *base = static_cast<uint8_t *>(mapping.data());
    const std::vector<double> rates[4] = {memcpy_rates(local.data(), data.data()),
                                          memcpy_rates(data.data(), local.data()), memcpy_rates(base, data.data()),
                                          memcpy_rates(data.data(), base)};
    const char *names[4] = {"local memcpy (write)", "local memcpy (read)", "set_tensor (shared memory)",
                            "get_tensor (shared memory)"};
    for (int i = 0; i < 4; ++i) {
        std::printf("%s: 16 MiB %s: median %.2f GB/s (min %.2f, max %.2f)", where.c_str(), names[i],
                    percentile(rates[i], 0.5), percentile(rates[i], 0.0), percentile(rates[i], 1.0));
        if (i >= 2) std::printf(", %.2fx local", percentile(rates[i], 0.5) / percentile(rates[i - 2], 0.5));
        std::printf("\n");
    }
}

// Otherwise they go through the socket, like ggml-rpc's.
void measure_socket_transfers(const std::string &where, guest::RemoteSession &session, uint64_t backend,
                              uint64_t buffer) {
    std::vector<uint8_t> data(kTransferSize, 0x5a);
    for (const char *what : {"set_tensor", "get_tensor"}) {
        std::vector<double> rates;
        for (int i = 0; i < 20; ++i) {
            const auto start = Clock::now();
            Status status;
            if (what[0] == 's') {
                (void)session.post<SetTensor>({{buffer, 0, kTransferSize}}, ByteView(data));
                status = session.call<Synchronize>({backend}).run();
            } else {
                status = session.call<GetTensor>({{buffer, 0, kTransferSize}})
                             .reply_tail_into(data.data(), kTransferSize)
                             .run();
            }
            const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
            if (!status) fail(status.message());
            rates.push_back(kTransferSize / seconds / 1e9);
        }
        std::printf("%s: 16 MiB %s: median %.2f GB/s (min %.2f, max %.2f)\n", where.c_str(), what,
                    percentile(rates, 0.5), percentile(rates, 0.0), percentile(rates, 1.0));
    }
}

}  // namespace

int main(int argc, char **argv) {
    if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
        std::printf("usage: %s ENDPOINT [ROUND_TRIPS]\n"
                    "Measures the round trip of an empty command (median, p99) and the bandwidth of\n"
                    "16 MiB tensor writes and reads through a ggml-remote-server.\n",
                    argv[0]);
        return argc < 2 ? 2 : 0;
    }
    const int round_trips = argc > 2 ? std::atoi(argv[2]) : 20000;
    Endpoint endpoint;
    Status status = parse_endpoint(argv[1], &endpoint);
    if (!status) fail(status.message());
    const std::unique_ptr<guest::RemoteSession> session = open_session(endpoint);
    const std::string where = endpoint.to_string();

    BackendInit::Reply backend{};
    status = session->call<BackendInit>({0}).reply(&backend).run();
    if (!status) fail(status.message());
    measure_round_trips(where, *session, backend.backend, round_trips);

    BufferAlloc::Reply buffer{};
    UniqueFd shared_fd;
    status = session->call<BufferAlloc>({0, kTransferSize}).reply(&buffer).receive_fd(&shared_fd).run();
    if (!status) fail(status.message());
    if (buffer.shared) {
        measure_shared_memory(where, shared_fd.get());
    } else {
        measure_socket_transfers(where, *session, backend.backend, buffer.buffer);
    }
    return 0;
}
