// The guest's ggml device: one per remote device, with its buffer type, asked
// about ops once per signature; and its events.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "abi/ggml_backend_abi_v3.h"
#include "guest/mapped_weights.h"
#include "guest/session/remote_session.h"

namespace ggml_remote::guest {

class RemoteDevice {
  public:
    // Asks the server about its device `remote_index` and builds the ggml objects.
    static Status create(std::shared_ptr<RemoteSession> session, uint32_t remote_index, const std::string &name,
                         ggml_backend_reg_t reg, std::unique_ptr<RemoteDevice> *device);

    ggml_backend_dev_t ggml_device() { return &device_; }
    ggml_backend_buffer_type_t buffer_type() { return &buffer_type_; }
    RemoteSession &session() { return *session_; }
    uint32_t remote_index() const { return remote_index_; }
    const std::string &name() const { return name_; }
    const std::string &description() const { return description_; }
    const protocol::DeviceInfo::Reply &info() const { return info_; }
    // In this session the device's buffers are shared memory, mapped here too.
    bool shares_memory() const { return info_.shared_buffers != 0; }
    // Whether the server maps the guest's files too (shm:, not a VM's region).
    bool maps_files() const { return info_.shared_buffers == 1; }

    // Answers cached per op signature: the same shapes ask the host once.
    bool supports_op(const ggml_tensor *op);
    // Weights in the guest's CPU_Mapped buffers that ops on this device read.
    MappedWeights &mapped_weights() { return mapped_weights_; }
    size_t alloc_size(const ggml_tensor *tensor);

    static RemoteDevice *from(ggml_backend_dev_t device) { return static_cast<RemoteDevice *>(device->context); }
    static RemoteDevice *from(ggml_backend_buffer_type_t buft) { return static_cast<RemoteDevice *>(buft->context); }

  private:
    template <class Cmd>
    using AnswerCache = std::unordered_map<std::string, typename Cmd::Reply>;

    RemoteDevice() = default;
    // The host's reply to `Cmd` about an op signature: asked once, then cached.
    template <class Cmd>
    Status ask_once(AnswerCache<Cmd> &cache, const std::string &signature, typename Cmd::Reply *reply);

    std::shared_ptr<RemoteSession> session_;
    uint32_t remote_index_ = 0;
    std::string name_, description_, buffer_type_name_;
    protocol::DeviceInfo::Reply info_{};
    ggml_backend_device device_{};
    ggml_backend_buffer_type buffer_type_{};

    MappedWeights mapped_weights_{this};

    std::mutex cache_mutex_;
    AnswerCache<protocol::SupportsOp> supports_op_cache_;
    AnswerCache<protocol::AllocSize> alloc_size_cache_;
};

// The ggml name of device `device_index` of the server at `server_index` in
// GGML_REMOTE_SERVERS: "REMOTE<server>" for its first device, "REMOTE<server>.<device>"
// for the others. Fixed by the list alone, so a server that is down renames no other.
std::string remote_device_name(size_t server_index, uint32_t device_index);

// An event of a remote device: a position in one session's line of commands,
// set by event_record; the host has passed it once a later reply has come.
struct RemoteEvent {
    RemoteSession *session = nullptr;  // null until recorded
    uint64_t backend = 0;
    uint64_t position = 0;
};
// The event's RemoteEvent when it is one of ours.
RemoteEvent *remote_event_of(ggml_backend_event_t event);

}  // namespace ggml_remote::guest
