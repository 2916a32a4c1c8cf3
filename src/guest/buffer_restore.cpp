// RemoteBuffer on a new connection: what of each buffer's contents can be put
// back, and the buffers that could not be, which computes must not read.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "guest/buffer.h"
#include "guest/log.h"

namespace ggml_remote::guest {

using namespace protocol;

namespace {

std::atomic<size_t> g_lost_buffers{0};

const char *usage_name(ggml_backend_buffer_t buffer) {
    switch (ggml_backend_buffer_get_usage(buffer)) {
        case GGML_BACKEND_BUFFER_USAGE_WEIGHTS:
            return "weights";
        case GGML_BACKEND_BUFFER_USAGE_COMPUTE:
            return "compute";
        default:
            return "data";
    }
}

// Opens the file a weight source names, if it is still that file.
Status open_source(const MappedFile &file, UniqueFd *fd) {
    UniqueFd opened(::open(file.path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!opened.valid()) return error(Code::error, "open " + file.path + ": " + std::strerror(errno));
    struct stat st{};
    if (::fstat(opened.get(), &st) != 0 || st.st_ino != file.inode || major(st.st_dev) != file.major ||
        minor(st.st_dev) != file.minor) {
        return error(Code::error, file.path + " is no longer the file the weights came from");
    }
    *fd = std::move(opened);
    return Status::success();
}

Status read_exactly(int fd, uint64_t offset, uint8_t *into, size_t size) {
    for (size_t done = 0; done < size;) {
        const ssize_t got = ::pread(fd, into + done, size - done, static_cast<off_t>(offset + done));
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) return error(Code::error, got == 0 ? "the file is shorter than before" : std::strerror(errno));
        done += static_cast<size_t>(got);
    }
    return Status::success();
}

}  // namespace

size_t lost_buffer_count() { return g_lost_buffers.load(std::memory_order_relaxed); }

RemoteBuffer::~RemoteBuffer() {
    set_lost(false);
    if (restorable) device->session().remove_restorable(this);
    if (reservation != nullptr) ::munmap(reservation, reservation_size);
}

void RemoteBuffer::set_lost(bool now_lost) {
    if (lost == now_lost) return;
    lost = now_lost;
    if (now_lost) {
        g_lost_buffers.fetch_add(1, std::memory_order_relaxed);
    } else {
        g_lost_buffers.fetch_sub(1, std::memory_order_relaxed);
    }
}

void RemoteBuffer::note_write(uint64_t offset, uint64_t size, const void *data) {
    if (kind != Kind::remote || size == 0 || owner == nullptr) return;
    if (offset == 0 && size >= ggml_backend_buffer_get_size(owner)) set_lost(false);
    if (content == Content::host_only) return;
    MappedFile file;
    const bool weights = ggml_backend_buffer_get_usage(owner) == GGML_BACKEND_BUFFER_USAGE_WEIGHTS;
    if (data != nullptr && weights && find_mapped_file(data, size, &file) && !file.writable) {
        sources.push_back({offset, size, file});
        content = Content::sourced;
        return;
    }
    content = Content::host_only;
    sources.clear();
}

void RemoteBuffer::note_clear(uint8_t value) {
    if (kind != Kind::remote) return;
    set_lost(false);
    content = Content::cleared;
    clear_value = value;
    sources.clear();
}

void RemoteBuffer::note_graph_use() {
    if (kind == Kind::remote) graph_target = true;
}

std::string RemoteBuffer::describe() const {
    if (owner == nullptr) return device->name() + " buffer";
    return std::string(ggml_backend_buffer_name(owner)) + " buffer of " +
           std::to_string(ggml_backend_buffer_get_size(owner)) + " bytes (" + usage_name(owner) + ")";
}

void RemoteBuffer::restore(SessionCalls &calls, RestoreReport *report) {
    handle = 0;  // never the old connection's number: it may name another object now
    Status status;
    if (kind == Kind::shared) {
        // The memory is the guest's too: handed back, nothing is lost.
        BufferAdopt::Reply reply{};
        status = calls.call<BufferAdopt>({device->remote_index(), mapping.size()})
                     .send_fd(memory_file.get())
                     .reply(&reply)
                     .run();
        handle = reply.buffer;
    } else if (kind == Kind::file) {
        if (!host_buffer_of_memory(calls, device, base, ggml_backend_buffer_get_size(owner), max_tensor_size,
                                   &handle)) {
            status = error(Code::error, "the host cannot map or copy the model file again");
        }
    } else {
        status = restore_remote(calls, report);
    }
    if (!status) {
        handle = 0;
        set_lost(true);
        report->lost.push_back(describe() + " (" + status.message() + ")");
        return;
    }
    ++report->restored;
    if (weights_told) {
        status = calls.post<BufferSetUsage>({handle, GGML_BACKEND_BUFFER_USAGE_WEIGHTS});
        if (!status) weights_told = false;
    }
}

Status RemoteBuffer::restore_remote(SessionCalls &calls, RestoreReport *report) {
    const size_t size = ggml_backend_buffer_get_size(owner);
    BufferAlloc::Reply reply{};
    UniqueFd memory;
    Status status = calls.call<BufferAlloc>({device->remote_index(), size}).reply(&reply).receive_fd(&memory).run();
    if (!status) return status;
    handle = reply.buffer;
    if (reply.shared || reply.size != size) {
        (void)calls.free_buffer(handle);
        handle = 0;
        return error(Code::error, "the server now offers another kind of buffer");
    }
    const Content now = graph_target ? Content::host_only : content;
    // A compute buffer holds what the application writes before each graph, and
    // what the graph itself computes: only the graph in flight loses its inputs.
    if (ggml_backend_buffer_get_usage(owner) == GGML_BACKEND_BUFFER_USAGE_COMPUTE) {
        if (now != Content::fresh) report->scratch_lost = true;
        return Status::success();
    }
    switch (now) {
        case Content::fresh:
            return Status::success();
        case Content::cleared:
            return calls.post<BufferClear>({handle, clear_value});
        case Content::sourced:
            return restore_sources(calls);
        case Content::host_only:
            break;
    }
    // Zeros, not whatever the new memory held: what a computes sees once the
    // application has cleared the buffer, and never NaNs in masked cells.
    set_lost(true);
    report->lost.push_back(describe());
    return calls.post<BufferClear>({handle, 0});
}

// Weights written from the guest's model file: read from it again, in order.
Status RemoteBuffer::restore_sources(SessionCalls &calls) {
    std::vector<uint8_t> bytes;
    for (const WeightSource &source : sources) {
        UniqueFd file;
        Status status = open_source(source.file, &file);
        if (status) {
            bytes.resize(source.size);
            status = read_exactly(file.get(), source.file.offset, bytes.data(), bytes.size());
        }
        if (!status) return error(status.code(), "cannot read the weights again: " + status.message());
        upload_to(calls, this, source.offset, bytes.data(), bytes.size());
    }
    return Status::success();
}

}  // namespace ggml_remote::guest
