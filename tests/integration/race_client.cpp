// race_client: a guest (ggml through the plugin) whose CPU buffers are shared memory
// (shm:, ivshmem:), and which rewrites, from a racer thread and as fast as it can,
// the data-dependent inputs of every op whose ggml-cpu kernel follows them (row ids,
// expert ids, sequence ids, the values ARGSORT sorts) while the worker computes.
// The racer writes in-range values and hostile ones (the bound, -1, INT32_MIN, ...).
//
// Each case's graph is computed again and again; after each compute (refused or
// not) it requires, from memory the guest reads directly:
//   - the result is one the host's CPU computes, locally, for an in-range index, or
//     untouched (a refused compute): never bytes from outside the session's tensors;
//   - every other tensor of the buffer, and a canary before and after them, holds
//     exactly what was written before the compute: no write outside the result;
// and, after the case, that the session still computes the right result (a worker
// that died of a signal leaves a lost session; the server's log says which signal).
// One case races the ids that a TOP_K of the graph itself computes (MoE routing).
//
// Last, with --ring, a racer scribbles over the guest-to-host ring (its frames'
// bytes after the guest published them, and its written count) while the guest
// computes: the host may end the session, never fault (the test reads the log).
//
// usage: GGML_BACKEND_PATH=libggml-remote.so GGML_REMOTE_SERVERS=ENDPOINT
//        race_client SECONDS [--ring shm|REGION_FILE]      (RACE_ONLY=CASE: that case only)
// prints one line per case ("ok CASE: N computes, R refused, ...") or "FAIL: ...".
// exits 0 when every case held, 1 when one did not.
#include <fcntl.h>
#include <ggml-alloc.h>
#include <ggml-backend.h>
#include <ggml.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "client_support.h"

namespace {

using client_support::Backend;
using client_support::Buffer;
using client_support::Context;
using client_support::fail;
using client_support::first_remote_device;
using Bytes = std::vector<uint8_t>;

// One op whose kernel follows data. `build` makes its graph's output in ctx and
// names the raced tensor (*raced); with leaf_ids, computed ids become a plain input
// (for the local references).
struct Case {
    const char *name;
    std::function<ggml_tensor *(ggml_context *ctx, bool leaf_ids, ggml_tensor **raced)> build;
    int64_t bound;          // in-range indexes: [0, bound); 0: the raced tensor holds floats (ARGSORT)
    bool computed = false;  // the raced tensor is a node of the graph (TOP_K's result)
};

ggml_tensor *input(ggml_context *ctx, ggml_type type, int64_t n0, int64_t n1 = 1, int64_t n2 = 1, int64_t n3 = 1) {
    return ggml_new_tensor_4d(ctx, type, n0, n1, n2, n3);
}

ggml_tensor *ids_tensor(ggml_context *ctx, ggml_type type, int64_t n0, int64_t n1 = 1) {
    ggml_tensor *ids = input(ctx, type, n0, n1);
    ggml_set_name(ids, "ids");
    return ids;
}

std::vector<Case> cases() {
    std::vector<Case> all;
    all.push_back({"GET_ROWS",
                   [](ggml_context *ctx, bool, ggml_tensor **raced) {
                       *raced = ids_tensor(ctx, GGML_TYPE_I32, 1);
                       return ggml_get_rows(ctx, input(ctx, GGML_TYPE_F32, 8, 4), *raced);
                   },
                   4});
    all.push_back({"GET_ROWS_BACK",
                   [](ggml_context *ctx, bool, ggml_tensor **raced) {
                       *raced = ids_tensor(ctx, GGML_TYPE_I32, 1);
                       return ggml_get_rows_back(ctx, input(ctx, GGML_TYPE_F32, 8, 1), *raced,
                                                 input(ctx, GGML_TYPE_F32, 8, 4));
                   },
                   4});
    for (ggml_type type : {GGML_TYPE_I32, GGML_TYPE_I64}) {
        all.push_back({type == GGML_TYPE_I32 ? "SET_ROWS(i32)" : "SET_ROWS(i64)",
                       [type](ggml_context *ctx, bool, ggml_tensor **raced) {
                           ggml_tensor *destination = input(ctx, GGML_TYPE_F32, 8, 4);
                           *raced = ids_tensor(ctx, type, 1);
                           return ggml_set_rows(ctx, destination, input(ctx, GGML_TYPE_F32, 8, 1), *raced);
                       },
                       4});
    }
    all.push_back({"MUL_MAT_ID",
                   [](ggml_context *ctx, bool, ggml_tensor **raced) {
                       *raced = ids_tensor(ctx, GGML_TYPE_I32, 1, 1);
                       return ggml_mul_mat_id(ctx, input(ctx, GGML_TYPE_F32, 8, 4, 4),
                                              input(ctx, GGML_TYPE_F32, 8, 1, 1), *raced);
                   },
                   4});
    all.push_back({"ADD_ID",
                   [](ggml_context *ctx, bool, ggml_tensor **raced) {
                       *raced = ids_tensor(ctx, GGML_TYPE_I32, 1, 1);
                       return ggml_add_id(ctx, input(ctx, GGML_TYPE_F32, 8, 1, 1), input(ctx, GGML_TYPE_F32, 8, 4),
                                          *raced);
                   },
                   4});
    all.push_back({"SSM_SCAN",
                   [](ggml_context *ctx, bool, ggml_tensor **raced) {
                       // Mamba-2: d_state 4, head_dim 2, 2 heads, 1 group, 2 tokens, 1 sequence, 4 states.
                       ggml_tensor *s = input(ctx, GGML_TYPE_F32, 4, 2, 2, 4),
                                   *x = input(ctx, GGML_TYPE_F32, 2, 2, 2, 1);
                       ggml_tensor *dt = input(ctx, GGML_TYPE_F32, 2, 2, 1), *a = input(ctx, GGML_TYPE_F32, 1, 2);
                       ggml_tensor *b = input(ctx, GGML_TYPE_F32, 4, 1, 2, 1),
                                   *c = input(ctx, GGML_TYPE_F32, 4, 1, 2, 1);
                       *raced = ids_tensor(ctx, GGML_TYPE_I32, 1);
                       return ggml_ssm_scan(ctx, s, x, dt, a, b, c, *raced, 1);
                   },
                   4});
    all.push_back({"ARGSORT",
                   [](ggml_context *ctx, bool, ggml_tensor **raced) {
                       *raced = input(ctx, GGML_TYPE_F32, 64);
                       ggml_set_name(*raced, "values");
                       return ggml_argsort(ctx, *raced, GGML_SORT_ORDER_DESC);
                   },
                   0});
    all.push_back({"TOP_K->MUL_MAT_ID",
                   [](ggml_context *ctx, bool leaf_ids, ggml_tensor **raced) {
                       ggml_tensor *as = input(ctx, GGML_TYPE_F32, 8, 4, 4), *b = input(ctx, GGML_TYPE_F32, 8, 1, 1);
                       if (leaf_ids) {
                           *raced = ids_tensor(ctx, GGML_TYPE_I32, 1, 1);
                       } else {  // the router: the best of 4 experts' logits
                           ggml_tensor *top = ggml_top_k(ctx, input(ctx, GGML_TYPE_F32, 4, 1), 1);
                           *raced = ggml_reshape_2d(ctx, top, 1, 1);
                           ggml_set_name(top, "selected");
                       }
                       return ggml_mul_mat_id(ctx, as, b, *raced);
                   },
                   4, true});
    return all;
}

// A case's tensors in one buffer of `backend`'s device, between two canaries.
struct Built {
    Context ctx;
    Buffer buffer;
    ggml_cgraph *graph = nullptr;
    ggml_tensor *output = nullptr, *raced = nullptr;
    std::vector<ggml_tensor *> inputs;  // every tensor the compute may not write, canaries included
};

// What each input holds before every compute: fixed bytes of the tensor's index
// (small floats; index tensors 0), and the output a recognisable fill.
Bytes fill_of(const ggml_tensor *t, size_t index) {
    Bytes bytes(ggml_nbytes(t));
    if (t->type == GGML_TYPE_F32) {
        for (size_t k = 0; k < bytes.size() / 4; ++k) {
            const float v = float(int((k * 7 + index * 13) % 17) - 8) / 8.0f;
            std::memcpy(bytes.data() + 4 * k, &v, 4);
        }
    } else if (t->type != GGML_TYPE_I32 && t->type != GGML_TYPE_I64) {
        std::memset(bytes.data(), 0xa5, bytes.size());
    }
    return bytes;
}

Built build(const Case &c, ggml_backend_t backend, bool leaf_ids) {
    Built b;
    ggml_init_params params{};
    params.mem_size = 64 * ggml_tensor_overhead() + ggml_graph_overhead();
    params.no_alloc = true;
    b.ctx.reset(ggml_init(params));
    ggml_tensor *before = input(b.ctx.get(), GGML_TYPE_I8, 4096);
    b.output = c.build(b.ctx.get(), leaf_ids, &b.raced);
    ggml_tensor *after = input(b.ctx.get(), GGML_TYPE_I8, 4096);
    b.graph = ggml_new_graph(b.ctx.get());
    ggml_build_forward_expand(b.graph, b.output);
    b.buffer.reset(ggml_backend_alloc_ctx_tensors(b.ctx.get(), backend));
    if (b.buffer == nullptr) fail(std::string(c.name) + ": cannot allocate its buffer");
    ggml_tensor *written = b.output->view_src != nullptr ? b.output->view_src : b.output;  // SET_ROWS: in place
    for (ggml_tensor *t = ggml_get_first_tensor(b.ctx.get()); t != nullptr; t = ggml_get_next_tensor(b.ctx.get(), t)) {
        if (t->view_src != nullptr || t == written || t == b.raced || t->op != GGML_OP_NONE) continue;
        b.inputs.push_back(t);
    }
    (void)before;
    (void)after;
    return b;
}

// Writes every input's fill and the output's, straight into the buffer's memory
// when it is the guest's (shm), else through the backend.
void fill(const Built &b) {
    size_t index = 0;
    for (ggml_tensor *t : b.inputs) ggml_backend_tensor_set(t, fill_of(t, index++).data(), 0, ggml_nbytes(t));
    ggml_tensor *written = b.output->view_src != nullptr ? b.output->view_src : b.output;  // SET_ROWS: in place
    Bytes sentinel(ggml_nbytes(written), 0x7e);
    ggml_backend_tensor_set(written, sentinel.data(), 0, sentinel.size());
}

void set_index(ggml_tensor *ids, int64_t value) {
    for (int64_t k = 0; k < ggml_nelements(ids); ++k) {
        if (ids->type == GGML_TYPE_I32) {
            const int32_t v = static_cast<int32_t>(value);
            ggml_backend_tensor_set(ids, &v, k * 4, 4);
        } else {
            ggml_backend_tensor_set(ids, &value, k * 8, 8);
        }
    }
}

Bytes read(const ggml_tensor *t) {
    Bytes bytes(ggml_nbytes(t));
    ggml_backend_tensor_get(t, bytes.data(), 0, bytes.size());
    return bytes;
}

}  // namespace

namespace race {

// The racer: rewrites the raced tensor's elements in the guest's own mapping of
// the buffer, in-range and hostile values in turn, until told to stop.
class Racer {
  public:
    Racer(ggml_tensor *raced, int64_t bound) : raced_(raced), bound_(bound) {
        thread_ = std::thread([this] { run(); });
    }
    ~Racer() {
        stop_ = true;
        thread_.join();
    }
    uint64_t writes() const { return writes_; }

  private:
    void run() {
        auto *base = static_cast<uint8_t *>(raced_->data);
        const int64_t n = ggml_nelements(raced_);
        for (uint64_t round = 0; !stop_; ++round) {
            for (int64_t k = 0; k < n; ++k) store(base, k, round);
            ++writes_;
        }
    }
    void store(uint8_t *base, int64_t k, uint64_t round) {
        if (raced_->type == GGML_TYPE_F32) {  // values to sort: ordinary, huge, NaN, by turns
            const float values[] = {float(round % 97), -1e30f, NAN, float(k), INFINITY, -float(round % 13)};
            const float v = values[(round + k) % 6];
            uint32_t bits;
            std::memcpy(&bits, &v, sizeof(bits));
            __atomic_store_n(reinterpret_cast<uint32_t *>(base + k * 4), bits, __ATOMIC_RELAXED);
            return;
        }
        const int64_t hostile[] = {bound_, -1, INT32_MIN, INT32_MAX, 1 << 20, bound_ + 1, -4096, int64_t(1) << 40};
        const int64_t v = round % 2 == 0 ? int64_t(round / 2 % bound_) : hostile[(round / 2) % 8];
        if (raced_->type == GGML_TYPE_I32) {
            __atomic_store_n(reinterpret_cast<int32_t *>(base + k * 4), int32_t(v), __ATOMIC_RELAXED);
        } else {
            __atomic_store_n(reinterpret_cast<int64_t *>(base + k * 8), v, __ATOMIC_RELAXED);
        }
    }

    ggml_tensor *raced_;
    int64_t bound_;
    std::atomic<bool> stop_{false};
    std::atomic<uint64_t> writes_{0};
    std::thread thread_;
};

}  // namespace race

namespace {

// The local CPU's result for each in-range index.
std::vector<Bytes> references(const Case &c, ggml_backend_t cpu) {
    std::vector<Bytes> refs;
    Built local = build(c, cpu, true);
    for (int64_t v = 0; v < c.bound; ++v) {
        fill(local);
        set_index(local.raced, v);
        if (ggml_backend_graph_compute(cpu, local.graph) != GGML_STATUS_SUCCESS) fail("the local CPU failed");
        refs.push_back(read(local.output));
    }
    return refs;
}

// Whether ARGSORT's result is a permutation of its row's indexes.
bool is_permutation(const Bytes &bytes) {
    const size_t n = bytes.size() / 4;
    std::vector<bool> seen(n, false);
    for (size_t k = 0; k < n; ++k) {
        int32_t v;
        std::memcpy(&v, bytes.data() + 4 * k, 4);
        if (v < 0 || size_t(v) >= n || seen[v]) return false;
        seen[v] = true;
    }
    return true;
}

std::string hex_prefix(const Bytes &bytes) {
    std::string text;
    char part[4];
    for (size_t k = 0; k < bytes.size() && k < 32; ++k) {
        std::snprintf(part, sizeof(part), "%02x", bytes[k]);
        text += part;
    }
    return text;
}

struct Tally {
    uint64_t computes = 0, refused = 0, untouched = 0;
};

// One compute under the racer; fails the test on a result or write outside the rules.
void compute_once(const Case &c, ggml_backend_t remote, const Built &b, const std::vector<Bytes> &refs, Tally *tally) {
    fill(b);
    const Bytes before_output = read(b.output);
    std::vector<Bytes> before;
    for (ggml_tensor *t : b.inputs) before.push_back(read(t));
    const ggml_status status = ggml_backend_graph_compute(remote, b.graph);
    ggml_backend_synchronize(remote);
    ++tally->computes;
    if (status != GGML_STATUS_SUCCESS) ++tally->refused;
    for (size_t i = 0; i < b.inputs.size(); ++i) {
        if (read(b.inputs[i]) != before[i]) {
            fail(std::string(c.name) + ": the compute wrote into '" + ggml_get_name(b.inputs[i]) +
                 "', which is not its result");
        }
    }
    const Bytes out = read(b.output);
    if (out == before_output) {
        ++tally->untouched;
        return;
    }
    if (c.bound == 0) {
        if (!is_permutation(out)) fail(std::string(c.name) + ": the result is not a permutation: " + hex_prefix(out));
        return;
    }
    for (const Bytes &ref : refs) {
        if (out == ref) return;
    }
    fail(std::string(c.name) +
         ": a result no in-range index gives (bytes from outside the session?): " + hex_prefix(out));
}

void run_case(const Case &c, ggml_backend_t remote, ggml_backend_t cpu, double seconds) {
    const std::vector<Bytes> refs = c.bound > 0 ? references(c, cpu) : std::vector<Bytes>{};
    Built b = build(c, remote, false);
    if (!ggml_backend_buffer_is_host(b.buffer.get())) fail(std::string(c.name) + ": the buffer is not shared memory");
    Tally tally;
    uint64_t racer_writes = 0;
    {
        race::Racer racer(b.raced, c.bound);
        const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
        while (std::chrono::steady_clock::now() < end) compute_once(c, remote, b, refs, &tally);
        racer_writes = racer.writes();
    }
    // Without the racer, the session still computes what the CPU computes.
    fill(b);
    if (c.bound == 0) ggml_backend_tensor_set(b.raced, fill_of(b.raced, 0).data(), 0, ggml_nbytes(b.raced));
    if (!c.computed && c.bound > 0) set_index(b.raced, c.bound - 1);
    if (ggml_backend_graph_compute(remote, b.graph) != GGML_STATUS_SUCCESS) {
        fail(std::string(c.name) + ": the session no longer computes after the race (did its worker die?)");
    }
    const Bytes out = read(b.output);
    bool right = c.bound == 0 ? is_permutation(out) : false;
    for (const Bytes &ref : refs) right |= out == ref;
    if (!right) fail(std::string(c.name) + ": after the race, a wrong result: " + hex_prefix(out));
    std::printf("ok %s: %llu computes, %llu refused, %llu left the result untouched, %llu racer sweeps\n", c.name,
                (unsigned long long)tally.computes, (unsigned long long)tally.refused,
                (unsigned long long)tally.untouched, (unsigned long long)racer_writes);
    std::fflush(stdout);
}

}  // namespace

// The guest-to-host ring as this process maps it: its RegionHeader, then the data.
// shm: the plugin's mapping of the ring's memory file; else the region file
// mapped once more here (the ring at the layout's ring_offset, its 16th byte, and
// its capacity at the 24th).
uint8_t *ring_header(const std::string &where, size_t *capacity) {
    uint8_t *header = nullptr;
    if (where == "shm") {
        std::ifstream maps("/proc/self/maps");
        std::string line;
        while (std::getline(maps, line) && header == nullptr) {
            if (line.find("memfd:ggml-remote-ring") != std::string::npos) {
                header = reinterpret_cast<uint8_t *>(std::strtoull(line.c_str(), nullptr, 16));
            }
        }
    } else {
        const int fd = ::open(where.c_str(), O_RDWR | O_CLOEXEC);
        const off_t size = fd >= 0 ? ::lseek(fd, 0, SEEK_END) : -1;
        void *region = size > 0 ? ::mmap(nullptr, size_t(size), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
        if (region == MAP_FAILED) fail("cannot map the region " + where);
        uint64_t ring_offset = 0;  // RegionControl: magic, version, then the layout
        std::memcpy(&ring_offset, static_cast<uint8_t *>(region) + 16, sizeof(ring_offset));
        std::memcpy(capacity, static_cast<uint8_t *>(region) + 24, sizeof(*capacity));
        return static_cast<uint8_t *>(region) + ring_offset;
    }
    if (header == nullptr) fail("cannot find the shared ring in this process");
    std::memcpy(capacity, header + 8, sizeof(*capacity));  // RegionHeader: magic, version, capacity
    return header;
}

// Scribbles over the guest-to-host ring while the guest computes, until the
// session ends or `seconds` pass.
void race_the_ring(const std::string &where, ggml_backend_t remote, double seconds) {
    const Case get_rows = cases().front();
    Built b = build(get_rows, remote, false);
    fill(b);
    set_index(b.raced, 1);
    size_t capacity = 0;
    uint8_t *header = ring_header(where, &capacity);
    if (capacity == 0 || capacity > (64u << 20)) fail("the shared ring's capacity is unreadable");
    uint8_t *data = header + 4096;  // kRingHeaderBytes; the guest-to-host ring comes first
    std::atomic<bool> stop{false};
    std::thread scribbler([&] {
        std::mt19937_64 random(42);
        for (uint64_t n = 0; !stop; ++n) {
            const uint64_t value = random();
            if (n % (1u << 22) == (1u << 22) - 1) {  // now and then the written count (rings[0].written, at 64)
                __atomic_store_n(reinterpret_cast<uint64_t *>(header + 64), value, __ATOMIC_RELAXED);
            } else {
                __atomic_store_n(data + value % capacity, uint8_t(value >> 32), __ATOMIC_RELAXED);
            }
        }
    });
    uint64_t computes = 0, failed = 0;
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < end && failed < 3) {
        failed += ggml_backend_graph_compute(remote, b.graph) != GGML_STATUS_SUCCESS;
        ++computes;
    }
    stop = true;
    scribbler.join();
    std::printf("ok ring: %llu computes while the ring was scribbled over, %llu failed (the session may end)\n",
                (unsigned long long)computes, (unsigned long long)failed);
    std::fflush(stdout);
}

int main(int argc, char **argv) {
    const double seconds = argc > 1 ? std::atof(argv[1]) : 4.0;
    ggml_backend_dev_t device = first_remote_device();
    std::printf("device: %s (%s)\n", ggml_backend_dev_name(device), ggml_backend_dev_description(device));
    Backend remote(ggml_backend_dev_init(device, nullptr));
    Backend cpu(ggml_backend_init_by_type(GGML_BACKEND_DEVICE_TYPE_CPU, nullptr));
    if (remote == nullptr || cpu == nullptr) fail("cannot start the remote and the local CPU backends");
    std::vector<Case> all = cases();
    if (const char *only = std::getenv("RACE_ONLY")) {  // one case, by name (e.g. SSM_SCAN)
        std::vector<Case> chosen;
        for (const Case &c : all) {
            if (c.name == std::string(only)) chosen.push_back(c);
        }
        all = chosen;
    }
    const bool ring = argc > 3 && std::strcmp(argv[2], "--ring") == 0;
    const double share = seconds / double(all.size() + (ring ? 1 : 0));
    for (const Case &c : all) run_case(c, remote.get(), cpu.get(), share);
    if (ring) race_the_ring(argv[3], remote.get(), share);
    std::printf("PASS\n");
    return 0;
}
