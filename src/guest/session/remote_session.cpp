#include "guest/session/remote_session.h"

#include <utility>

namespace ggml_remote::guest {

using namespace protocol;

Status RemoteSession::begin(std::unique_ptr<RemoteSession> session, FramedStream stream,
                            std::unique_ptr<RemoteSession> *out) {
    session->pipeline_.begin(std::move(stream));
    Status status =
        handshake(session->pipeline_.stream(), session->endpoint_, session->options_, session->ask_, &session->terms_);
    if (status) *out = std::move(session);
    return status;
}

// A VM's session in an ivshmem region. It does not reconnect: the region is the
// VM's only channel, and a new session there starts from a fresh region.
Status RemoteSession::open_in_region(const Endpoint &endpoint, const GuestOptions &options,
                                     std::unique_ptr<RemoteSession> *out) {
    FramedStream stream;
    std::shared_ptr<GuestRegion> region;
    Status status = open_region(endpoint, options, &stream, &region);
    if (!status) return status;
    std::unique_ptr<RemoteSession> session(new RemoteSession(endpoint.to_string(), options, {false, true}));
    session->region_ = std::move(region);
    return begin(std::move(session), std::move(stream), out);
}

Status RemoteSession::open(const Endpoint &endpoint, const GuestOptions &options, std::unique_ptr<RemoteSession> *out) {
    if (endpoint.is_ivshmem()) return open_in_region(endpoint, options, out);
    FramedStream stream;
    Status status = connect_stream(endpoint, options, options.connect_timeout_ms, &stream);
    if (!status) return status;
    const bool unix_socket =
        endpoint.kind == Endpoint::Kind::shared_memory || endpoint.kind == Endpoint::Kind::unix_socket;
    const bool tcp = endpoint.kind == Endpoint::Kind::tcp || endpoint.kind == Endpoint::Kind::tls;
    const HandshakeAsk ask{endpoint.kind == Endpoint::Kind::shared_memory, false, unix_socket, tcp};
    std::unique_ptr<RemoteSession> session(new RemoteSession(endpoint.to_string(), options, ask));
    session->set_connector(connector_for(endpoint, options));
    return begin(std::move(session), std::move(stream), out);
}

Status RemoteSession::start(FramedStream stream, const std::string &name, const GuestOptions &options,
                            std::unique_ptr<RemoteSession> *out) {
    std::unique_ptr<RemoteSession> session(new RemoteSession(name, options, {}));
    return begin(std::move(session), std::move(stream), out);
}

Status RemoteSession::region_bytes(uint64_t offset, uint64_t size, void **at) const {
    if (region_ == nullptr) return error(Code::error, "no ivshmem region in this session");
    const RegionLayout &layout = region_->layout();
    const uint64_t heap_end = layout.heap_offset + layout.heap_size;
    if (offset < layout.heap_offset || offset > heap_end || size > heap_end - offset) {
        return error(Code::error, "the server placed a buffer outside the region's heap");
    }
    *at = region_->base() + offset;
    return Status::success();
}

Status RemoteSession::run(CommandId id, Exchange &x) {
    std::lock_guard<std::mutex> lock(mutex_);
    // Freeing what a lost connection held needs no new one.
    if (pipeline_.broken() && command_has(id, kReleases)) {
        return error(Code::disconnected, "no connection to " + endpoint_);
    }
    if (Status status = reconnector_.refuse_if_lost(pipeline_, &terms_); !status) return status;
    Status status = pipeline_.run(id, x);
    reconnector_.recover(pipeline_, &terms_);
    return status;
}

Status RemoteSession::compute_graph(uint64_t backend, const std::vector<uint8_t> &graph, Completion completion,
                                    GraphTicket *ticket) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (Status status = reconnector_.refuse_if_lost(pipeline_, &terms_); !status) return status;
    Status status = pipeline_.compute_graph(backend, graph, completion, ticket);
    reconnector_.recover(pipeline_, &terms_);
    return status;
}

Status RemoteSession::compute_graph_again(uint64_t backend, const GraphTicket &ticket, Completion completion,
                                          bool *replayed) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (Status status = reconnector_.refuse_if_lost(pipeline_, &terms_); !status) {
        *replayed = true;  // nothing to encode: the call failed
        return status;
    }
    Status status = pipeline_.compute_graph_again(backend, ticket, completion, replayed);
    reconnector_.recover(pipeline_, &terms_);
    return status;
}

Status RemoteSession::synchronize(uint64_t backend) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (Status status = reconnector_.refuse_if_lost(pipeline_, &terms_); !status) return status;
    Status status = pipeline_.synchronize(backend, pipeline_.last_compute());
    reconnector_.recover(pipeline_, &terms_);
    return status;
}

void RemoteSession::note_compute_in_flight(uint64_t backend) {
    std::lock_guard<std::mutex> lock(mutex_);
    in_flight_backend_ = backend;
}

Status RemoteSession::finish_compute_in_flight() {
    std::lock_guard<std::mutex> lock(mutex_);
    const uint64_t backend = std::exchange(in_flight_backend_, 0);
    if (backend == 0) return Status::success();
    return wait_for_mark_locked(pipeline_.last_compute(), backend);
}

uint64_t RemoteSession::mark() {
    std::lock_guard<std::mutex> lock(mutex_);
    return pipeline_.mark();
}

Status RemoteSession::wait_for_mark(uint64_t mark, uint64_t backend) {
    std::lock_guard<std::mutex> lock(mutex_);
    return wait_for_mark_locked(mark, backend);
}

Status RemoteSession::wait_for_mark_locked(uint64_t mark, uint64_t backend) {
    if (pipeline_.passed(mark)) return Status::success();
    if (Status status = reconnector_.refuse_if_lost(pipeline_, &terms_); !status) return status;
    Status status = pipeline_.synchronize(backend, mark);
    reconnector_.recover(pipeline_, &terms_);
    return status;
}

Status RemoteSession::free_buffer(uint64_t buffer) {
    std::lock_guard<std::mutex> lock(mutex_);
    return pipeline_.free_buffer(buffer);
}

void RemoteSession::count_mapped_file(uint64_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    pipeline_.count_mapped_file(bytes);
}

RemoteSession::Counters RemoteSession::counters() {
    std::lock_guard<std::mutex> lock(mutex_);
    return pipeline_.counters();
}

void RemoteSession::set_compute_threads(int threads) {
    std::lock_guard<std::mutex> lock(mutex_);
    pipeline_.set_compute_threads(threads);
}

void RemoteSession::set_connector(Connector connector) {
    std::lock_guard<std::mutex> lock(mutex_);
    reconnector_.set_connector(std::move(connector));
    pipeline_.set_reconnects(reconnector_.reconnects());
}

void RemoteSession::add_restorable(Restorable *object) {
    std::lock_guard<std::mutex> lock(mutex_);
    reconnector_.add(object);
}

void RemoteSession::remove_restorable(Restorable *object) {
    std::lock_guard<std::mutex> lock(mutex_);
    reconnector_.remove(object);
}

uint64_t RemoteSession::reconnections() {
    std::lock_guard<std::mutex> lock(mutex_);
    return reconnector_.reconnections();
}

bool RemoteSession::last_restore_intact() {
    std::lock_guard<std::mutex> lock(mutex_);
    return reconnector_.last_restore_intact();
}

}  // namespace ggml_remote::guest
