// Session: the handlers that write, read and initialise tensors' bytes, and the
// one way every command reaches a buffer's bytes (buffer_range, read_range,
// write_range).
#include <algorithm>
#include <cstring>

#include "host/worker/session/session.h"

namespace ggml_remote::host {

using namespace protocol;

namespace {

// The bytes from the start of a 2-D transfer's first row to the end of its last:
// n_rows rows of first.size bytes, `stride` apart. Every row lies inside it.
Status rows_span(const BufferRange &first, uint64_t n_rows, uint64_t stride, const char *command, BufferRange *span) {
    *span = {first.buffer, first.offset, 0};
    if (n_rows == 0) return Status::success();
    uint64_t last_row = 0, end = 0;
    if (__builtin_mul_overflow(n_rows - 1, stride, &last_row) ||
        __builtin_add_overflow(last_row, first.size, &span->size) ||
        __builtin_add_overflow(first.offset, span->size, &end)) {
        return error(Code::bad_request, std::string(command) + ": the rows' offsets overflow");
    }
    return Status::success();
}

// Calls part(offset in the span, offset in the piece, size) for each row's share
// of the packed bytes [at, at + size) of rows `row` bytes long, `stride` apart.
template <class Part>
void for_each_row_part(uint64_t row, uint64_t stride, uint64_t at, size_t size, Part part) {
    size_t done = 0;
    while (done < size && row > 0) {
        const uint64_t index = (at + done) / row, within = (at + done) % row;
        const size_t n = static_cast<size_t>(std::min<uint64_t>(row - within, size - done));
        part(index * stride + within, done, n);
        done += n;
    }
}

}  // namespace

Status Session::buffer_range(const BufferRange &range, Access access, SessionBuffer **buffer) {
    if (Status s = buffer_at(range.buffer, buffer); !s) return s;
    if (access == Access::write && !(*buffer)->writable) {
        return error(Code::bad_request, "buffer " + std::to_string(range.buffer) + " is read-only");
    }
    uint64_t end = 0;
    if (__builtin_add_overflow(range.offset, range.size, &end) || end > (*buffer)->size) {
        return error(Code::bad_request, "range [" + std::to_string(range.offset) + ", +" + std::to_string(range.size) +
                                            ") lies outside buffer " + std::to_string(range.buffer) + " of " +
                                            std::to_string((*buffer)->size) + " bytes");
    }
    if (!(*buffer)->placed) note_before_placed(*buffer, range, access == Access::write);
    return Status::success();
}

void Session::byte_tensor(const SessionBuffer &buffer, const BufferRange &range, ggml_tensor *bytes) {
    // A plain byte tensor over the range lets ggml's own set/get/memset/copy pick
    // the right path for CPU and device memory alike.
    std::memset(bytes, 0, sizeof(*bytes));
    bytes->type = GGML_TYPE_I8;
    bytes->ne[0] = static_cast<int64_t>(range.size);
    bytes->ne[1] = bytes->ne[2] = bytes->ne[3] = 1;
    bytes->nb[0] = 1;
    bytes->nb[1] = bytes->nb[2] = bytes->nb[3] = range.size;
    bytes->buffer = buffer.buffer.get();
    bytes->data = static_cast<uint8_t *>(ggml_backend_buffer_get_base(bytes->buffer)) + range.offset;
}

Status Session::read_range(const BufferRange &range, ggml_tensor *bytes) {
    SessionBuffer *buffer = nullptr;
    if (Status s = buffer_range(range, Access::read, &buffer); !s) return s;
    byte_tensor(*buffer, range, bytes);
    return Status::success();
}

Status Session::handle(const InitTensor::Request &request, Call<InitTensor> &call) {
    SessionBuffer *buffer = nullptr;
    if (Status s = buffer_at(request.buffer, &buffer); !s) return s;
    BuiltTensors built;
    if (Status s = build(call.tail, DataPolicy::required, &built); !s) return s;
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
    return write_range(request.range, [&](ggml_tensor *bytes) {
        if (call.tail_size() != request.range.size) {
            return error(Code::bad_request, "set_tensor: " + std::to_string(call.tail_size()) +
                                                " data bytes for a range of " + std::to_string(request.range.size));
        }
        // Over shm the bytes come piece by piece, straight from the ring.
        Status status = call.read_tail(
            [&](uint64_t at, const uint8_t *piece, size_t size) { ggml_backend_tensor_set(bytes, piece, at, size); });
        if (status) {
            store_fill_.received(request.range.buffer, request.range.offset, request.range.size, request.range.size);
            count_guest_bytes(request.range.buffer, request.range.size);
        }
        return status;
    });
}

Status Session::handle(const SetTensor2d::Request &request, Call<SetTensor2d> &call) {
    uint64_t total = 0;
    if (__builtin_mul_overflow(request.n_copies, request.range.size, &total) || total != call.tail_size()) {
        return error(Code::bad_request, "set_tensor_2d: data size does not match n_copies * size");
    }
    BufferRange span;
    if (Status s = rows_span(request.range, request.n_copies, request.stride, "set_tensor_2d", &span); !s) return s;
    return write_range(span, [&](ggml_tensor *bytes) {
        Status status = call.read_tail([&](uint64_t at, const uint8_t *piece, size_t size) {
            for_each_row_part(request.range.size, request.stride, at, size,
                              [&](uint64_t offset, size_t from, size_t n) {
                                  ggml_backend_tensor_set(bytes, piece + from, offset, n);
                              });
        });
        if (status) {
            store_fill_.received(span.buffer, span.offset, span.size, total);
            count_guest_bytes(span.buffer, total);
        }
        return status;
    });
}

Status Session::handle(const GetTensor::Request &request, Call<GetTensor> &call) {
    ggml_tensor bytes;
    if (Status s = read_range(request.range, &bytes); !s) return s;
    if (ggml_backend_buffer_is_host(bytes.buffer)) {
        call.reply_tail.view = ByteView(bytes.data, request.range.size);  // sent straight from the buffer
    } else {
        // Read from the device when sent: over shm straight into the ring.
        call.reply_tail.fill_size = request.range.size;
        call.reply_tail.fill = [bytes](uint64_t at, uint8_t *into, size_t size) {
            ggml_backend_tensor_get(&bytes, into, at, size);
        };
    }
    return Status::success();
}

Status Session::handle(const GetTensor2d::Request &request, Call<GetTensor2d> &call) {
    uint64_t total = 0;
    if (__builtin_mul_overflow(request.n_copies, request.range.size, &total) || total > limits_.max_message_size) {
        return error(Code::bad_request, "get_tensor_2d: reply would exceed the message size limit");
    }
    BufferRange span;
    if (Status s = rows_span(request.range, request.n_copies, request.stride, "get_tensor_2d", &span); !s) return s;
    ggml_tensor bytes;
    if (Status s = read_range(span, &bytes); !s) return s;
    const uint64_t row = request.range.size, stride = request.stride;
    call.reply_tail.fill_size = total;
    call.reply_tail.fill = [bytes, row, stride](uint64_t at, uint8_t *into, size_t size) {
        for_each_row_part(row, stride, at, size, [&](uint64_t offset, size_t to, size_t n) {
            ggml_backend_tensor_get(&bytes, into + to, offset, n);
        });
    };
    return Status::success();
}

Status Session::handle(const MemsetTensor::Request &request, Call<MemsetTensor> &) {
    return write_range(request.range, [&](ggml_tensor *bytes) {
        ggml_backend_tensor_memset(bytes, request.value, 0, request.range.size);
        return Status::success();
    });
}

Status Session::handle(const CopyTensor::Request &request, Call<CopyTensor> &call) {
    if (request.src.size != request.dst.size) {
        return error(Code::bad_request, "copy_tensor: source of " + std::to_string(request.src.size) +
                                            " bytes and destination of " + std::to_string(request.dst.size) +
                                            " bytes differ");
    }
    ggml_tensor src;
    if (Status s = read_range(request.src, &src); !s) return s;
    return write_range(request.dst, [&](ggml_tensor *dst) {
        if (request.src.buffer == request.dst.buffer && request.src.offset < request.dst.offset + request.dst.size &&
            request.dst.offset < request.src.offset + request.src.size) {
            return error(Code::bad_request, "copy_tensor: source and destination overlap");
        }
        ggml_backend_tensor_copy(&src, dst);
        call.reply.copied = 1;
        return Status::success();
    });
}

}  // namespace ggml_remote::host
