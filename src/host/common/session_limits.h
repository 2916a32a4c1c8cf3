// SessionLimits: what one guest's session may hold and how long it may wait.
// The listener reads them from its flags and hands them to every worker on its
// command line; the worker's Session enforces them.
#pragma once

#include <unistd.h>

#include <cstdint>

#include "protocol/tensor_codec.h"
#include "protocol/wire.h"

namespace ggml_remote::host {

// The host's physical memory in bytes (UINT64_MAX when unknown): what a
// mapped_file_quota of 0 stands for.
inline uint64_t physical_memory() {
    const long pages = ::sysconf(_SC_PHYS_PAGES);
    const long page = ::sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) : UINT64_MAX;
}

struct SessionLimits {
    uint64_t max_message_size = protocol::kDefaultMaxMessageSize;
    uint64_t memory_quota = 0;     // bytes of device memory for all buffers together; 0 = no limit
    uint32_t max_buffers = 65536;  // buffers of every kind, file-backed ones included
    // Backends: each has a thread pool of its own and its compute's work memory.
    // llama.cpp and whisper.cpp need one or two per device.
    uint32_t max_backends = 16;
    // Bytes of guests' files mapped as buffers (BufferFromFile) together. They are
    // not device memory (the pages are the guest's file), but a sparse memory file
    // passed as a model makes the host fault in fresh shared memory as it reads.
    // 0 = the host's physical memory (Session resolves it).
    uint64_t mapped_file_quota = 0;
    // Repacked copies of weights (weight_repack.h); their bytes count against the
    // memory quota, their number against this. A model has a few per layer.
    uint32_t max_weight_copies = 16384;
    int max_threads = 0;      // cap for set_n_threads; 0 = hardware threads
    int default_threads = 0;  // threads of a new CPU backend; 0 = hardware threads
    int cpu_poll = 50;        // ggml's threadpool poll level: how long idle CPU threads spin
    // The host's cores shared among the sessions that compute at once (core_schedule.h);
    // --no-core-scheduling turns it off. cores: how many (0: the CPUs the server may use).
    bool schedule_cores = true;
    int cores = 0;
    bool repack_weights = true;  // a guest's weights in the CPU's fastest layouts (weight_repack.h)
    // How long a guest may keep its worker waiting, in seconds (0 = no limit): for
    // the handshake after connecting; for the rest of a frame once its header has
    // come, and for taking a reply, each plus a second per MiB; between frames.
    int handshake_timeout_s = 10;
    int frame_timeout_s = 60;
    int idle_timeout_s = 0;
    protocol::TensorListLimits tensor_list;
};

}  // namespace ggml_remote::host
