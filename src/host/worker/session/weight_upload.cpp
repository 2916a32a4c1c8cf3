#include "host/worker/session/weight_upload.h"

#include <algorithm>

namespace ggml_remote::host {

void WeightUpload::set_weights(BufferUpload *buffer, uint64_t size, bool weights) {
    if (buffer->weights == weights) return;
    forget(*buffer, size);
    buffer->weights = weights;
    buffer->settled = false;
    if (!weights) return;
    expected_ += size;
    received_ += buffer->received;
    found_ += buffer->found;
    ++unsettled_;
}

void WeightUpload::count_received(BufferUpload *buffer, uint64_t size, uint64_t bytes) {
    count(buffer, size, bytes, &buffer->received, &received_);
}

void WeightUpload::count_found(BufferUpload *buffer, uint64_t size, uint64_t bytes) {
    count(buffer, size, bytes, &buffer->found, &found_);
}

void WeightUpload::settle(BufferUpload *buffer, uint64_t size) {
    if (!buffer->weights || buffer->settled) return;
    expected_ -= size;
    buffer->settled = true;
    expected_ += expected_of(*buffer, size);
    --unsettled_;
}

void WeightUpload::forget(const BufferUpload &buffer, uint64_t size) {
    if (!buffer.weights) return;
    expected_ -= expected_of(buffer, size);
    received_ -= buffer.received;
    found_ -= buffer.found;
    if (!buffer.settled) --unsettled_;
}

uint64_t WeightUpload::expected_of(const BufferUpload &buffer, uint64_t size) {
    return buffer.settled ? buffer.received + buffer.found : size;
}

void WeightUpload::count(BufferUpload *buffer, uint64_t size, uint64_t bytes, uint64_t *count, uint64_t *total) {
    const uint64_t used = buffer->received + buffer->found;  // at most size, so no overflow
    const uint64_t room = size > used ? size - used : 0;
    const uint64_t counted = std::min(bytes, room);
    *count += counted;
    if (!buffer->weights) return;
    *total += counted;
    if (buffer->settled) expected_ += counted;  // a settled buffer expects what arrives
}

}  // namespace ggml_remote::host
