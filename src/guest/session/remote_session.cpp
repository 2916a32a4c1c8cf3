#include "guest/session/remote_session.h"

#include "guest/log.h"
#include "protocol/printable.h"
#include "transport/ivshmem_region.h"

#include <algorithm>
#include <cstring>
#include <thread>

namespace ggml_remote::guest {

using namespace protocol;

// A VM's session in an ivshmem region. It does not reconnect: the region is the
// VM's only channel, and a new session there starts from a fresh region.
Status RemoteSession::open_in_region(const Endpoint &endpoint, const GuestOptions &options,
                                     std::unique_ptr<RemoteSession> *out) {
    FramedStream stream;
    std::shared_ptr<GuestRegion> region;
    Status status = open_region(endpoint, options, &stream, &region);
    if (!status) return status;
    std::unique_ptr<RemoteSession> session(new RemoteSession(endpoint.to_string(), options));
    session->stream_ = std::move(stream);
    session->region_ = std::move(region);
    status = session->handshake(false, true);
    if (status) *out = std::move(session);
    return status;
}

Status RemoteSession::open(const Endpoint &endpoint, const GuestOptions &options, std::unique_ptr<RemoteSession> *out) {
    if (endpoint.is_ivshmem()) return open_in_region(endpoint, options, out);
    FramedStream stream;
    Status status = connect_stream(endpoint, options, options.connect_timeout_ms, &stream);
    if (!status) return status;
    std::unique_ptr<RemoteSession> session(new RemoteSession(endpoint.to_string(), options));
    session->stream_ = std::move(stream);
    status = session->handshake(endpoint.kind == Endpoint::Kind::shared_memory);
    if (!status) return status;
    session->connector_ = connector_for(endpoint, options);
    *out = std::move(session);
    return status;
}

Status RemoteSession::start(FramedStream stream, const std::string &name, const GuestOptions &options,
                            std::unique_ptr<RemoteSession> *out) {
    std::unique_ptr<RemoteSession> session(new RemoteSession(name, options));
    session->stream_ = std::move(stream);
    Status status = session->handshake(false);
    if (status) *out = std::move(session);
    return status;
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

Status RemoteSession::handshake(bool shared_memory, bool region_heap) {
    ask_ = {shared_memory, region_heap};
    return guest::handshake(stream_, endpoint_, options_, ask_, &terms_);
}

Status RemoteSession::lost(const Status &cause) {
    if (!broken_) {
        broken_ = true;
        stream_.close();
        const bool reconnects = connector_ && options_.reconnect;
        log(GGML_LOG_LEVEL_ERROR, "lost the connection to ggml-remote-server at %s: %s; %s", endpoint_.c_str(),
            cause.message().c_str(), reconnects ? "reconnecting" : "its devices fail from now on");
    }
    return cause;
}

void RemoteSession::set_compute_threads(int threads) {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    compute_threads_ = threads;
    stream_.set_compute_threads(threads);
}

Status RemoteSession::read_reply(CommandId id, uint64_t sequence, Exchange &x) {
    if (x.rule.check == nullptr) return lost(error(Code::error, std::string("no reply rule for ") + command_name(id)));
    uint64_t max_payload = 0;
    if (__builtin_add_overflow(x.reply_size, x.rule.max_tail, &max_payload)) max_payload = UINT64_MAX;
    stream_.set_peer_busy(last_compute_ > finished_ && last_compute_ <= sequence);  // behind a compute
    FrameHeader header;
    Status status = stream_.receive_header(&header, std::max(max_payload, kMaxReplyReason));
    stream_.set_peer_busy(false);
    if (!status) {
        return lost(error(status.code(), std::string("reply to ") + command_name(id) + ": " + status.message()));
    }
    stream_.set_cores_contended((header.flags & kFrameCoresContended) != 0);
    finished_ = sequence;  // the host answers in order: all earlier work is done
    counters_.bytes_received += sizeof(header) + header.payload_size;
    UniqueFd fd;
    if (!stream_.received_fds().empty()) fd = std::move(stream_.received_fds().front());
    stream_.received_fds().clear();
    if (!(header.flags & kFrameReply) || header.command != static_cast<uint16_t>(id)) {
        return lost(error(Code::error, std::string("protocol error: expected the reply to ") + command_name(id)));
    }
    if (header.status != static_cast<int32_t>(Code::ok)) return read_refusal(header);
    if (header.payload_size > max_payload) {
        return lost(error(Code::error, std::string("protocol error: a reply to ") + command_name(id) + " of " +
                                           std::to_string(header.payload_size) + " bytes, at most " +
                                           std::to_string(max_payload) + " were asked for"));
    }
    status = read_reply_payload(id, header, x);
    if (status && x.received_fd != nullptr) *x.received_fd = std::move(fd);
    return status;
}

// A server's refusal of a command: its code, when one we know, and its reason,
// bounded and made printable (it ends up in the application's log).
Status RemoteSession::read_refusal(const FrameHeader &header) {
    if (header.payload_size > kMaxReplyReason) {
        return lost(error(Code::error, "protocol error: a refusal of " + std::to_string(header.payload_size) + " bytes"));
    }
    std::string message(static_cast<size_t>(header.payload_size), '\0');
    Status status = stream_.receive(message.data(), message.size());
    if (!status) return lost(status);
    const bool known = header.status > 0 && header.status < static_cast<int32_t>(Code::disconnected);
    constexpr size_t kShownReason = 4096;
    if (message.size() > kShownReason) message.resize(kShownReason);
    return error(known ? static_cast<Code>(header.status) : Code::error, one_line(message));
}

Status RemoteSession::read_reply_payload(CommandId id, const FrameHeader &header, Exchange &x) {
    if (header.payload_size < x.reply_size) {
        return lost(error(Code::error, std::string("protocol error: short reply to ") + command_name(id)));
    }
    // The fixed part lands here first: nothing of it reaches the caller unchecked.
    alignas(8) uint8_t fixed[kMaxReplyBytes] = {};
    Status status = stream_.receive(fixed, x.reply_size);
    if (!status) return lost(status);
    const uint64_t tail_size = header.payload_size - x.reply_size;
    status = x.rule.check(x.rule.request, fixed, tail_size);
    if (!status) return lost(error(Code::error, "protocol error: " + status.message()));
    if (x.reply != nullptr) std::memcpy(x.reply, fixed, x.reply_size);
    if (x.tail_into != nullptr && tail_size == x.tail_into_size) {
        status = stream_.receive(x.tail_into, tail_size);
    } else if (x.reply_tail != nullptr) {
        x.reply_tail->resize(tail_size);  // bounded by the rule's max_tail
        status = stream_.receive(x.reply_tail->data(), tail_size);
    } else {
        status = stream_.discard(tail_size);
        if (status && x.tail_into != nullptr) {
            status = error(Code::error, std::string("protocol error: unexpected reply size to ") + command_name(id));
        }
    }
    if (!status) return lost(status);
    return Status::success();
}

namespace {

// Frames up to this size are copied into the queue; larger ones (tensor data) go
// out directly after it.
constexpr size_t kQueuedFrameLimit = 256 * 1024;
// A queue this full is sent without waiting for a call.
constexpr size_t kQueueFlushSize = 1024 * 1024;

}  // namespace

void RemoteSession::queue(CommandId id, const Exchange &x) {
    FrameHeader header;
    header.command = static_cast<uint16_t>(id);
    header.payload_size = x.fixed.size + x.tail.size;
    append_pod(queued_, header);
    queued_.insert(queued_.end(), x.fixed.data, x.fixed.data + x.fixed.size);
    if (x.tail.size > 0) queued_.insert(queued_.end(), x.tail.data, x.tail.data + x.tail.size);
}

Status RemoteSession::flush_queue() {
    if (queued_.empty()) return Status::success();
    Status status = stream_.send_frames(ByteView(queued_));
    queued_.clear();
    return status;
}

Status RemoteSession::run(CommandId id, Exchange &x) {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    // Freeing what a lost connection held needs no new one.
    if (broken_ && (id == CommandId::buffer_free || id == CommandId::backend_free)) {
        return error(Code::disconnected, "no connection to " + endpoint_);
    }
    if (Status status = refuse_if_lost_locked(); !status) return status;
    Status status = run_locked(id, x);
    recover_locked();
    return status;
}

Status RemoteSession::read_pending_replies() {
    while (!pending_.empty()) {
        PendingReply &pending = pending_.front();
        Status status = read_reply(pending.id, pending.sequence, pending.exchange);
        if (!status) {
            if (broken_) {
                pending_.clear();
                return status;
            }
            log(GGML_LOG_LEVEL_ERROR, "%s: %s failed: %s", endpoint_.c_str(), pending.exchange.deferred,
                status.message().c_str());
            // Never hand back uninitialised memory.
            if (pending.exchange.tail_into != nullptr) {
                std::memset(pending.exchange.tail_into, 0, pending.exchange.tail_into_size);
            }
        }
        pending_.pop_front();
    }
    return Status::success();
}

Status RemoteSession::compute_graph(uint64_t backend, const std::vector<uint8_t> &graph, Completion completion,
                                    GraphTicket *ticket) {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    if (Status status = refuse_if_lost_locked(); !status) return status;
    const GraphCache::Choice choice = graphs_.choose(graph);
    if (ticket != nullptr) *ticket = {choice.slot, choice.stamp};
    // A graph new to the host is checked there before it runs (the op rules, the
    // device's supports_op): waiting for it makes a refusal fail this compute, as
    // its caller sees it, not a later read. Replays, every token after the first,
    // keep the caller's choice.
    if (choice.mode != kGraphReplay) completion = Completion::waits;
    Status status = send_compute(backend, choice.slot, choice.mode,
                                 choice.mode == kGraphReplay ? ByteView() : ByteView(graph), completion);
    recover_locked();
    return status;
}

Status RemoteSession::compute_graph_again(uint64_t backend, const GraphTicket &ticket, Completion completion,
                                          bool *replayed) {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    if (Status status = refuse_if_lost_locked(); !status) {
        *replayed = true;  // nothing to encode: the call failed
        return status;
    }
    *replayed = graphs_.holds(ticket.slot, ticket.stamp);
    if (!*replayed) return Status::success();
    Status status = send_compute(backend, ticket.slot, kGraphReplay, {}, completion);
    recover_locked();
    return status;
}

Status RemoteSession::send_compute(uint64_t backend, uint32_t slot, GraphMode mode, ByteView graph,
                                   Completion completion) {
    ++(mode == kGraphReplay ? counters_.graphs_replayed : counters_.graphs_sent);
    GraphCompute::Request request{backend, slot, mode};
    Exchange x;
    x.fixed = ByteView(&request, sizeof(request));
    x.tail = graph;
    // Returning at once, the compute goes out now: the host starts while we go on.
    // Waiting, it goes out with the synchronize, in one write: the host is woken
    // once, when we are about to sleep, and does not take the core from us before
    // we have sent the rest.
    x.send_now = completion == Completion::returns_at_once;
    Status status = run_locked(CommandId::graph_compute, x);
    last_compute_ = sent_;
    if (!status || completion == Completion::returns_at_once) return status;
    return synchronize_locked(backend, last_compute_);
}

Status RemoteSession::synchronize_locked(uint64_t backend, uint64_t up_to) {
    if (broken_) return error(Code::disconnected, "no connection to " + endpoint_);
    if (!pending_.empty()) {
        ++counters_.round_trips;
        Status status = flush_queue();
        if (!status) return lost(status);
        status = read_pending_replies();
        if (!status) return status;
    }
    if (finished_ >= up_to) return Status::success();
    Synchronize::Request request{backend};
    Exchange x;
    x.fixed = ByteView(&request, sizeof(request));
    bind_rule<Synchronize>(x, request);
    return run_locked(CommandId::synchronize, x);
}

Status RemoteSession::synchronize(uint64_t backend) {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    if (Status status = refuse_if_lost_locked(); !status) return status;
    Status status = synchronize_locked(backend, last_compute_);
    recover_locked();
    return status;
}

uint64_t RemoteSession::mark() {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    return sent_;
}

Status RemoteSession::wait_for_mark(uint64_t mark, uint64_t backend) {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    if (finished_ >= mark && pending_.empty()) return Status::success();
    if (Status status = refuse_if_lost_locked(); !status) return status;
    Status status = synchronize_locked(backend, mark);
    recover_locked();
    return status;
}

Status RemoteSession::free_buffer(uint64_t buffer) {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    graphs_.clear();  // in the same order as the host sees the free
    if (broken_) return error(Code::disconnected, "no connection to " + endpoint_);
    BufferFree::Request request{buffer};
    Exchange x;
    x.fixed = ByteView(&request, sizeof(request));
    return run_locked(CommandId::buffer_free, x);
}

void RemoteSession::set_connector(Connector connector) {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    connector_ = std::move(connector);
}

void RemoteSession::add_restorable(Restorable *object) {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    restorables_.push_back(object);
}

void RemoteSession::remove_restorable(Restorable *object) {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    restorables_.erase(std::remove(restorables_.begin(), restorables_.end(), object), restorables_.end());
}

uint64_t RemoteSession::reconnections() {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    return reconnections_;
}

bool RemoteSession::last_restore_intact() {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    return last_restore_intact_;
}

Status RemoteSession::refuse_if_lost_locked() {
    if (!broken_) return Status::success();
    recover_locked();
    if (broken_) return error(Code::disconnected, "no connection to " + endpoint_);
    return error(Code::disconnected, "the connection to " + endpoint_ +
                                         " was made again, but this call, which named the old one's objects, was not sent");
}

Status RemoteSession::reconnect_once(int timeout_ms) {
    FramedStream stream;
    Status status = connector_(&stream, timeout_ms);
    if (!status) return status;
    stream_ = std::move(stream);
    broken_ = false;
    // Nothing of the old connection is awaited or kept any more.
    queued_.clear();
    pending_.clear();
    graphs_.clear();
    finished_ = sent_;
    last_compute_ = sent_;
    const uint32_t devices = terms_.device_count;
    status = guest::handshake(stream_, endpoint_, options_, ask_, &terms_);
    if (status && terms_.device_count != devices) {
        status = error(Code::error, "the server now has " + std::to_string(terms_.device_count) + " devices, not " +
                                        std::to_string(devices));
    }
    if (!status) {
        broken_ = true;
        stream_.close();
        return status;
    }
    if (compute_threads_ > 0) stream_.set_compute_threads(compute_threads_);
    return Status::success();
}

void RemoteSession::restore_objects_locked(RestoreReport *report) {
    restoring_ = true;
    // A copy: restoring may add and remove objects of its own (staging buffers).
    const std::vector<Restorable *> objects = restorables_;
    for (Restorable *object : objects) {
        if (broken_) break;
        if (std::find(restorables_.begin(), restorables_.end(), object) != restorables_.end()) object->restore(report);
    }
    restoring_ = false;
}

namespace {

std::string lost_summary(const RestoreReport &report) {
    if (report.intact()) return "nothing lost";
    std::string text = report.scratch_lost ? "the graph being computed must be run again by the application" : "";
    if (!report.lost.empty()) {
        if (!text.empty()) text += "; ";
        text += "contents lost (now zeros; the next compute that reads one fails, naming it):";
        for (const std::string &name : report.lost) text += " " + name;
    }
    return text;
}

}  // namespace

void RemoteSession::recover_locked() {
    using namespace std::chrono;
    if (!broken_ || restoring_ || !connector_ || !options_.reconnect) return;
    const auto start = steady_clock::now();
    if (start < next_series_) return;
    const auto deadline = start + milliseconds(options_.connect_timeout_ms);
    int attempts = 0;
    Status last;
    for (int delay_ms = 10;; delay_ms = std::min(delay_ms * 2, options_.reconnect_max_delay_ms)) {
        ++attempts;
        const auto left_ms = duration_cast<milliseconds>(deadline - steady_clock::now()).count();
        last = reconnect_once(static_cast<int>(std::max<long long>(left_ms, 1)));
        if (last || steady_clock::now() + milliseconds(delay_ms) >= deadline) break;
        std::this_thread::sleep_for(milliseconds(delay_ms));
    }
    const auto connected = steady_clock::now();
    const long long took_ms = duration_cast<milliseconds>(connected - start).count();
    RestoreReport report;
    if (last) restore_objects_locked(&report);
    const long long restore_ms = duration_cast<milliseconds>(steady_clock::now() - connected).count();
    if (!last || broken_) {
        next_series_ = steady_clock::now() + milliseconds(options_.reconnect_max_delay_ms);
        log(GGML_LOG_LEVEL_ERROR, "could not reconnect to %s: %d attempt(s) in %lld ms, the last: %s; calls fail "
            "until a later attempt succeeds", endpoint_.c_str(), attempts, took_ms,
            last ? "the connection was lost again while restoring" : last.message().c_str());
        return;
    }
    ++reconnections_;
    last_restore_intact_ = report.intact();
    log(GGML_LOG_LEVEL_WARN, "reconnected to %s after %d attempt(s) in %lld ms, restored %zu objects in %lld ms; %s",
        endpoint_.c_str(), attempts, took_ms, report.restored, restore_ms, lost_summary(report).c_str());
}

RemoteSession::Counters RemoteSession::counters() {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    return counters_;
}

Status RemoteSession::run_locked(CommandId id, Exchange &x) {
    if (broken_) return error(Code::disconnected, "no connection to " + endpoint_);
    ++counters_.commands;
    const uint64_t sequence = ++sent_;
    counters_.bytes_sent += sizeof(FrameHeader) + x.fixed.size + x.tail.size;
    if (x.expect_reply && x.deferred == nullptr) ++counters_.round_trips;
    Status status;
    const bool small = x.send_fd < 0 && x.fixed.size + x.tail.size <= kQueuedFrameLimit;
    if (small) {
        queue(id, x);
        const bool waits = x.expect_reply && x.deferred == nullptr;
        // A deferred call goes out now, so that its reply is on its way by the time it is read.
        if (!waits && !x.send_now && x.deferred == nullptr && queued_.size() < kQueueFlushSize) return Status::success();
        status = flush_queue();
    } else {
        // Descriptors must ride on their own frame's first byte: the queue goes first.
        status = flush_queue();
        if (status) {
            FrameHeader header;
            header.command = static_cast<uint16_t>(id);
            status = stream_.send(header, {x.fixed, x.tail}, &x.send_fd, x.send_fd >= 0 ? 1 : 0);
        }
    }
    if (!status) return lost(status);
    if (!x.expect_reply) return Status::success();
    if (x.deferred != nullptr) {
        pending_.push_back({id, sequence, x});
        pending_.back().exchange.fixed = {};  // the request was sent; only the reply's places remain
        return Status::success();
    }
    // Replies come in order: the pending ones are first.
    status = read_pending_replies();
    if (!status) return status;
    return read_reply(id, sequence, x);
}

}  // namespace ggml_remote::guest
