// Fuzz target: the whole dispatcher, in process. Each input is one guest session
// against the host's real CPU device: a fresh Session, a valid handshake, then the
// input's frames ([u16 command][u32 length][payload], see fuzz_support.h) handed to
// Session::handle one by one, as the worker hands over the frames it receives.
//
// Graphs are validated exactly as in the server. Only the final compute is gated
// (compute_gate.h): graphs too large to compute quickly pass validation and are
// then not computed. Out-of-range indexes are computed, for the index guard to refuse.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "compute_gate.h"
#include "fuzz_support.h"
#include "host/worker/session/session.h"
#include "write_set_oracle.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    using namespace ggml_remote;
    using namespace ggml_remote::protocol;
    static ggml_backend_dev_t cpu = fuzz::host_cpu_device();

    // Small limits keep every input fast and its memory bounded.
    host::SessionLimits limits;
    limits.max_message_size = 16ull << 20;
    limits.memory_quota = 64ull << 20;
    limits.max_buffers = 64;
    limits.max_threads = 1;
    limits.default_threads = 1;
    limits.tensor_list.max_tensors = 1 << 16;
    limits.tensor_list.max_nodes = 1 << 16;
    host::Session session({cpu}, limits);
    session.allow_shared_memory();
    // The write-set oracle: a validated graph may change only its results' bytes.
    static fuzz::WriteSetOracle oracle;
    session.set_compute_gate_for_testing([](const ggml_cgraph *graph) {
        if (!fuzz::safe_to_compute(graph)) return false;
        oracle.before(graph);
        return true;
    });
    session.set_compute_check_for_testing([](const ggml_cgraph *graph) {
        const std::string stray = oracle.after(graph);
        if (!stray.empty()) {
            std::fprintf(stderr, "write-set oracle: %s\n", stray.c_str());
            __builtin_trap();
        }
    });

    std::vector<uint8_t> hello;
    append_pod(hello, Hello::Request{});
    host::ReplyFrame hello_reply;
    if (!session.handle(static_cast<uint16_t>(CommandId::hello), ByteView(hello), &hello_reply).ok()) __builtin_trap();

    ByteView input(data, size);
    uint16_t command = 0;
    ByteView payload;
    std::vector<uint8_t> sink;
    size_t frames = 0, refused = 0;
    // GGML_REMOTE_FUZZ_VERBOSE=1: what each input did (for checking seeds by hand).
    static const bool verbose = std::getenv("GGML_REMOTE_FUZZ_VERBOSE") != nullptr;
    while (fuzz::next_session_frame(&input, &command, &payload)) {
        host::ReplyFrame reply;
        std::vector<UniqueFd> fds;
        const Status status = session.handle(command, payload, &reply, &fds);
        ++frames;
        refused += status.ok() ? 0 : 1;
        if (verbose && !status.ok()) {
            std::fprintf(stderr, "frame %zu (%s): %s\n", frames - 1, command_name(static_cast<CommandId>(command)),
                         status.message().c_str());
        }
        // Everything a reply would send must be readable: the sanitizers check
        // the copy (a get_tensor tail is a view of buffer memory).
        const ByteView tail = reply.tail.bytes();
        sink.assign(reply.fixed.begin(), reply.fixed.end());
        sink.insert(sink.end(), tail.data, tail.data + tail.size);
        sink.insert(sink.end(), status.message().begin(), status.message().end());
    }
    if (verbose) {
        std::fprintf(stderr, "session: %zu frames, %zu refused, %llu graphs computed\n", frames, refused,
                     static_cast<unsigned long long>(session.counters().graph_computes));
    }
    return 0;
}
