#include "guest/buffer.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "guest/file_mapping.h"
#include "guest/log.h"
#include "guest/weight_digests.h"
#include "protocol/tensor_codec.h"

namespace ggml_remote::guest {

using namespace protocol;

namespace {

RemoteBuffer *context_of(ggml_backend_buffer_t buffer) { return static_cast<RemoteBuffer *>(buffer->context); }

void report(const RemoteBuffer *buffer, const char *what, const Status &status) {
    // A lost connection was logged once already by the session.
    if (status.code() == Code::disconnected) return;
    log(GGML_LOG_LEVEL_ERROR, "%s: %s failed: %s", buffer->device->name().c_str(), what, status.message().c_str());
}

// Tells the host, once, that `remote` holds weights when `buffer`, its ggml buffer,
// says so (as llama.cpp marks its model's buffers). Called at the first write as
// well as before a graph, so that the host counts the upload from its start
// (ggml-remote-server status) and hears of later writes into shared memory.
void tell_weights_of(RemoteBuffer *remote, ggml_backend_buffer_t buffer) {
    if (remote->weights_told || ggml_backend_buffer_get_usage(buffer) != GGML_BACKEND_BUFFER_USAGE_WEIGHTS) return;
    remote->weights_told = true;
    Status status = remote->device->session().post<BufferSetUsage>({remote->handle, GGML_BACKEND_BUFFER_USAGE_WEIGHTS});
    if (!status) report(remote, "set_usage", status);
}

void buffer_free(ggml_backend_buffer_t buffer) {
    RemoteBuffer *remote = context_of(buffer);
    (void)remote->device->session().free_buffer(remote->handle);
    delete remote;
}

void *buffer_get_base(ggml_backend_buffer_t buffer) { return context_of(buffer)->base; }

enum ggml_status buffer_init_tensor(ggml_backend_buffer_t buffer, ggml_tensor *tensor) {
    RemoteBuffer *remote = context_of(buffer);
    TensorListEncoder encoder(
        [](const ggml_tensor *t, TensorLocation *location) { return locate_on_host(nullptr, t, location); });
    encoder.add_storage(tensor);
    if (encoder.failed()) {
        log(GGML_LOG_LEVEL_ERROR, "%s: init_tensor: %s", remote->device->name().c_str(), encoder.error().c_str());
        return GGML_STATUS_FAILED;
    }
    std::vector<uint8_t> bytes = encoder.finish();
    Status status = remote->device->session().post<InitTensor>({remote->handle}, ByteView(bytes));
    if (!status) {
        report(remote, "init_tensor", status);
        return GGML_STATUS_FAILED;
    }
    return GGML_STATUS_SUCCESS;
}

void buffer_memset_tensor(ggml_backend_buffer_t buffer, ggml_tensor *tensor, uint8_t value, size_t offset,
                          size_t size) {
    RemoteBuffer *remote = context_of(buffer);
    const BufferRange range = remote->range(tensor, offset, size);
    remote->note_write(range.offset, size, nullptr);
    Status status = remote->device->session().post<MemsetTensor>({range, value});
    if (!status) report(remote, "memset_tensor", status);
}

// A whole weight tensor is first named by its digest: the server's store may hold it.
bool filled_from_store(SessionCalls &calls, ggml_backend_buffer_t buffer, ggml_tensor *tensor, const void *data,
                       size_t offset, size_t size) {
    RemoteBuffer *remote = context_of(buffer);
    RemoteSession &session = remote->device->session();
    const size_t min_bytes = session.options().store_min_bytes;
    if (!session.weight_store() || min_bytes == 0 || size < min_bytes || offset != 0 ||
        ggml_backend_buffer_get_usage(buffer) != GGML_BACKEND_BUFFER_USAGE_WEIGHTS) {
        return false;
    }
    bool seen_before = false;
    const ContentDigest digest = weight_digest(data, size, session.options().cache_dir, &seen_before);
    if (!seen_before && !session.model_library()) {
        // A model this guest never loaded: the bytes go at once, with their digest
        // ahead of them so the server keeps them, and no round trip stalls the upload.
        // (A server with published models may hold them though: then it is asked.)
        WeightOffer::Request offer{};
        offer.range = remote->range(tensor, 0, size);
        std::memcpy(offer.digest, digest.bytes, sizeof(offer.digest));
        Status status = calls.post<WeightOffer>(offer);
        if (!status) report(remote, "weight_offer", status);
        return false;
    }
    WeightLookup::Request request{};
    request.range = remote->range(tensor, 0, size);
    std::memcpy(request.digest, digest.bytes, sizeof(request.digest));
    WeightLookup::Reply reply{};
    Status status = calls.call<WeightLookup>(request).reply(&reply).run();
    if (!status) {
        report(remote, "weight_lookup", status);
        return false;
    }
    return reply.found != 0;
}

// Sends bytes of a tensor: named by digest when the server's store may hold
// them, else in chunks, each within the server's message limit.
void upload(SessionCalls &calls, ggml_backend_buffer_t buffer, ggml_tensor *tensor, const void *data, size_t offset,
            size_t size) {
    if (filled_from_store(calls, buffer, tensor, data, offset, size)) return;
    RemoteBuffer *remote = context_of(buffer);
    const auto *bytes = static_cast<const uint8_t *>(data);
    // Large uploads (model weights) go in chunks, each within the server's message limit.
    for (size_t done = 0; done < size;) {
        const size_t chunk = std::min<size_t>(size - done, kDataChunkSize);
        Status status =
            calls.post<SetTensor>({remote->range(tensor, offset + done, chunk)}, ByteView(bytes + done, chunk));
        if (!status) {
            report(remote, "set_tensor", status);
            return;
        }
        done += chunk;
    }
}

void buffer_set_tensor(ggml_backend_buffer_t buffer, ggml_tensor *tensor, const void *data, size_t offset,
                       size_t size) {
    RemoteBuffer *remote = context_of(buffer);
    tell_weights_of(remote, buffer);
    remote->note_write(remote->range(tensor, offset, size).offset, size, data);
    upload(remote->device->session(), buffer, tensor, data, offset, size);
}

void buffer_get_tensor(ggml_backend_buffer_t buffer, const ggml_tensor *tensor, void *data, size_t offset,
                       size_t size) {
    RemoteBuffer *remote = context_of(buffer);
    Status status = remote->read_tensor(tensor, offset, data, size, nullptr);
    if (!status) report(remote, "get_tensor", status);
}

void buffer_set_tensor_2d(ggml_backend_buffer_t buffer, ggml_tensor *tensor, const void *data, size_t offset,
                          size_t size, size_t n_copies, size_t stride_tensor, size_t stride_data) {
    RemoteBuffer *remote = context_of(buffer);
    if (size == 0 || n_copies == 0) return;
    // Rows go packed, as many per message as fit in a chunk.
    const size_t rows_per_message = std::max<size_t>(1, kDataChunkSize / size);
    if (size > kDataChunkSize) {
        for (size_t i = 0; i < n_copies; ++i) {
            buffer_set_tensor(buffer, tensor, static_cast<const uint8_t *>(data) + i * stride_data,
                              offset + i * stride_tensor, size);
        }
        return;
    }
    tell_weights_of(remote, buffer);
    remote->note_write(remote->range(tensor, offset, size).offset, size * n_copies, nullptr);
    std::vector<uint8_t> packed;
    for (size_t first = 0; first < n_copies; first += rows_per_message) {
        const size_t rows = std::min(rows_per_message, n_copies - first);
        packed.resize(rows * size);
        for (size_t r = 0; r < rows; ++r) {
            std::memcpy(packed.data() + r * size, static_cast<const uint8_t *>(data) + (first + r) * stride_data, size);
        }
        SetTensor2d::Request request{remote->range(tensor, offset + first * stride_tensor, size), rows, stride_tensor};
        Status status = remote->device->session().post<SetTensor2d>(request, ByteView(packed));
        if (!status) {
            report(remote, "set_tensor_2d", status);
            return;
        }
    }
}

void buffer_get_tensor_2d(ggml_backend_buffer_t buffer, const ggml_tensor *tensor, void *data, size_t offset,
                          size_t size, size_t n_copies, size_t stride_tensor, size_t stride_data) {
    RemoteBuffer *remote = context_of(buffer);
    if (size == 0 || n_copies == 0) return;
    if (size > kDataChunkSize) {
        for (size_t i = 0; i < n_copies; ++i) {
            buffer_get_tensor(buffer, tensor, static_cast<uint8_t *>(data) + i * stride_data,
                              offset + i * stride_tensor, size);
        }
        return;
    }
    const size_t rows_per_message = std::max<size_t>(1, kDataChunkSize / size);
    std::vector<uint8_t> packed;
    for (size_t first = 0; first < n_copies; first += rows_per_message) {
        const size_t rows = std::min(rows_per_message, n_copies - first);
        packed.resize(rows * size);
        GetTensor2d::Request request{remote->range(tensor, offset + first * stride_tensor, size), rows, stride_tensor};
        Status status =
            remote->device->session().call<GetTensor2d>(request).reply_tail_into(packed.data(), packed.size()).run();
        if (!status) {
            report(remote, "get_tensor_2d", status);
            std::fill(packed.begin(), packed.end(), 0);
        }
        for (size_t r = 0; r < rows; ++r) {
            std::memcpy(static_cast<uint8_t *>(data) + (first + r) * stride_data, packed.data() + r * size, size);
        }
    }
}

bool buffer_cpy_tensor(ggml_backend_buffer_t buffer, const ggml_tensor *src, ggml_tensor *dst) {
    RemoteBuffer *remote = context_of(buffer);
    RemoteBuffer *source = remote_buffer_of(src);
    // Only a copy inside one server can stay there; ggml copies the rest itself.
    if (source == nullptr || &source->device->session() != &remote->device->session()) return false;
    CopyTensor::Request request{source->range(src, 0, ggml_nbytes(src)), remote->range(dst, 0, ggml_nbytes(dst))};
    remote->note_write(request.dst.offset, request.dst.size, nullptr);
    CopyTensor::Reply reply{};
    Status status = remote->device->session().call<CopyTensor>(request).reply(&reply).run();
    if (!status) {
        report(remote, "cpy_tensor", status);
        return false;
    }
    return reply.copied != 0;
}

void buffer_clear(ggml_backend_buffer_t buffer, uint8_t value) {
    RemoteBuffer *remote = context_of(buffer);
    remote->note_clear(value);
    Status status = remote->device->session().post<BufferClear>({remote->handle, value});
    if (!status) report(remote, "clear", status);
}

void buffer_reset(ggml_backend_buffer_t buffer) {
    RemoteBuffer *remote = context_of(buffer);
    Status status = remote->device->session().post<BufferReset>({remote->handle});
    if (!status) report(remote, "reset", status);
}

// Shared buffers: the bytes are right here, mapped from the same memory file as
// the host's; reading and writing them needs no message. Only a write into
// weights the host has been told of is reported: it may hold them repacked.
void report_shared_write(RemoteBuffer *remote, const void *at, size_t size) {
    if (!remote->weights_told || size == 0) return;
    const uint64_t offset = static_cast<const uint8_t *>(at) - static_cast<const uint8_t *>(remote->base);
    Status status = remote->device->session().post<BufferWritten>({remote->handle, offset, size});
    if (!status) report(remote, "buffer_written", status);
}

// Before this process touches a shared buffer, a compute that may still change
// it is over (one of a tensor-parallel group's: see RemoteBackend::grouped).
void finish_compute_in_flight(ggml_backend_buffer_t buffer) {
    RemoteBuffer *remote = context_of(buffer);
    Status status = remote->device->session().finish_compute_in_flight();
    if (!status) report(remote, "synchronize", status);
}

void shared_memset_tensor(ggml_backend_buffer_t buffer, ggml_tensor *tensor, uint8_t value, size_t offset,
                          size_t size) {
    finish_compute_in_flight(buffer);
    std::memset(static_cast<uint8_t *>(tensor->data) + offset, value, size);
    report_shared_write(context_of(buffer), static_cast<uint8_t *>(tensor->data) + offset, size);
}

void shared_set_tensor(ggml_backend_buffer_t buffer, ggml_tensor *tensor, const void *data, size_t offset,
                       size_t size) {
    finish_compute_in_flight(buffer);
    std::memcpy(static_cast<uint8_t *>(tensor->data) + offset, data, size);
    tell_weights_of(context_of(buffer), buffer);
    report_shared_write(context_of(buffer), static_cast<uint8_t *>(tensor->data) + offset, size);
}

void shared_get_tensor(ggml_backend_buffer_t buffer, const ggml_tensor *tensor, void *data, size_t offset,
                       size_t size) {
    finish_compute_in_flight(buffer);
    std::memcpy(data, static_cast<const uint8_t *>(tensor->data) + offset, size);
}

void file_get_tensor(ggml_backend_buffer_t, const ggml_tensor *tensor, void *data, size_t offset, size_t size) {
    std::memcpy(data, static_cast<const uint8_t *>(tensor->data) + offset, size);
}

void shared_clear(ggml_backend_buffer_t buffer, uint8_t value) {
    finish_compute_in_flight(buffer);
    std::memset(context_of(buffer)->base, value, buffer->size);
    report_shared_write(context_of(buffer), context_of(buffer)->base, buffer->size);
}

// File buffers hold the guest's read-only model mapping: reads in place, no writes.
void file_refuse_write(ggml_backend_buffer_t buffer, const char *what) {
    log(GGML_LOG_LEVEL_ERROR, "%s: %s on a read-only model-file buffer is refused",
        context_of(buffer)->device->name().c_str(), what);
}

void file_memset_tensor(ggml_backend_buffer_t buffer, ggml_tensor *, uint8_t, size_t, size_t) {
    file_refuse_write(buffer, "memset_tensor");
}

void file_set_tensor(ggml_backend_buffer_t buffer, ggml_tensor *, const void *, size_t, size_t) {
    file_refuse_write(buffer, "set_tensor");
}

void file_clear(ggml_backend_buffer_t buffer, uint8_t) { file_refuse_write(buffer, "clear"); }

ggml_backend_buffer_i buffer_interface(RemoteBuffer::Kind kind, bool needs_init_tensor) {
    ggml_backend_buffer_i iface{};
    iface.free_buffer = buffer_free;
    iface.get_base = buffer_get_base;
    // ggml calls init_tensor for every tensor and view it places; only forward it
    // when the host's buffers do something in it.
    iface.init_tensor = needs_init_tensor ? buffer_init_tensor : nullptr;
    iface.reset = buffer_reset;
    switch (kind) {
        case RemoteBuffer::Kind::remote:
            iface.memset_tensor = buffer_memset_tensor;
            iface.set_tensor = buffer_set_tensor;
            iface.get_tensor = buffer_get_tensor;
            iface.set_tensor_2d = buffer_set_tensor_2d;
            iface.get_tensor_2d = buffer_get_tensor_2d;
            iface.cpy_tensor = buffer_cpy_tensor;
            iface.clear = buffer_clear;
            break;
        case RemoteBuffer::Kind::shared:
            // ggml copies between buffers in CPU memory itself, so no cpy_tensor or 2-D hooks.
            iface.memset_tensor = shared_memset_tensor;
            iface.set_tensor = shared_set_tensor;
            iface.get_tensor = shared_get_tensor;
            iface.clear = shared_clear;
            break;
        case RemoteBuffer::Kind::file:
            iface.memset_tensor = file_memset_tensor;
            iface.set_tensor = file_set_tensor;
            iface.get_tensor = file_get_tensor;
            iface.clear = file_clear;
            break;
    }
    return iface;
}

ggml_backend_buffer_t wrap(ggml_backend_buffer_type_t buft, std::unique_ptr<RemoteBuffer> remote, size_t size,
                           bool restorable);

}  // namespace

ggml_tensor byte_tensor(ggml_backend_buffer_t buffer, void *data, size_t size) {
    ggml_tensor bytes{};
    bytes.type = GGML_TYPE_I8;
    bytes.ne[0] = static_cast<int64_t>(size);
    bytes.ne[1] = bytes.ne[2] = bytes.ne[3] = 1;
    bytes.nb[0] = 1;
    bytes.nb[1] = bytes.nb[2] = bytes.nb[3] = size;
    bytes.buffer = buffer;
    bytes.data = data;
    return bytes;
}

void upload_to(SessionCalls &calls, RemoteBuffer *remote, uint64_t offset, const void *data, size_t size) {
    // A tensor of the bytes, as ggml would pass one, so that the store may be asked.
    ggml_tensor bytes = byte_tensor(remote->owner, static_cast<uint8_t *>(remote->base) + offset, size);
    upload(calls, remote->owner, &bytes, data, 0, size);
}

BufferRange RemoteBuffer::range(const ggml_tensor *tensor, size_t offset, size_t size) const {
    BufferRange range;
    range.buffer = handle;
    range.offset =
        static_cast<uint64_t>(static_cast<const uint8_t *>(tensor->data) - static_cast<const uint8_t *>(base)) + offset;
    range.size = size;
    return range;
}

Status RemoteBuffer::read_tensor(const ggml_tensor *tensor, size_t offset, void *data, size_t size,
                                 const char *deferred) {
    auto *bytes = static_cast<uint8_t *>(data);
    for (size_t done = 0; done < size;) {
        const size_t chunk = std::min<size_t>(size - done, kDataChunkSize);
        auto call = device->session()
                        .call<GetTensor>({range(tensor, offset + done, chunk)})
                        .reply_tail_into(bytes + done, chunk);
        Status status = deferred != nullptr ? call.run_later(deferred) : call.run();
        if (!status) {
            std::memset(bytes + done, 0, size - done);
            return status;
        }
        done += chunk;
    }
    return Status::success();
}

RemoteBuffer *remote_buffer_of(ggml_backend_buffer_t buffer) {
    if (buffer == nullptr || buffer->iface.free_buffer != buffer_free) return nullptr;
    return context_of(buffer);
}

RemoteBuffer *remote_buffer_of(const ggml_tensor *tensor) {
    return remote_buffer_of(tensor->buffer != nullptr     ? tensor->buffer
                            : tensor->view_src != nullptr ? tensor->view_src->buffer
                                                          : nullptr);
}

bool locate_on_host(const RemoteSession *session, const ggml_tensor *tensor, TensorLocation *location) {
    const RemoteBuffer *owner = remote_buffer_of(tensor);
    if (owner == nullptr || (session != nullptr && &owner->device->session() != session)) return false;
    location->buffer = owner->handle;
    location->offset = static_cast<const uint8_t *>(tensor->data) - static_cast<const uint8_t *>(owner->base);
    return true;
}

void tell_weights(const ggml_tensor *tensor) {
    RemoteBuffer *owner = remote_buffer_of(tensor);
    if (owner == nullptr) return;
    const ggml_tensor *bytes_owner = tensor->view_src != nullptr ? tensor->view_src : tensor;
    tell_weights_of(owner, bytes_owner->buffer);
}

namespace {

// A buffer the server placed in the ivshmem region's heap: its bytes are right
// here, as with a memory file. `tail`: the reply's tail, the buffer's offset.
ggml_backend_buffer_t adopt_region_buffer(SessionCalls &calls, ggml_backend_buffer_type_t buft,
                                          std::unique_ptr<RemoteBuffer> remote, const BufferAlloc::Reply &reply,
                                          const std::vector<uint8_t> &tail) {
    RemoteDevice *device = remote->device;
    uint64_t offset = 0;
    void *at = nullptr;
    Status status = read_pod(ByteView(tail), 0, &offset) && tail.size() == sizeof(offset)
                        ? device->session().region_bytes(offset, reply.size, &at)
                        : error(Code::error, "the server did not say where the buffer is");
    if (status && offset % BufferAlloc::kRegionAlignment != 0) {
        status = error(Code::error, "the server placed a buffer at an unaligned offset of the region");
    }
    if (!status) {
        log(GGML_LOG_LEVEL_ERROR, "%s: %s", device->name().c_str(), status.message().c_str());
        (void)calls.free_buffer(reply.buffer);
        return nullptr;
    }
    remote->kind = RemoteBuffer::Kind::shared;
    remote->base = at;
    ggml_backend_buffer_t buffer = ggml_backend_buffer_init(
        buft, buffer_interface(remote->kind, device->info().buffer_needs_init_tensor), remote.get(), reply.size);
    if (buffer == nullptr) return nullptr;
    // Graph preparation asks the ggml buffer for its usage. Not restorable: a
    // region's buffers end with its session (the region is wiped).
    remote->owner = buffer;
    remote.release();
    return buffer;
}

// A buffer of `size` bytes on the host, allocated through `calls`; `restorable`:
// made again on a new connection.
ggml_backend_buffer_t allocate_buffer(SessionCalls &calls, ggml_backend_buffer_type_t buft, size_t size,
                                      bool restorable) {
    RemoteDevice *device = RemoteDevice::from(buft);
    BufferAlloc::Reply reply{};
    UniqueFd memory_file;
    std::vector<uint8_t> tail;
    Status status = calls.call<BufferAlloc>({device->remote_index(), size})
                        .reply(&reply)
                        .receive_fd(&memory_file)
                        .reply_tail(&tail)
                        .run();
    if (!status) {
        if (status.code() != Code::disconnected) {
            log(GGML_LOG_LEVEL_ERROR, "%s: cannot allocate %zu bytes: %s", device->name().c_str(), size,
                status.message().c_str());
        }
        return nullptr;
    }
    auto remote = std::make_unique<RemoteBuffer>();
    remote->device = device;
    remote->handle = reply.buffer;
    if (reply.shared == BufferAlloc::kSharedInRegion) {
        if (device->session().region_heap()) return adopt_region_buffer(calls, buft, std::move(remote), reply, tail);
        log(GGML_LOG_LEVEL_ERROR, "%s: the server placed a buffer in a region this session has not",
            device->name().c_str());
        (void)calls.free_buffer(reply.buffer);
        return nullptr;
    }
    if (reply.shared) {
        if (!device->session().shared_memory() || !memory_file.valid()) {
            status = error(Code::error, "the server sent no memory file, or one this session did not ask for");
        } else {
            status = check_sealed_memory(memory_file.get(), reply.size);
            if (status) status = Mapping::map(memory_file.get(), 0, reply.size, true, &remote->mapping);
        }
        if (!status) {
            log(GGML_LOG_LEVEL_ERROR, "%s: cannot map a shared buffer: %s", device->name().c_str(),
                status.message().c_str());
            (void)calls.free_buffer(reply.buffer);
            return nullptr;
        }
        remote->kind = RemoteBuffer::Kind::shared;
        remote->base = remote->mapping.data();
        remote->memory_file = std::move(memory_file);  // handed back on a new connection
        return wrap(buft, std::move(remote), reply.size, restorable);
    }
    const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
    const size_t alignment = std::max<size_t>(device->info().buffer_alignment, 1);
    remote->reservation_size = ((reply.size + alignment + page - 1) / page) * page;
    remote->reservation =
        ::mmap(nullptr, remote->reservation_size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (remote->reservation == MAP_FAILED) {
        log(GGML_LOG_LEVEL_ERROR, "%s: cannot reserve %zu bytes of address space", device->name().c_str(),
            remote->reservation_size);
        (void)calls.free_buffer(reply.buffer);
        return nullptr;
    }
    const auto start = reinterpret_cast<uintptr_t>(remote->reservation);
    remote->base = reinterpret_cast<void *>((start + alignment - 1) / alignment * alignment);
    return wrap(buft, std::move(remote), reply.size, restorable);
}

}  // namespace

ggml_backend_buffer_t allocate_remote_buffer(ggml_backend_buffer_type_t buft, size_t size) {
    return allocate_buffer(RemoteDevice::from(buft)->session(), buft, size, true);
}

ggml_backend_buffer_t remote_buffer_from_host_ptr(ggml_backend_dev_t dev, void *ptr, size_t size,
                                                  size_t max_tensor_size) {
    RemoteDevice *device = RemoteDevice::from(dev);
    if (!device->maps_files() || size == 0) return nullptr;
    auto remote = std::make_unique<RemoteBuffer>();
    remote->kind = RemoteBuffer::Kind::file;
    remote->device = device;
    remote->base = ptr;
    remote->max_tensor_size = max_tensor_size;
    if (!host_buffer_of_memory(device->session(), device, ptr, size, max_tensor_size, &remote->handle)) return nullptr;
    return wrap(device->buffer_type(), std::move(remote), size, true);
}

namespace {

// Gives the ggml buffer its interface and, when `restorable`, the session the
// buffer to restore.
ggml_backend_buffer_t wrap(ggml_backend_buffer_type_t buft, std::unique_ptr<RemoteBuffer> remote, size_t size,
                           bool restorable) {
    RemoteDevice *device = remote->device;
    ggml_backend_buffer_t buffer = ggml_backend_buffer_init(
        buft, buffer_interface(remote->kind, device->info().buffer_needs_init_tensor), remote.get(), size);
    if (buffer == nullptr) return nullptr;
    remote->owner = buffer;
    if (restorable) {
        device->session().add_restorable(remote.get());
        remote->restorable = true;
    }
    remote.release();
    return buffer;
}

}  // namespace

bool host_buffer_of_memory(SessionCalls &calls, RemoteDevice *device, void *ptr, size_t size, size_t max_tensor_size,
                           uint64_t *handle) {
    UniqueFd file;
    uint64_t file_offset = 0;
    Status status = open_mapped_file(ptr, size, &file, &file_offset);
    if (status) {
        BufferFromFile::Reply reply{};
        status = calls.call<BufferFromFile>({device->remote_index(), file_offset, size, max_tensor_size})
                     .send_fd(file.get())
                     .reply(&reply)
                     .run();
        *handle = reply.buffer;
        if (status) calls.count_mapped_file(size);
    }
    if (status) return true;
    if (status.code() == Code::disconnected) return false;
    // Not a file the host can map (or it refused): give the host a copy instead.
    log(GGML_LOG_LEVEL_DEBUG, "%s: copying %zu bytes of CPU memory (%s)", device->name().c_str(), size,
        status.message().c_str());
    // Not restorable: it lives only until its host buffer is handed over, below.
    ggml_backend_buffer_t staging = allocate_buffer(calls, device->buffer_type(), size, false);
    if (staging == nullptr) return false;
    RemoteBuffer *copy = context_of(staging);
    std::memcpy(copy->base, ptr, size);
    // Keep the host's buffer, drop this side's mapping of it.
    *handle = copy->handle;
    copy->handle = 0;
    staging->iface.free_buffer = nullptr;
    delete copy;
    ggml_backend_buffer_free(staging);
    return true;
}

}  // namespace ggml_remote::guest
