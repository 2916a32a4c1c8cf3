// Wire framing shared by guest and host.
//
// Every message is a FrameHeader followed by payload_size bytes. A request's
// payload is the command's fixed Request struct followed by a variable tail
// (tensor bytes, an encoded graph); a reply's payload is the Reply struct and its
// tail, or, when status != ok, an error message. All integers are little-endian
// and every struct is packed, so the layout is the same on both sides.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "protocol/status.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the wire format is little-endian");

namespace ggml_remote::protocol {

// A read-only view of bytes (C++17 has no std::span).
struct ByteView {
    const uint8_t *data = nullptr;
    size_t size = 0;

    ByteView() = default;
    ByteView(const void *d, size_t n) : data(static_cast<const uint8_t *>(d)), size(n) {}
    ByteView(const std::vector<uint8_t> &v) : data(v.data()), size(v.size()) {}

    bool empty() const { return size == 0; }
    ByteView subview(size_t offset) const {
        return offset >= size ? ByteView() : ByteView(data + offset, size - offset);
    }
};

enum FrameFlags : uint16_t {
    kFrameReply = 1 << 0,
    // Shared-ring sessions: the frame's descriptors were sent on the socket just before.
    kFrameCarriesFds = 1 << 1,
    // Replies to a guest on the server's machine: the host's cores are contended
    // (host/core_schedule.h), so the guest's waits do not spin until a reply without it.
    kFrameCoresContended = 1 << 2,
    // A header-only frame from the server, where the session granted
    // kSessionKeepAlive: it is still working on a request (a long compute) and
    // is alive. Not a reply; the guest's reader consumes it while it waits.
    kFrameKeepAlive = 1 << 3,
};

// How often a server sends a keep-alive while it computes (the first after one
// interval: a compute shorter than that sends none).
constexpr int kKeepAliveIntervalMs = 1000;

#pragma pack(push, 1)
struct FrameHeader {
    uint16_t command = 0;       // a CommandId
    uint16_t flags = 0;         // FrameFlags
    int32_t status = 0;         // replies only: a Code; when not ok the payload is the reason
    uint64_t payload_size = 0;  // bytes that follow the header
};
#pragma pack(pop)
static_assert(sizeof(FrameHeader) == 16, "frame header layout");

// "GRMT": the first four bytes a guest sends, so a wrong peer is recognised at once.
constexpr uint32_t kHelloMagic = 0x544d5247;
constexpr uint32_t kProtocolVersion = 3;

// Messages larger than this are split by the guest (tensor data) and refused by
// the host unless it was started with a larger --max-message-size.
constexpr uint64_t kDefaultMaxMessageSize = 256ull << 20;
constexpr uint64_t kDataChunkSize = 64ull << 20;

// Appends the raw bytes of a trivially copyable value.
template <class T>
void append_pod(std::vector<uint8_t> &out, const T &value) {
    static_assert(std::is_trivially_copyable<T>::value, "wire values are plain structs");
    const auto *bytes = reinterpret_cast<const uint8_t *>(&value);
    out.insert(out.end(), bytes, bytes + sizeof(T));
}

// Reads a trivially copyable value at offset; false when the bytes run short.
template <class T>
bool read_pod(ByteView bytes, size_t offset, T *value) {
    static_assert(std::is_trivially_copyable<T>::value, "wire values are plain structs");
    if (offset > bytes.size || bytes.size - offset < sizeof(T)) return false;
    std::memcpy(value, bytes.data + offset, sizeof(T));
    return true;
}

}  // namespace ggml_remote::protocol
