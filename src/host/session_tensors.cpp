// Session: the handlers that write, read and initialise tensors' bytes.
#include "host/session.h"

#include <cstring>

namespace ggml_remote::host {

using namespace protocol;

Status Session::range_tensor(const BufferRange &range, bool write, ggml_tensor *tensor) {
    SessionBuffer *buffer = nullptr;
    Status status = buffer_at(range.buffer, &buffer);
    if (!status) return status;
    if (write && !buffer->writable) {
        return error(Code::bad_request, "buffer " + std::to_string(range.buffer) + " is read-only");
    }
    uint64_t end = 0;
    if (__builtin_add_overflow(range.offset, range.size, &end) || end > buffer->size) {
        return error(Code::bad_request, "range [" + std::to_string(range.offset) + ", +" + std::to_string(range.size) +
                                            ") lies outside buffer " + std::to_string(range.buffer) + " of " +
                                            std::to_string(buffer->size) + " bytes");
    }
    // A plain byte tensor over the range lets ggml's own set/get/memset/copy pick
    // the right path for host and device memory alike.
    std::memset(tensor, 0, sizeof(*tensor));
    tensor->type = GGML_TYPE_I8;
    tensor->ne[0] = static_cast<int64_t>(range.size);
    tensor->ne[1] = tensor->ne[2] = tensor->ne[3] = 1;
    tensor->nb[0] = 1;
    tensor->nb[1] = tensor->nb[2] = tensor->nb[3] = range.size;
    tensor->buffer = buffer->buffer.get();
    tensor->data = static_cast<uint8_t *>(ggml_backend_buffer_get_base(tensor->buffer)) + range.offset;
    if (write) bytes_written(range.buffer, range.offset, range.size);
    return Status::success();
}

Status Session::handle(const InitTensor::Request &request, Call<InitTensor> &call) {
    SessionBuffer *buffer = nullptr;
    Status status = buffer_at(request.buffer, &buffer);
    if (!status) return status;
    BuiltTensors built;
    status = build(call.tail, DataPolicy::required, &built);
    if (!status) return status;
    if (built.tensors.empty()) return error(Code::bad_request, "init_tensor: no tensor");
    ggml_tensor *tensor = built.tensors.back();
    if (tensor->buffer != buffer->buffer.get()) {
        return error(Code::bad_request, "init_tensor: the tensor is not in the named buffer");
    }
    const ggml_status result = ggml_backend_buffer_init_tensor(tensor->buffer, tensor);
    if (result != GGML_STATUS_SUCCESS) {
        return error(Code::error, "init_tensor failed on the host (status " + std::to_string(result) + ")");
    }
    return Status::success();
}

Status Session::handle(const SetTensor::Request &request, Call<SetTensor> &call) {
    ggml_tensor tensor;
    Status status = range_tensor(request.range, true, &tensor);
    if (!status) return status;
    if (call.tail.size != request.range.size) {
        return error(Code::bad_request, "set_tensor: " + std::to_string(call.tail.size) + " data bytes for a range of " +
                                            std::to_string(request.range.size));
    }
    ggml_backend_tensor_set(&tensor, call.tail.data, 0, call.tail.size);
    return Status::success();
}

Status Session::handle(const SetTensor2d::Request &request, Call<SetTensor2d> &call) {
    uint64_t total = 0;
    if (__builtin_mul_overflow(request.n_copies, request.range.size, &total) || total != call.tail.size) {
        return error(Code::bad_request, "set_tensor_2d: data size does not match n_copies * size");
    }
    for (uint64_t i = 0; i < request.n_copies; ++i) {
        BufferRange row = request.range;
        uint64_t step = 0;
        if (__builtin_mul_overflow(i, request.stride, &step) || __builtin_add_overflow(row.offset, step, &row.offset)) {
            return error(Code::bad_request, "set_tensor_2d: offset overflow");
        }
        ggml_tensor tensor;
        Status status = range_tensor(row, true, &tensor);
        if (!status) return status;
        ggml_backend_tensor_set(&tensor, call.tail.data + i * request.range.size, 0, request.range.size);
    }
    return Status::success();
}

Status Session::handle(const GetTensor::Request &request, Call<GetTensor> &call) {
    ggml_tensor tensor;
    Status status = range_tensor(request.range, false, &tensor);
    if (!status) return status;
    if (ggml_backend_buffer_is_host(tensor.buffer)) {
        call.reply_tail.view = ByteView(tensor.data, request.range.size);  // sent straight from the buffer
    } else {
        call.reply_tail.owned.resize(request.range.size);
        ggml_backend_tensor_get(&tensor, call.reply_tail.owned.data(), 0, request.range.size);
    }
    return Status::success();
}

Status Session::handle(const GetTensor2d::Request &request, Call<GetTensor2d> &call) {
    uint64_t total = 0;
    if (__builtin_mul_overflow(request.n_copies, request.range.size, &total) ||
        total > limits_.max_message_size) {
        return error(Code::bad_request, "get_tensor_2d: reply would exceed the message size limit");
    }
    call.reply_tail.owned.resize(total);
    for (uint64_t i = 0; i < request.n_copies; ++i) {
        BufferRange row = request.range;
        uint64_t step = 0;
        if (__builtin_mul_overflow(i, request.stride, &step) || __builtin_add_overflow(row.offset, step, &row.offset)) {
            return error(Code::bad_request, "get_tensor_2d: offset overflow");
        }
        ggml_tensor tensor;
        Status status = range_tensor(row, false, &tensor);
        if (!status) return status;
        ggml_backend_tensor_get(&tensor, call.reply_tail.owned.data() + i * request.range.size, 0, request.range.size);
    }
    return Status::success();
}

Status Session::handle(const MemsetTensor::Request &request, Call<MemsetTensor> &) {
    ggml_tensor tensor;
    Status status = range_tensor(request.range, true, &tensor);
    if (!status) return status;
    ggml_backend_tensor_memset(&tensor, request.value, 0, request.range.size);
    return Status::success();
}

Status Session::handle(const CopyTensor::Request &request, Call<CopyTensor> &call) {
    if (request.src.size != request.dst.size) {
        return error(Code::bad_request, "copy_tensor: source of " + std::to_string(request.src.size) +
                                            " bytes and destination of " + std::to_string(request.dst.size) +
                                            " bytes differ");
    }
    ggml_tensor src, dst;
    Status status = range_tensor(request.src, false, &src);
    if (!status) return status;
    status = range_tensor(request.dst, true, &dst);
    if (!status) return status;
    if (request.src.buffer == request.dst.buffer && request.src.offset < request.dst.offset + request.dst.size &&
        request.dst.offset < request.src.offset + request.src.size) {
        return error(Code::bad_request, "copy_tensor: source and destination overlap");
    }
    ggml_backend_tensor_copy(&src, &dst);
    call.reply.copied = 1;
    return Status::success();
}

}  // namespace ggml_remote::host
