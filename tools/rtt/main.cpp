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
    std::unique_ptr<guest::RemoteSession> session;
    guest::GuestOptions options = guest::read_guest_options();
    options.connect_timeout_ms = 5000;
    status = guest::RemoteSession::open(endpoint, options, &session);
    if (!status) fail(status.message());

    BackendInit::Reply backend{};
    status = session->call<BackendInit>({0}).reply(&backend).run();
    if (!status) fail(status.message());

    // Empty command: Synchronize on an idle backend.
    std::vector<double> samples;
    samples.reserve(round_trips);
    for (int i = 0; i < round_trips + 1000; ++i) {
        const auto start = Clock::now();
        status = session->call<Synchronize>({backend.backend}).run();
        const auto end = Clock::now();
        if (!status) fail(status.message());
        if (i >= 1000) samples.push_back(std::chrono::duration<double, std::micro>(end - start).count());
    }
    std::printf("%s: empty round trip: median %.1f us, p99 %.1f us, min %.1f us (%d round trips)\n",
                endpoint.to_string().c_str(), percentile(samples, 0.5), percentile(samples, 0.99),
                percentile(samples, 0.0), round_trips);

    // 16 MiB writes and reads, as ggml's set_tensor / get_tensor: through the
    // socket (like ggml-rpc), or, in a shared-memory session, a memcpy into the
    // buffer's memory file, mapped here as the plugin maps it.
    const size_t size = 16u << 20;
    BufferAlloc::Reply buffer{};
    UniqueFd shared_fd;
    status = session->call<BufferAlloc>({0, size}).reply(&buffer).receive_fd(&shared_fd).run();
    if (!status) fail(status.message());
    if (buffer.shared) {
        Mapping mapping;
        status = Mapping::map(shared_fd.get(), 0, size, true, &mapping);
        if (!status) fail(status.message());
        std::vector<uint8_t> data(size, 0x5a), local(size, 0);
        auto measure = [&](uint8_t *to, const uint8_t *from) {
            std::vector<double> rates;
            for (int i = 0; i < 50; ++i) {
                const auto start = Clock::now();
                std::memcpy(to, from, size);
                rates.push_back(size / std::chrono::duration<double>(Clock::now() - start).count() / 1e9);
            }
            return rates;
        };
        auto *base = static_cast<uint8_t *>(mapping.data());
        const std::vector<double> rates[4] = {measure(local.data(), data.data()), measure(data.data(), local.data()),
                                              measure(base, data.data()), measure(data.data(), base)};
        const char *names[4] = {"local memcpy (write)", "local memcpy (read)", "set_tensor (shared memory)",
                                "get_tensor (shared memory)"};
        for (int i = 0; i < 4; ++i) {
            std::printf("%s: 16 MiB %s: median %.2f GB/s (min %.2f, max %.2f)", endpoint.to_string().c_str(),
                        names[i], percentile(rates[i], 0.5), percentile(rates[i], 0.0), percentile(rates[i], 1.0));
            if (i >= 2) std::printf(", %.2fx local", percentile(rates[i], 0.5) / percentile(rates[i - 2], 0.5));
            std::printf("\n");
        }
        return 0;
    }
    std::vector<uint8_t> data(size, 0x5a);
    for (const char *what : {"set_tensor", "get_tensor"}) {
        std::vector<double> rates;
        for (int i = 0; i < 20; ++i) {
            const auto start = Clock::now();
            if (what[0] == 's') {
                (void)session->post<SetTensor>({{buffer.buffer, 0, size}}, ByteView(data));
                status = session->call<Synchronize>({backend.backend}).run();
            } else {
                status = session->call<GetTensor>({{buffer.buffer, 0, size}}).reply_tail_into(data.data(), size).run();
            }
            const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
            if (!status) fail(status.message());
            rates.push_back(size / seconds / 1e9);
        }
        std::printf("%s: 16 MiB %s: median %.2f GB/s (min %.2f, max %.2f)\n", endpoint.to_string().c_str(), what,
                    percentile(rates, 0.5), percentile(rates, 0.0), percentile(rates, 1.0));
    }
    return 0;
}
