// FrameRecorder: writes every frame a session receives to a file of its own, for
// the fuzzers' seed corpus (tests/fuzz/). Turned on in the worker by the
// GGML_REMOTE_RECORD_DIR environment variable; never used otherwise.
#pragma once

#include <cstdint>
#include <string>

#include "protocol/status.h"
#include "protocol/wire.h"
#include "transport/unique_fd.h"

namespace ggml_remote::host {

class FrameRecorder {
  public:
    // Frames go to DIR/session-<pid>/NNNNNN-<command>.frame, each the frame header
    // followed by its payload, exactly as received.
    static Status open(const std::string &dir, FrameRecorder *recorder);

    // Best effort: a write that fails is logged once and recording stops.
    void record(const protocol::FrameHeader &header, protocol::ByteView payload);

    bool active() const { return !directory_.empty(); }

  private:
    std::string directory_;
    UniqueFd directory_fd_;
    uint64_t sequence_ = 0;
};

}  // namespace ggml_remote::host
