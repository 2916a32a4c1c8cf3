// ggml-remote-rtt: the round trip of an empty command to a ggml-remote-server,
// and the bandwidth of tensor reads and writes, as the guest plugin sees them;
// with --device, to a buffer of one remote device (a GPU's, say), and with
// --local, the same writes and reads on a device of this process's own ggml.
#include <ggml-backend.h>
#include <ggml.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "guest/session/remote_session.h"
#include "transport/endpoint.h"
#include "transport/shared_memory.h"

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
// buffer's memory (a memory file, or an ivshmem region's heap), mapped here as the
// plugin maps it; local copies beside them.
void measure_shared_memory(const std::string &where, uint8_t *base) {
    std::vector<uint8_t> data(kTransferSize, 0x5a), local(kTransferSize, 0);
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

// Where a shared buffer's bytes are mapped here: its memory file's mapping (kept
// until the process exits), or its place in the ivshmem region.
uint8_t *shared_base(const guest::RemoteSession &session, const BufferAlloc::Reply &buffer, int shared_fd,
                     const std::vector<uint8_t> &tail) {
    void *at = nullptr;
    Status status;
    if (buffer.shared == BufferAlloc::kSharedInRegion) {
        uint64_t offset = 0;
        status = read_pod(ByteView(tail), 0, &offset) ? session.region_bytes(offset, kTransferSize, &at)
                                                      : error(Code::error, "no offset in the region");
    } else {
        static Mapping mapping;
        status = Mapping::map(shared_fd, 0, kTransferSize, true, &mapping);
        at = mapping.data();
    }
    if (!status) fail(status.message());
    return static_cast<uint8_t *>(at);
}

// GB/s of one kTransferSize copy that started at `start`.
double rate_since(Clock::time_point start) {
    return kTransferSize / std::chrono::duration<double>(Clock::now() - start).count() / 1e9;
}

// 16 MiB writes (set_tensor) and reads (get_tensor) to one device's buffer.
struct Transfers {
    std::string target;  // " on NAME", or empty for the server's first device
    std::vector<double> set, get;
};

// Prints both directions; beside `local`'s figures, when given, as a ratio.
void print_transfers(const std::string &where, const Transfers &measured, const Transfers *local) {
    const std::vector<double> *rates[2] = {&measured.set, &measured.get};
    const char *names[2] = {"set_tensor", "get_tensor"};
    for (int i = 0; i < 2; ++i) {
        const double median = percentile(*rates[i], 0.5);
        std::printf("%s: 16 MiB %s%s: median %.2f GB/s (min %.2f, max %.2f)", where.c_str(), names[i],
                    measured.target.c_str(), median, percentile(*rates[i], 0.0), percentile(*rates[i], 1.0));
        if (local != nullptr) {
            const double base = percentile(i == 0 ? local->set : local->get, 0.5);
            std::printf(", %.2fx local", median / base);
        }
        std::printf("\n");
    }
}

// The bytes written: not one value repeated, so that a read that lands at the wrong
// offset shows.
std::vector<uint8_t> pattern() {
    std::vector<uint8_t> bytes(kTransferSize);
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 31 + i / 4093);
    return bytes;
}

// Fails unless the last read brought back what was written.
void check_read_back(const std::vector<uint8_t> &read, const std::string &where) {
    if (read != pattern()) fail(where + ": 16 MiB read back differ from those written");
}

// A buffer outside shared memory (a GPU's, or any over unix and tcp): its bytes go
// with the commands, through the shared ring or the socket, like ggml-rpc's.
Transfers measure_command_transfers(guest::RemoteSession &session, uint64_t backend, uint64_t buffer) {
    std::vector<uint8_t> data = pattern();
    Transfers transfers;
    for (int i = 0; i < 20; ++i) {
        const auto start = Clock::now();
        (void)session.post<SetTensor>({{buffer, 0, kTransferSize}}, ByteView(data));
        const Status status = session.call<Synchronize>({backend}).run();
        if (!status) fail(status.message());
        transfers.set.push_back(rate_since(start));
    }
    std::fill(data.begin(), data.end(), 0);  // what the reads bring back must be the writes' bytes
    for (int i = 0; i < 20; ++i) {
        const auto start = Clock::now();
        const Status status =
            session.call<GetTensor>({{buffer, 0, kTransferSize}}).reply_tail_into(data.data(), kTransferSize).run();
        if (!status) fail(status.message());
        transfers.get.push_back(rate_since(start));
    }
    check_read_back(data, session.endpoint());
    return transfers;
}

// The baseline for a remote device: ggml_backend_tensor_set and _get of 16 MiB on
// a buffer of this process's own device `name` (Vulkan0: through Vulkan's staging).
Transfers measure_local_device(const std::string &name) {
    ggml_backend_load_all();
    ggml_backend_dev_t device = ggml_backend_dev_by_name(name.c_str());
    if (device == nullptr) fail("no local device " + name + " (lavapipe's Vulkan0 needs GGML_VK_VISIBLE_DEVICES=0)");
    ggml_backend_buffer_t buffer = ggml_backend_buft_alloc_buffer(ggml_backend_dev_buffer_type(device), kTransferSize);
    if (buffer == nullptr) fail("cannot allocate 16 MiB on local " + name);
    const ggml_init_params params{ggml_tensor_overhead(), nullptr, true};
    ggml_context *context = ggml_init(params);
    ggml_tensor *bytes = ggml_new_tensor_1d(context, GGML_TYPE_I8, kTransferSize);
    if (ggml_backend_tensor_alloc(buffer, bytes, ggml_backend_buffer_get_base(buffer)) != GGML_STATUS_SUCCESS) {
        fail("cannot place a tensor in local " + name + "'s buffer");
    }
    std::vector<uint8_t> data = pattern();
    Transfers transfers{" on local " + name, {}, {}};
    for (int i = 0; i < 20; ++i) {
        const auto start = Clock::now();
        ggml_backend_tensor_set(bytes, data.data(), 0, kTransferSize);
        transfers.set.push_back(rate_since(start));
    }
    std::fill(data.begin(), data.end(), 0);  // what the reads bring back must be the writes' bytes
    for (int i = 0; i < 20; ++i) {
        const auto start = Clock::now();
        ggml_backend_tensor_get(bytes, data.data(), 0, kTransferSize);
        transfers.get.push_back(rate_since(start));
    }
    check_read_back(data, "local " + name);
    ggml_free(context);
    ggml_backend_buffer_free(buffer);
    return transfers;
}

// The name the server gives its device `index` (DeviceInfo's first string).
std::string remote_device_name(guest::RemoteSession &session, uint32_t index) {
    DeviceInfo::Reply info{};
    std::vector<uint8_t> strings;
    const Status status = session.call<DeviceInfo>({index}).reply(&info).reply_tail(&strings).run();
    if (!status) fail(status.message());
    return std::string(strings.begin(), std::find(strings.begin(), strings.end(), 0));
}

constexpr long kMaxDeviceIndex = 1023;      // more than a server serves; the server says which exist
constexpr long kMaxRoundTrips = 100000000;  // hours of round trips

struct Arguments {
    std::string endpoint;
    int round_trips = 20000;
    int device = -1;    // --device: the remote device whose buffer is measured (-1: the first, unnamed)
    std::string local;  // --local: the local device to compare with
};

void usage(const char *program) {
    std::printf(
        "usage: %s ENDPOINT [ROUND_TRIPS] [--device N] [--local NAME]\n"
        "Measures the round trip of an empty command (median, p99; ROUND_TRIPS 0 skips it)\n"
        "and the bandwidth of 16 MiB tensor writes and reads through a ggml-remote-server.\n"
        "  --device N    to a buffer of the server's device N (0 is the first it serves)\n"
        "  --local NAME  beside ggml_backend_tensor_set/get on this process's device NAME,\n"
        "                e.g. Vulkan0 (lavapipe's needs GGML_VK_VISIBLE_DEVICES=0)\n",
        program);
}

// A whole decimal number in [0, max], or an exit with what was wrong: atoi would
// take "x" (or "1x") for 0 (1) and measure a device nobody asked for.
int parse_number(const char *what, const char *text, long max) {
    errno = 0;
    char *end = nullptr;
    const long value = std::strtol(text, &end, 10);
    if (end == text || *end != '\0' || errno == ERANGE || value < 0 || value > max) {
        std::fprintf(stderr, "ggml-remote-rtt: %s must be a whole number from 0 to %ld, not '%s'\n", what, max, text);
        std::exit(2);
    }
    return static_cast<int>(value);
}

Arguments parse_arguments(int argc, char **argv) {
    Arguments arguments;
    int positional = 0;
    for (int i = 1; i < argc; ++i) {
        const std::string word = argv[i];
        if (word == "--help" || word == "-h") {
            usage(argv[0]);
            std::exit(0);
        } else if ((word == "--device" || word == "--local") && i + 1 < argc) {
            if (word == "--local")
                arguments.local = argv[++i];
            else
                arguments.device = parse_number("--device", argv[++i], kMaxDeviceIndex);
        } else if (positional == 0 && word[0] != '-') {
            arguments.endpoint = word;
            ++positional;
        } else if (positional == 1 && word[0] != '-') {
            arguments.round_trips = parse_number("ROUND_TRIPS", word.c_str(), kMaxRoundTrips);
            ++positional;
        } else {
            usage(argv[0]);
            std::exit(2);
        }
    }
    if (arguments.endpoint.empty()) {
        usage(argv[0]);
        std::exit(2);
    }
    return arguments;
}

}  // namespace

int main(int argc, char **argv) {
    const Arguments arguments = parse_arguments(argc, argv);
    Endpoint endpoint;
    Status status = parse_endpoint(arguments.endpoint, &endpoint);
    if (!status) fail(status.message());
    // The local device first: the server's session does not wait on its start (Vulkan's takes a second).
    std::unique_ptr<Transfers> local;
    if (!arguments.local.empty()) {
        local = std::make_unique<Transfers>(measure_local_device(arguments.local));
        print_transfers("local", *local, nullptr);
    }
    const std::unique_ptr<guest::RemoteSession> session = open_session(endpoint);
    const std::string where = endpoint.to_string();
    const uint32_t device = arguments.device < 0 ? 0 : static_cast<uint32_t>(arguments.device);
    if (device >= session->device_count()) {
        fail("the server offers " + std::to_string(session->device_count()) + " devices, no device " +
             std::to_string(device));
    }

    BackendInit::Reply backend{};
    status = session->call<BackendInit>({device}).reply(&backend).run();
    if (!status) fail(status.message());
    if (arguments.round_trips > 0) measure_round_trips(where, *session, backend.backend, arguments.round_trips);

    BufferAlloc::Reply buffer{};
    UniqueFd shared_fd;
    std::vector<uint8_t> tail;
    status = session->call<BufferAlloc>({device, kTransferSize})
                 .reply(&buffer)
                 .receive_fd(&shared_fd)
                 .reply_tail(&tail)
                 .run();
    if (!status) fail(status.message());
    if (buffer.shared) {
        measure_shared_memory(where, shared_base(*session, buffer, shared_fd.get(), tail));
        return 0;
    }
    Transfers transfers = measure_command_transfers(*session, backend.backend, buffer.buffer);
    if (arguments.device >= 0) transfers.target = " on " + remote_device_name(*session, device);
    print_transfers(where, transfers, local.get());
    return 0;
}
