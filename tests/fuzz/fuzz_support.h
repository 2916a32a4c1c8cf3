// Shared by the fuzz targets: the host's CPU device, quiet ggml logging, the
// session input format, a script read from an input, and how an oracle fails.
#pragma once

#include <ggml-backend.h>
#include <ggml.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "protocol/wire.h"

namespace ggml_remote::fuzz {

// The host's CPU device, loaded as the server loads it (never the remote plugin).
// ggml's own log lines are dropped: the targets feed it nonsense on purpose.
inline ggml_backend_dev_t host_cpu_device() {
    static std::once_flag loaded;
    std::call_once(loaded, [] {
        ggml_log_set([](ggml_log_level, const char *, void *) {}, nullptr);
        unsetenv("GGML_BACKEND_PATH");
        ggml_backend_load_all();
    });
    return ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
}

// A session input is frames back to back, each [u16 command][u32 length][payload],
// little-endian; a length past the end of the input takes what is left.
struct SessionFrameHeader {
    uint16_t command;
    uint32_t length;
} __attribute__((packed));
static_assert(sizeof(SessionFrameHeader) == 6, "session input frame header");

// Takes the next frame off `input`; false when no whole header is left.
inline bool next_session_frame(protocol::ByteView *input, uint16_t *command, protocol::ByteView *payload) {
    SessionFrameHeader header;
    if (!protocol::read_pod(*input, 0, &header)) return false;
    const size_t available = input->size - sizeof(header);
    const size_t length = header.length < available ? header.length : available;
    *command = header.command;
    *payload = protocol::ByteView(input->data + sizeof(header), length);
    *input = protocol::ByteView(input->data + sizeof(header) + length, available - length);
    return true;
}

// An input read from the front as a script of fixed-size values; zeros once it runs out.
struct InputScript {
    const uint8_t *data;
    size_t size;
    template <class T>
    T next() {
        T value{};
        const size_t n = size < sizeof(T) ? size : sizeof(T);
        std::memcpy(&value, data, n);
        data += n;
        size -= n;
        return value;
    }
    bool done() const { return size == 0; }
};

// An oracle saw what must never happen: says what, and traps, so that libFuzzer
// (or a corpus replay) reports the input as a finding.
[[noreturn]] inline void oracle_violated(const char *what) {
    std::fprintf(stderr, "oracle: %s\n", what);
    __builtin_trap();
}

}  // namespace ggml_remote::fuzz
