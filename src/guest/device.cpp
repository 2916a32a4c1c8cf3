#include "guest/device.h"

#include <cstring>

#include "guest/backend.h"
#include "guest/buffer.h"
#include "guest/log.h"
#include "protocol/printable.h"
#include "protocol/tensor_codec.h"

namespace ggml_remote::guest {

using namespace protocol;

namespace {

const char *device_get_name(ggml_backend_dev_t dev) { return RemoteDevice::from(dev)->name().c_str(); }

const char *device_get_description(ggml_backend_dev_t dev) { return RemoteDevice::from(dev)->description().c_str(); }

void device_get_memory(ggml_backend_dev_t dev, size_t *free, size_t *total) {
    RemoteDevice *device = RemoteDevice::from(dev);
    DeviceMemory::Reply reply{};
    if (device->session().call<DeviceMemory>({device->remote_index()}).reply(&reply).run()) {
        *free = reply.memory_free;
        *total = reply.memory_total;
    } else {
        *free = device->info().memory_free;
        *total = device->info().memory_total;
    }
}

// Remote devices present themselves as GPUs whatever the host device is: that is
// what makes llama.cpp offload layers to them and test-backend-ops test them.
enum ggml_backend_dev_type device_get_type(ggml_backend_dev_t) { return GGML_BACKEND_DEVICE_TYPE_GPU; }

void device_get_props(ggml_backend_dev_t dev, ggml_backend_dev_props *props) {
    props->name = device_get_name(dev);
    props->description = device_get_description(dev);
    device_get_memory(dev, &props->memory_free, &props->memory_total);
    props->type = device_get_type(dev);
    // No PCI id: llama.cpp skips a GPU whose id matches one already in use, and
    // the host's id says nothing about this process.
    props->device_id = nullptr;
    // Reads, copies and events wait in line on the host (see backend.cpp).
    props->caps.async = true;
    props->caps.host_buffer = false;
    // Over shared memory, llama.cpp's mmap'd weights become buffers the host maps too.
    props->caps.buffer_from_host_ptr = RemoteDevice::from(dev)->maps_files();
    props->caps.events = true;
    // Weights read from a memory-mapped model file are fine to upload (or, over
    // shared memory, to map on the host); llama.cpp turns mmap off for every
    // device if one says otherwise.
    props->caps.mmap_support = true;
}

ggml_backend_t device_init_backend(ggml_backend_dev_t dev, const char *) {
    return create_remote_backend(RemoteDevice::from(dev));
}

ggml_backend_buffer_type_t device_get_buffer_type(ggml_backend_dev_t dev) {
    return RemoteDevice::from(dev)->buffer_type();
}

bool device_supports_op(ggml_backend_dev_t dev, const ggml_tensor *op) {
    return RemoteDevice::from(dev)->supports_op(op);
}

// Besides its own buffers, a device reads the guest's memory-mapped weights, for
// the ops that MappedWeights lets it take (supports_op refuses the others).
bool device_supports_buft(ggml_backend_dev_t dev, ggml_backend_buffer_type_t buft) {
    return buft == RemoteDevice::from(dev)->buffer_type() ||
           (RemoteDevice::from(dev)->mapped_weights().enabled() && MappedWeights::is_mapped_weights_type(buft));
}

// Offloading an op whose weights live in guest memory would ship the weights on
// every call; never worth it over a socket.
bool device_offload_op(ggml_backend_dev_t, const ggml_tensor *) { return false; }

ggml_backend_event_t device_event_new(ggml_backend_dev_t dev) { return new ggml_backend_event{dev, new RemoteEvent{}}; }

void device_event_free(ggml_backend_dev_t, ggml_backend_event_t event) {
    delete static_cast<RemoteEvent *>(event->context);
    delete event;
}

void device_event_synchronize(ggml_backend_dev_t dev, ggml_backend_event_t event) {
    remote_event_synchronize(RemoteDevice::from(dev), event);
}

const char *buft_get_name(ggml_backend_buffer_type_t buft) { return RemoteDevice::from(buft)->name().c_str(); }

size_t buft_get_alignment(ggml_backend_buffer_type_t buft) { return RemoteDevice::from(buft)->info().buffer_alignment; }

size_t buft_get_max_size(ggml_backend_buffer_type_t buft) { return RemoteDevice::from(buft)->info().buffer_max_size; }

size_t buft_get_alloc_size(ggml_backend_buffer_type_t buft, const ggml_tensor *tensor) {
    return RemoteDevice::from(buft)->alloc_size(tensor);
}

// Shared-memory buffers are CPU memory here too (ggml's is_host): ggml reads and
// writes them in place.
bool buft_is_host(ggml_backend_buffer_type_t buft) { return RemoteDevice::from(buft)->shares_memory(); }

// Enough for every op shape of a model's graphs; a bound for workloads whose shapes
// never repeat (whisper's decoder grows its key/value every step).
constexpr size_t kMaxCachedAnswers = 8192;

std::string op_signature(const ggml_tensor *op) {
    TensorListEncoder encoder(nullptr);  // shapes, types and params only
    encoder.add_op_with_sources(op);
    std::vector<uint8_t> bytes = encoder.finish();
    return std::string(bytes.begin(), bytes.end());
}

}  // namespace

std::string remote_device_name(size_t server_index, uint32_t device_index) {
    const std::string server = "REMOTE" + std::to_string(server_index);
    return device_index == 0 ? server : server + "." + std::to_string(device_index);
}

Status RemoteDevice::create(std::shared_ptr<RemoteSession> session, uint32_t remote_index, const std::string &name,
                            ggml_backend_reg_t reg, std::unique_ptr<RemoteDevice> *out) {
    std::unique_ptr<RemoteDevice> device(new RemoteDevice());
    device->mapped_weights_.set_enabled(session->options().mapped_weights);
    std::vector<uint8_t> strings;
    Status status = session->call<DeviceInfo>({remote_index}).reply(&device->info_).reply_tail(&strings).run();
    if (!status) return status;
    // name \0 description \0 buffer type name \0
    std::vector<std::string> parts;
    std::string current;
    for (uint8_t c : strings) {
        if (c == 0) {
            parts.push_back(current);
            current.clear();
        } else {
            current.push_back(static_cast<char>(c));
        }
    }
    parts.resize(3);
    // The server's words end up in the application's output: one line each.
    for (std::string &part : parts) part = one_line(part);
    device->session_ = std::move(session);
    device->remote_index_ = remote_index;
    device->name_ = name;
    device->description_ = (parts[1].empty() ? parts[0] : parts[1]) + " @ " + device->session_->endpoint();
    device->buffer_type_name_ = name;

    device->device_.iface.get_name = device_get_name;
    device->device_.iface.get_description = device_get_description;
    device->device_.iface.get_memory = device_get_memory;
    device->device_.iface.get_type = device_get_type;
    device->device_.iface.get_props = device_get_props;
    device->device_.iface.init_backend = device_init_backend;
    device->device_.iface.get_buffer_type = device_get_buffer_type;
    device->device_.iface.buffer_from_host_ptr = remote_buffer_from_host_ptr;
    device->device_.iface.supports_op = device_supports_op;
    device->device_.iface.supports_buft = device_supports_buft;
    device->device_.iface.offload_op = device_offload_op;
    device->device_.iface.event_new = device_event_new;
    device->device_.iface.event_free = device_event_free;
    device->device_.iface.event_synchronize = device_event_synchronize;
    device->device_.reg = reg;
    device->device_.context = device.get();

    device->buffer_type_.iface.get_name = buft_get_name;
    device->buffer_type_.iface.alloc_buffer = allocate_remote_buffer;
    device->buffer_type_.iface.get_alignment = buft_get_alignment;
    device->buffer_type_.iface.get_max_size = buft_get_max_size;
    // Without a get_alloc_size of the host's own, ggml's default (ggml_nbytes) is
    // the same answer with no round trip.
    device->buffer_type_.iface.get_alloc_size = device->info_.buffer_custom_alloc_size ? buft_get_alloc_size : nullptr;
    device->buffer_type_.iface.is_host = buft_is_host;
    device->buffer_type_.device = &device->device_;
    device->buffer_type_.context = device.get();
    *out = std::move(device);
    return Status::success();
}

template <class Cmd>
Status RemoteDevice::ask_once(AnswerCache<Cmd> &cache, const std::string &signature, typename Cmd::Reply *reply) {
    {
        std::lock_guard<std::mutex> lock(cache_mutex_);
        auto found = cache.find(signature);
        if (found != cache.end()) {
            *reply = found->second;
            return Status::success();
        }
    }
    Status status =
        session_->call<Cmd>({remote_index_}).tail(ByteView(signature.data(), signature.size())).reply(reply).run();
    if (!status) return status;  // not cached: a later ask may succeed
    std::lock_guard<std::mutex> lock(cache_mutex_);
    if (cache.size() >= kMaxCachedAnswers) cache.clear();  // shapes that keep changing
    cache[signature] = *reply;
    return status;
}

bool RemoteDevice::supports_op(const ggml_tensor *op) {
    if (mapped_weights_.classify(op) == MappedWeights::Use::refused) return false;
    SupportsOp::Reply reply{};
    Status status = ask_once<SupportsOp>(supports_op_cache_, op_signature(op), &reply);
    if (!status && status.code() != Code::disconnected) {
        log(GGML_LOG_LEVEL_WARN, "%s: supports_op(%s) failed: %s", name_.c_str(), ggml_op_desc(op),
            status.message().c_str());
    }
    return status && reply.supported != 0;
}

size_t RemoteDevice::alloc_size(const ggml_tensor *tensor) {
    AllocSize::Reply reply{};
    const size_t bytes = ggml_nbytes(tensor);
    if (!ask_once<AllocSize>(alloc_size_cache_, op_signature(tensor), &reply)) return bytes;
    // ggml places tensors by this size: less than the tensor's bytes would overlap
    // them; a device pads a little, never more than the tensor again.
    const uint64_t most = uint64_t{bytes} * 2 + (uint64_t(1) << 20);
    if (reply.size < bytes || reply.size > most) {
        log(GGML_LOG_LEVEL_ERROR, "%s: the server sizes a tensor of %zu bytes at %llu; using %zu", name_.c_str(), bytes,
            static_cast<unsigned long long>(reply.size), bytes);
        return bytes;
    }
    return static_cast<size_t>(reply.size);
}

RemoteEvent *remote_event_of(ggml_backend_event_t event) {
    if (event == nullptr || event->device == nullptr || event->device->iface.event_new != device_event_new) {
        return nullptr;
    }
    return static_cast<RemoteEvent *>(event->context);
}

}  // namespace ggml_remote::guest
