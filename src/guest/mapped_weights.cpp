#include "guest/mapped_weights.h"

#include <cstring>

#include "guest/buffer.h"
#include "guest/log.h"

namespace ggml_remote::guest {

namespace {

// The tensor that owns the bytes a tensor (or view) reads.
const ggml_tensor *owner_of(const ggml_tensor *tensor) {
    return tensor->view_src != nullptr ? tensor->view_src : tensor;
}

// Whether the tensor fills at least nine tenths of its CPU_Mapped buffer.
bool mostly_this_table(const ggml_tensor *tensor) {
    const ggml_tensor *owner = owner_of(tensor);
    return ggml_nbytes(owner) >= ggml_backend_buffer_get_size(owner->buffer) / 10 * 9;
}

bool in_mapped_weights(const ggml_tensor *tensor) {
    const ggml_tensor *owner = owner_of(tensor);
    return owner->buffer != nullptr && MappedWeights::is_mapped_weights_type(owner->buffer->buft);
}

}  // namespace

bool MappedWeights::is_mapped_weights_type(ggml_backend_buffer_type_t buft) {
    // ggml-cpu names the type of its buffer_from_host_ptr buffers so; no other
    // handle on it is public.
    return buft != nullptr && buft->iface.get_name != nullptr &&
           std::strcmp(buft->iface.get_name(buft), "CPU_Mapped") == 0 && ggml_backend_buft_is_host(buft);
}

MappedWeights::Use MappedWeights::classify(const ggml_tensor *op) {
    if (in_mapped_weights(op)) return Use::refused;  // a result cannot be written there
    Use use = Use::none;
    for (int i = 0; i < GGML_MAX_SRC; ++i) {
        const ggml_tensor *source = op->src[i];
        if (source == nullptr || !in_mapped_weights(source)) continue;
        if (!enabled() || op->op != GGML_OP_GET_ROWS || i != 0 || !mostly_this_table(source) ||
            !readable_file(source)) {
            return Use::refused;
        }
        use = Use::allowed;
    }
    return use;
}

bool MappedWeights::readable_file(const ggml_tensor *weight) {
    const ggml_tensor *owner = owner_of(weight);
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = readable_.find(owner->data);
    if (found != readable_.end()) return found->second;
    MappedFile file;
    const bool readable = find_mapped_file(owner->data, ggml_nbytes(owner), &file) && !file.writable;
    readable_.emplace(owner->data, readable);
    return readable;
}

void MappedWeights::begin_graph() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (HostCopy &copy : copies_) copy.checked = false;
}

bool MappedWeights::prepare(const ggml_tensor *tensor) {
    if (!enabled() || !in_mapped_weights(tensor)) return true;
    std::lock_guard<std::mutex> lock(mutex_);
    return copy_of(owner_of(tensor)) != nullptr;
}

bool MappedWeights::locate(const ggml_tensor *tensor, protocol::TensorLocation *location) {
    if (!enabled() || !in_mapped_weights(tensor)) return false;
    std::lock_guard<std::mutex> lock(mutex_);
    const HostCopy *copy = prepared_copy_of(owner_of(tensor));
    if (copy == nullptr) return false;
    location->buffer = remote_buffer_of(copy->buffer)->handle;
    location->offset = static_cast<const uint8_t *>(tensor->data) - copy->begin;
    return true;
}

const MappedWeights::HostCopy *MappedWeights::prepared_copy_of(const ggml_tensor *weight) const {
    for (const HostCopy &copy : copies_) {
        if (copy.begin == weight->data && copy.size == ggml_nbytes(weight) && copy.checked) return &copy;
    }
    return nullptr;
}

MappedWeights::HostCopy *MappedWeights::copy_of(const ggml_tensor *weight) {
    const auto *begin = static_cast<const uint8_t *>(weight->data);
    const size_t size = ggml_nbytes(weight);
    for (size_t i = 0; i < copies_.size(); ++i) {
        HostCopy &copy = copies_[i];
        if (copy.begin != begin || copy.size != size) continue;
        if (copy.checked) return &copy;
        MappedFile now;
        if (find_mapped_file(begin, size, &now) && !now.writable && now.same_file_at(copy.file)) {
            copy.checked = true;
            return &copy;
        }
        // Another file (or none) is mapped there now: the host's copy is stale.
        ggml_backend_buffer_free(copy.buffer);
        copies_.erase(copies_.begin() + static_cast<std::ptrdiff_t>(i));
        readable_.erase(begin);
        break;
    }
    HostCopy copy;
    Status status = find_mapped_file(begin, size, &copy.file);
    if (status && copy.file.writable) status = error(Code::unsupported, "the mapping is writable");
    if (!status) {
        log(GGML_LOG_LEVEL_ERROR,
            "%s: %s: weights in guest memory can be read on the host only from a read-only "
            "file mapping: %s",
            device_->name().c_str(), weight->name, status.message().c_str());
        return nullptr;
    }
    copy.buffer = make_host_copy(begin, size);
    if (copy.buffer == nullptr) return nullptr;
    copy.begin = begin;
    copy.size = size;
    copy.checked = true;
    copies_.push_back(copy);
    return &copies_.back();
}

ggml_backend_buffer_t MappedWeights::make_host_copy(const uint8_t *begin, size_t size) {
    // Over shared memory the host maps the same file; otherwise it gets the bytes.
    if (device_->maps_files()) {
        return remote_buffer_from_host_ptr(device_->ggml_device(), const_cast<uint8_t *>(begin), size, size);
    }
    ggml_backend_buffer_t buffer = allocate_remote_buffer(device_->buffer_type(), size);
    if (buffer == nullptr) return nullptr;
    // Weights, so that the server's weight store may already hold them.
    ggml_backend_buffer_set_usage(buffer, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
    ggml_tensor whole = byte_tensor(buffer, ggml_backend_buffer_get_base(buffer), size);
    ggml_backend_tensor_set(&whole, begin, 0, size);
    return buffer;
}

}  // namespace ggml_remote::guest
