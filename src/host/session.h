// Session: everything one guest owns on the host, and the dispatch of its commands.
// One session runs in one worker process (see worker.h).
#pragma once

#include "host/dispatcher.h"
#include "host/graph_builder.h"
#include "host/handle_table.h"
#include "protocol/commands.h"
#include "protocol/tensor_codec.h"
#include "transport/connection.h"

#include <ggml-backend.h>

#include <memory>
#include <string>
#include <vector>

namespace ggml_remote::host {

struct SessionLimits {
    uint64_t max_message_size = protocol::kDefaultMaxMessageSize;
    uint64_t memory_quota = 0;  // bytes of device memory for all buffers together; 0 = no limit
    uint32_t max_buffers = 65536;
    int max_threads = 0;        // cap for set_n_threads; 0 = hardware threads
    int default_threads = 0;    // threads of a new CPU backend; 0 = hardware threads
    protocol::TensorListLimits tensor_list;
};

// Per-session totals, for the disconnect log line.
struct SessionCounters {
    uint64_t commands = 0;
    uint64_t bytes_received = 0;
    uint64_t bytes_sent = 0;
    uint64_t graph_computes = 0;
};

class Session {
  public:
    Session(std::vector<ggml_backend_dev_t> devices, SessionLimits limits);
    ~Session();
    Session(const Session &) = delete;
    Session &operator=(const Session &) = delete;

    // Serves the guest until it disconnects (success) or breaks the protocol
    // (the returned status says how). The session's objects stay until destruction.
    Status serve(FramedStream &stream);

    // Handles one decoded frame; `reply` is filled for commands that reply.
    // Exposed for in-process tests and fuzzing.
    Status handle(uint16_t command, protocol::ByteView payload, ReplyFrame *reply);

    const SessionCounters &counters() const { return counters_; }
    uint64_t memory_in_use() const { return memory_in_use_; }
    size_t buffer_count() const { return buffers_.size(); }

  private:
    struct BufferDeleter {
        void operator()(ggml_backend_buffer *buffer) const { ggml_backend_buffer_free(buffer); }
    };
    struct BackendDeleter {
        void operator()(ggml_backend *backend) const { ggml_backend_free(backend); }
    };
    struct SessionBuffer {
        std::unique_ptr<ggml_backend_buffer, BufferDeleter> buffer;
        uint32_t device = 0;
        uint64_t size = 0;
    };
    struct SessionBackend {
        std::unique_ptr<ggml_backend, BackendDeleter> backend;
        uint32_t device = 0;
    };

    void register_handlers();
    Status device_at(uint32_t index, ggml_backend_dev_t *device) const;
    Status buffer_at(uint64_t handle, SessionBuffer **buffer);
    Status backend_at(uint64_t handle, SessionBackend **backend);
    // Checks a byte range against its buffer and returns a 1-D tensor over it.
    Status range_tensor(const protocol::BufferRange &range, ggml_tensor *tensor);
    Status build(protocol::ByteView bytes, DataPolicy policy, BuiltTensors *built);
    void set_threads(ggml_backend_t backend, int n_threads);

    std::vector<ggml_backend_dev_t> devices_;
    SessionLimits limits_;
    Dispatcher dispatcher_;
    HandleTable<SessionBuffer> buffers_;
    HandleTable<SessionBackend> backends_;
    uint64_t memory_in_use_ = 0;
    bool handshaken_ = false;
    SessionCounters counters_;
};

}  // namespace ggml_remote::host
