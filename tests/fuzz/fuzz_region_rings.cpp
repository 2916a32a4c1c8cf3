// Fuzz target: a VM guest's writes into the rings of an ivshmem region. The input
// is a script of what a hostile guest does between the host's reads and writes:
// set the guest-to-host ring's `written` or the host-to-guest ring's `read` to any
// value, put bytes into the ring. Between those steps the host's side (the
// RingChannel a worker uses, RingChannel::in_region) reads or writes. Oracles:
// every read the host completes returns the bytes at the ring positions its own
// count says; every write lands where its own count says; nothing outside the
// region is touched (the sanitizers); no wait hangs (the guest counts as gone
// whenever the host would wait, as a vanished VM does).
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <vector>

#include "fuzz_support.h"
#include "transport/shared_memory.h"
#include "transport/shared_ring.h"

namespace ggml_remote::fuzz {
namespace {

constexpr size_t kCapacity = 4096;

struct Region {
    Region() {
        auto mapping = std::make_shared<Mapping>();
        if (!Mapping::anonymous(kRingHeaderBytes + 2 * kCapacity, mapping.get()).ok()) std::abort();
        header = new (mapping->data()) RingChannel::RegionHeader{};
        data = static_cast<uint8_t *>(mapping->data()) + kRingHeaderBytes;
        ring = RingChannel::in_region(RingChannel::Side::host, mapping, 0, kCapacity, [] { return true; });
        WaitOptions no_spin;
        no_spin.max_spin_ns = 0;
        ring->set_options(no_spin);
    }
    RingChannel::RegionHeader *header;
    uint8_t *data;  // the guest-to-host ring, then the host-to-guest ring
    std::unique_ptr<RingChannel> ring;
};

// One step of the host: false once it failed (the session would end there).
bool host_step(Region &region, bool reads, size_t size, uint64_t *own_in, uint64_t *own_out) {
    std::vector<uint8_t> bytes(size);
    if (reads) {
        if (!region.ring->read(bytes.data(), size, -1).ok()) return false;
        if (size == 0) return true;  // a read of nothing touches the ring nowhere, whatever the counts
        // The guest's count stood still during the read: only a count that the
        // ring could hold, with all of it written, lets the read through.
        const uint64_t written = region.header->rings[0].written.load();
        if (written < *own_in + size || written - *own_in > kCapacity) std::abort();
        for (size_t i = 0; i < size; ++i) {
            if (bytes[i] != region.data[(*own_in + i) % kCapacity]) std::abort();  // read from the wrong place
        }
        *own_in += size;
        return true;
    }
    for (size_t i = 0; i < size; ++i) bytes[i] = static_cast<uint8_t>(*own_out + i);
    const iovec part{bytes.data(), size};
    if (!region.ring->write(&part, 1, -1).ok()) return false;
    if (size == 0) return true;  // likewise a write of nothing
    // Likewise: a guest's read count past what was written, or so far behind that
    // the ring would overflow, lets no write through.
    const uint64_t read = region.header->rings[1].read.load();
    if (read > *own_out || *own_out + size - read > kCapacity) std::abort();
    for (size_t i = 0; i < size; ++i) {
        if (region.data[kCapacity + (*own_out + i) % kCapacity] != bytes[i]) std::abort();  // written elsewhere
    }
    *own_out += size;
    return true;
}

}  // namespace
}  // namespace ggml_remote::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    using namespace ggml_remote::fuzz;
    Region region;
    InputScript script{data, size};
    uint64_t own_in = 0, own_out = 0;
    while (script.size > 0) {
        const uint8_t step = script.next<uint8_t>() % 5;
        switch (step) {
            case 0:
                region.header->rings[0].written.store(script.next<uint64_t>());
                break;
            case 1:
                region.header->rings[1].read.store(script.next<uint64_t>());
                break;
            case 2: {
                const size_t at = script.next<uint16_t>() % kCapacity;
                const size_t n = script.next<uint8_t>() % 64;
                for (size_t i = 0; i < n; ++i) region.data[(at + i) % kCapacity] = script.next<uint8_t>();
                break;
            }
            default:  // 3: the host reads, 4: it writes
                if (!host_step(region, step == 3, script.next<uint16_t>() % (3 * kCapacity), &own_in, &own_out)) {
                    return 0;
                }
        }
    }
    return 0;
}
