#include "guest/session/call_pipeline.h"

#include <algorithm>
#include <cstring>

#include "guest/log.h"
#include "protocol/printable.h"

namespace ggml_remote::guest {

using namespace protocol;

namespace {

// Frames up to this size are copied into the queue; larger ones (tensor data) go
// out directly after it.
constexpr size_t kQueuedFrameLimit = 256 * 1024;
// A queue this full is sent without waiting for a call.
constexpr size_t kQueueFlushSize = 1024 * 1024;

}  // namespace

void CallPipeline::begin(FramedStream stream) {
    stream_ = std::move(stream);
    broken_ = false;
    queued_.clear();
    pending_.clear();
    graphs_.clear();
    finished_ = sent_;
    last_compute_ = sent_;
}

void CallPipeline::drop_connection() {
    broken_ = true;
    stream_.close();
}

void CallPipeline::set_compute_threads(int threads) {
    compute_threads_ = threads;
    stream_.set_compute_threads(threads);
}

void CallPipeline::reapply_compute_threads() {
    if (compute_threads_ > 0) stream_.set_compute_threads(compute_threads_);
}

Status CallPipeline::lost(const Status &cause) {
    if (!broken_) {
        broken_ = true;
        stream_.close();
        log(GGML_LOG_LEVEL_ERROR, "lost the connection to ggml-remote-server at %s: %s; %s", endpoint_.c_str(),
            cause.message().c_str(), reconnects_ ? "reconnecting" : "its devices fail from now on");
    }
    return cause;
}

Status CallPipeline::run(CommandId id, Exchange &x) {
    if (broken_) return error(Code::disconnected, "no connection to " + endpoint_);
    ++counters_.commands;
    const uint64_t sequence = ++sent_;
    counters_.bytes_sent += sizeof(FrameHeader) + x.fixed.size + x.tail.size;
    if (x.expect_reply && x.deferred == nullptr) ++counters_.round_trips;
    if (Status status = send(id, x); !status) return lost(status);
    if (!x.expect_reply) return Status::success();
    if (x.deferred != nullptr) {
        pending_.push_back({id, sequence, x});
        pending_.back().exchange.fixed = {};  // the request was sent; only the reply's places remain
        return Status::success();
    }
    // Replies come in order: the pending ones are first.
    Status status = read_pending_replies();
    if (!status) return status;
    return read_reply(id, sequence, x);
}

Status CallPipeline::send(CommandId id, Exchange &x) {
    const bool small = x.send_fd < 0 && x.fixed.size + x.tail.size <= kQueuedFrameLimit;
    if (!small) {
        // Descriptors must ride on their own frame's first byte: the queue goes first.
        Status status = flush_queue();
        if (!status) return status;
        FrameHeader header;
        header.command = static_cast<uint16_t>(id);
        return stream_.send(header, {x.fixed, x.tail}, &x.send_fd, x.send_fd >= 0 ? 1 : 0);
    }
    queue(id, x);
    const bool waits = x.expect_reply && x.deferred == nullptr;
    // A deferred call goes out now, so that its reply is on its way by the time it is read.
    if (!waits && !x.send_now && x.deferred == nullptr && queued_.size() < kQueueFlushSize) return Status::success();
    return flush_queue();
}

void CallPipeline::queue(CommandId id, const Exchange &x) {
    FrameHeader header;
    header.command = static_cast<uint16_t>(id);
    header.payload_size = x.fixed.size + x.tail.size;
    append_pod(queued_, header);
    queued_.insert(queued_.end(), x.fixed.data, x.fixed.data + x.fixed.size);
    if (x.tail.size > 0) queued_.insert(queued_.end(), x.tail.data, x.tail.data + x.tail.size);
}

Status CallPipeline::flush_queue() {
    if (queued_.empty()) return Status::success();
    Status status = stream_.send_frames(ByteView(queued_));
    queued_.clear();
    return status;
}

Status CallPipeline::read_reply(CommandId id, uint64_t sequence, Exchange &x) {
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
Status CallPipeline::read_refusal(const FrameHeader &header) {
    if (header.payload_size > kMaxReplyReason) {
        return lost(
            error(Code::error, "protocol error: a refusal of " + std::to_string(header.payload_size) + " bytes"));
    }
    std::string message(static_cast<size_t>(header.payload_size), '\0');
    Status status = stream_.receive(message.data(), message.size());
    if (!status) return lost(status);
    const bool known = header.status > 0 && header.status < static_cast<int32_t>(Code::disconnected);
    constexpr size_t kShownReason = 4096;
    if (message.size() > kShownReason) message.resize(kShownReason);
    return error(known ? static_cast<Code>(header.status) : Code::error, one_line(message));
}

Status CallPipeline::read_reply_payload(CommandId id, const FrameHeader &header, Exchange &x) {
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

Status CallPipeline::read_pending_replies() {
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

Status CallPipeline::compute_graph(uint64_t backend, const std::vector<uint8_t> &graph, Completion completion,
                                   GraphTicket *ticket) {
    const GraphCache::Choice choice = graphs_.choose(graph);
    if (ticket != nullptr) *ticket = {choice.slot, choice.stamp};
    // A graph new to the host is checked there before it runs (the op rules, the
    // device's supports_op): waiting for it makes a refusal fail this compute, as
    // its caller sees it, not a later read. Replays, every token after the first,
    // keep the caller's choice.
    if (choice.mode != kGraphReplay) completion = Completion::waits;
    return send_compute(backend, choice.slot, choice.mode, choice.mode == kGraphReplay ? ByteView() : ByteView(graph),
                        completion);
}

Status CallPipeline::compute_graph_again(uint64_t backend, const GraphTicket &ticket, Completion completion,
                                         bool *replayed) {
    *replayed = graphs_.holds(ticket.slot, ticket.stamp);
    if (!*replayed) return Status::success();
    return send_compute(backend, ticket.slot, kGraphReplay, {}, completion);
}

Status CallPipeline::send_compute(uint64_t backend, uint32_t slot, GraphMode mode, ByteView graph,
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
    Status status = run(CommandId::graph_compute, x);
    last_compute_ = sent_;
    if (!status || completion == Completion::returns_at_once) return status;
    return synchronize(backend, last_compute_);
}

Status CallPipeline::synchronize(uint64_t backend, uint64_t up_to) {
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
    return run(CommandId::synchronize, x);
}

Status CallPipeline::free_buffer(uint64_t buffer) {
    graphs_.clear();  // in the same order as the host sees the free
    if (broken_) return error(Code::disconnected, "no connection to " + endpoint_);
    BufferFree::Request request{buffer};
    Exchange x;
    x.fixed = ByteView(&request, sizeof(request));
    return run(CommandId::buffer_free, x);
}

}  // namespace ggml_remote::guest
