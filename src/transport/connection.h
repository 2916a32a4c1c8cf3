// FramedStream: frames (header + payload) over a connected stream socket.
#pragma once

#include "protocol/status.h"
#include "protocol/wire.h"
#include "transport/unique_fd.h"

#include <initializer_list>
#include <string>
#include <vector>

namespace ggml_remote {

class FramedStream {
  public:
    FramedStream() = default;
    FramedStream(UniqueFd fd, std::string peer) : fd_(std::move(fd)), peer_(std::move(peer)) {}

    // Sends one frame whose payload is the concatenation of `parts`; the header's
    // payload_size is filled in. Never raises SIGPIPE.
    Status send(protocol::FrameHeader header, std::initializer_list<protocol::ByteView> parts);

    // Reads a frame header; a payload larger than max_payload is refused unread.
    Status receive_header(protocol::FrameHeader *header, uint64_t max_payload);
    // Reads exactly `size` payload bytes.
    Status receive(void *data, size_t size);
    // Reads and throws away `size` bytes (the payload of a refused frame).
    Status discard(uint64_t size);

    bool connected() const { return fd_.valid(); }
    int fd() const { return fd_.get(); }
    const std::string &peer() const { return peer_; }
    void close() { fd_.reset(); }

  private:
    Status failure(const char *what, int err);

    UniqueFd fd_;
    std::string peer_;
};

}  // namespace ggml_remote
