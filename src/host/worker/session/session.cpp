// Session: what one guest owns on the host, and its commands' way to their handlers.
#include "host/worker/session/session.h"

#include <unistd.h>

#include <thread>

#include "host/worker/graph/graph_builder.h"

namespace ggml_remote::host {

using namespace protocol;

namespace {

int hardware_threads() {
    const unsigned n = std::thread::hardware_concurrency();
    return n == 0 ? 1 : static_cast<int>(n);
}

}  // namespace

namespace {

// The most a session's end waits for the store to take the weights its guest sent.
constexpr int kStoreDrainMs = 10000;

}  // namespace

Session::Session(std::vector<ggml_backend_dev_t> devices, SessionLimits limits)
    : devices_(std::move(devices)), limits_(limits), cores_(limits.schedule_cores, limits.cores) {
    if (limits_.max_threads <= 0) limits_.max_threads = hardware_threads();
    if (limits_.default_threads <= 0) limits_.default_threads = limits_.max_threads;
    if (limits_.mapped_file_quota == 0) limits_.mapped_file_quota = physical_memory();
    weight_repack_.set_max_copies(limits_.max_weight_copies);
    register_handlers();
}

Session::~Session() {
    // The guest left: the store finishes what it sent, in a hurry and for a bounded
    // time (its thread reads our buffers), and does nothing else for it.
    store_fill_.stop(std::chrono::milliseconds(kStoreDrainMs));
    graph_slots_.clear_all();
    // Backends first: they may still reference buffers.
    backends_.clear();
    buffers_.clear();
}

void Session::register_handlers() {
#define GGML_REMOTE_REGISTER_HANDLER(number, name, Cmd, size) dispatcher_.on<Cmd>(this, &Session::handle);
    GGML_REMOTE_COMMANDS(GGML_REMOTE_REGISTER_HANDLER)
#undef GGML_REMOTE_REGISTER_HANDLER
}

Status Session::over_cap(size_t count, const char *what, const char *flag) {
    return error(Code::limit_exceeded,
                 "this session already has " + std::to_string(count) + " " + what + " (" + flag + ")");
}

Status Session::device_at(uint32_t index, ggml_backend_dev_t *device) const {
    if (index >= devices_.size()) {
        return error(Code::not_found, "device " + std::to_string(index) + " does not exist (the server exposes " +
                                          std::to_string(devices_.size()) + ")");
    }
    *device = devices_[index];
    return Status::success();
}

Status Session::buffer_at(uint64_t handle, SessionBuffer **buffer) {
    *buffer = buffers_.find(handle);
    if (*buffer == nullptr) return error(Code::not_found, "buffer handle " + std::to_string(handle) + " is not valid");
    return Status::success();
}

Status Session::backend_at(uint64_t handle, SessionBackend **backend) {
    *backend = backends_.find(handle);
    if (*backend == nullptr)
        return error(Code::not_found, "backend handle " + std::to_string(handle) + " is not valid");
    return Status::success();
}

void Session::bytes_written(uint64_t buffer, uint64_t offset, uint64_t size) {
    weight_repack_.written(buffer, offset, size);
    store_fill_.written(buffer, offset, size);
}

void Session::count_guest_bytes(uint64_t buffer, uint64_t bytes) {
    if (SessionBuffer *record = buffers_.find(buffer))
        weight_upload_.count_received(&record->upload, record->size, bytes);
}

Status Session::build(ByteView bytes, DataPolicy policy, BuiltTensors *built) {
    TensorList list;
    if (Status s = decode_tensor_list(bytes, limits_.tensor_list, &list); !s) return s;
    BufferLookup lookup = [this](uint64_t handle, BufferView *view) -> Status {
        SessionBuffer *buffer = nullptr;
        Status found = buffer_at(handle, &buffer);
        if (!found) return found;
        if (!buffer->placed) note_before_placed(buffer, {handle, 0, 0}, false);  // tensors point into it now
        view->buffer = buffer->buffer.get();
        view->size = buffer->size;
        view->writable = buffer->writable;
        // Memory the guest maps too: a memory file or the region's heap it shares,
        // or its own file, which it may still write through another descriptor.
        view->guest_writable = buffer->shared_with_guest || buffer->in_region || buffer->mapped != 0;
        return Status::success();
    };
    return build_tensors(list, lookup, policy, built);
}

Status Session::handle(uint16_t command, ByteView payload, ReplyFrame *reply, std::vector<UniqueFd> *fds) {
    std::vector<UniqueFd> none;
    Status status = handle_frame(command, payload, nullptr, fds != nullptr ? *fds : none, reply);
    reply->tail.gather();  // in-process callers read the tail's bytes
    return status;
}

Status Session::handle_frame(uint16_t command, ByteView payload, TailStream *streamed, std::vector<UniqueFd> &fds,
                             ReplyFrame *reply) {
    Status status = run_handler(command, payload, streamed, fds, reply);
    // A failed handshake is the guest's refusal, which its worker reports, not a command's.
    if (!status.ok() && handshaken_) {
        ++counters_.commands_refused[static_cast<size_t>(command_refusal_for(status.code()))];
        if (protocol::command_has(command, protocol::kFailureLogged)) report_compute_failure(status);
    }
    return status;
}

void Session::report_compute_failure(const Status &status) {
    // A guest that sends a failing graph for every token must not flood the log.
    constexpr uint64_t kFailuresLogged = 8;
    ++compute_failures_;
    if (!compute_failure_log_ || compute_failures_ > kFailuresLogged) return;
    compute_failure_log_("failed graph compute: " + status.message());
    if (compute_failures_ == kFailuresLogged) {
        compute_failure_log_("further failed graph computes of this session are not logged");
    }
}

Status Session::run_handler(uint16_t command, ByteView payload, TailStream *streamed, std::vector<UniqueFd> &fds,
                            ReplyFrame *reply) {
    const Dispatcher::RawHandler *handler = dispatcher_.find(command);
    if (handler == nullptr) return error(Code::bad_request, "unknown command " + std::to_string(command));
    if (!handshaken_ && !protocol::command_has(command, protocol::kOpensSession)) {
        return error(Code::bad_request, "the first message must be the handshake");
    }
    // A new store entry is complete once the guest does anything but write.
    if (!protocol::command_has(command, protocol::kWritesWeights)) {
        Status stored = store_fill_.finish_pending();
        if (!stored) return stored;
    }
    store_fill_.map_named();
    ++counters_.commands;
    mark_guest_session_at(command);
    // A backend that throws (std::bad_alloc for a work buffer a forged shape asks
    // for) fails this command, not the session.
    try {
        return (*handler)(payload, streamed, fds, reply);
    } catch (const std::bad_alloc &) {
        return error(Code::out_of_memory,
                     std::string(command_name(static_cast<CommandId>(command))) + ": the host ran out of memory");
    } catch (const std::exception &e) {
        return error(Code::error, std::string(command_name(static_cast<CommandId>(command))) + ": " + e.what());
    }
}

SessionCounters Session::counters() const {
    // counters_ holds what the session counts as it goes; every figure is then
    // taken from where the list says it comes from.
    SessionCounters totals = counters_;
#define GGML_REMOTE_FIGURE_NOW(field, kind, reply, metric, from, help) totals.field = (from);
    GGML_REMOTE_SESSION_FIGURES(GGML_REMOTE_FIGURE_NOW)
#undef GGML_REMOTE_FIGURE_NOW
    return totals;
}

void Session::mark_guest_session_at(uint16_t command) {
    if (guest_session_marked_ || protocol::command_has(command, protocol::kOpensSession) ||
        command == static_cast<uint16_t>(CommandId::server_status)) {
        return;
    }
    guest_session_marked_ = true;
    if (status_slot_ != nullptr) mark_guest_session(status_slot_);
}

void Session::publish_status() {
    if (status_slot_ != nullptr) store_figures(status_slot_, counters());
}

}  // namespace ggml_remote::host
