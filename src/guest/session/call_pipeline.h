// The call pipeline: requests out and replies in, in order, over one connection.
// One-way commands wait in a queue and leave with the next call; replies are read
// through their command's ReplyRule, with the descriptors that come with them;
// run_later() replies are read when they are due; computes are counted so that a
// wait knows what the host has finished.
#pragma once

#include <deque>
#include <string>
#include <vector>

#include "guest/graph_cache.h"
#include "guest/session/calls.h"
#include "transport/connection.h"

namespace ggml_remote::guest {

// Not locked: RemoteSession holds its lock around every use, and an object being
// restored, which holds that lock already, calls the pipeline directly.
class CallPipeline : public SessionCalls {
  public:
    // Traffic so far (GGML_REMOTE_STATS=1 prints it at exit).
    struct Counters {
        uint64_t commands = 0;
        uint64_t round_trips = 0;
        uint64_t bytes_sent = 0;
        uint64_t bytes_received = 0;
        uint64_t graphs_sent = 0;
        uint64_t graphs_replayed = 0;
        uint64_t file_bytes_mapped = 0;  // model weights the host mapped instead of receiving
    };
    // Names a graph the host keeps: its slot, while the slot still holds it.
    struct GraphTicket {
        uint32_t slot = 0;
        uint64_t stamp = 0;
    };
    // Whether a compute call returns at once (a failure on the host comes back with
    // the next reply) or once the host is done, as synchronize() would.
    enum class Completion { returns_at_once, waits };

    // `endpoint` names the server in messages.
    explicit CallPipeline(std::string endpoint) : endpoint_(std::move(endpoint)) {}

    // Calls go over `stream` from now on; nothing of an earlier connection is
    // awaited or kept any more.
    void begin(FramedStream stream);
    // The stream, for the handshake on a new connection.
    FramedStream &stream() { return stream_; }
    // A new connection that failed its handshake: closed, and calls fail at once.
    void drop_connection();
    // The connection failed; every later call fails at once until begin().
    bool broken() const { return broken_; }
    // Whether a lost connection is made again: the log line of the loss says so.
    void set_reconnects(bool reconnects) { reconnects_ = reconnects; }

    Status run(protocol::CommandId id, Exchange &exchange) override;
    Status free_buffer(uint64_t buffer) override;
    void count_mapped_file(uint64_t bytes) override { counters_.file_bytes_mapped += bytes; }

    // A graph new to the host always waits (see the .cpp).
    Status compute_graph(uint64_t backend, const std::vector<uint8_t> &graph, Completion completion,
                         GraphTicket *ticket);
    // The graph a ticket names, if the host still keeps it (*replayed false otherwise).
    Status compute_graph_again(uint64_t backend, const GraphTicket &ticket, Completion completion, bool *replayed);
    // Reads the replies of run_later() calls, and waits for the host to finish the
    // commands up to `up_to`: a round trip only when one of those is outstanding.
    Status synchronize(uint64_t backend, uint64_t up_to);
    // The position of the last command sent, and of the last compute.
    uint64_t mark() const { return sent_; }
    uint64_t last_compute() const { return last_compute_; }
    // Whether everything up to `mark` is done and no reply is outstanding.
    bool passed(uint64_t mark) const { return finished_ >= mark && pending_.empty(); }

    // The threads the host's compute now uses (SpinPolicy::set_compute_threads),
    // kept for a new connection's stream (reapply_compute_threads).
    void set_compute_threads(int threads);
    void reapply_compute_threads();
    Counters counters() const { return counters_; }

  private:
    // A reply not read yet (run_later), in the order the host sends them.
    struct PendingReply {
        protocol::CommandId id;
        uint64_t sequence;
        Exchange exchange;
    };
    // Sends the request: queued when small, and the queue leaves when it must.
    Status send(protocol::CommandId id, Exchange &exchange);
    Status read_reply(protocol::CommandId id, uint64_t sequence, Exchange &exchange);
    // The reply's payload once its header passed: the fixed part and the tail, checked.
    Status read_reply_payload(protocol::CommandId id, const protocol::FrameHeader &header, Exchange &exchange);
    // A refusal's reason, read (bounded) and made printable.
    Status read_refusal(const protocol::FrameHeader &header);
    // Reads every pending reply; false only when the connection is lost.
    Status read_pending_replies();
    Status send_compute(uint64_t backend, uint32_t slot, protocol::GraphMode mode, protocol::ByteView graph,
                        Completion completion);
    void queue(protocol::CommandId id, const Exchange &exchange);
    Status flush_queue();
    // The connection failed: closed, logged once, and `cause` returned.
    Status lost(const Status &cause);

    std::string endpoint_;
    FramedStream stream_;
    bool broken_ = false;
    bool reconnects_ = false;
    int compute_threads_ = 0;
    // One-way commands wait here and leave with the next call, in one system call:
    // the inputs of a token and its compute then cost no extra trips.
    std::vector<uint8_t> queued_;
    GraphCache graphs_;
    std::deque<PendingReply> pending_;
    // Commands are numbered as they are sent; a reply to command n means the host
    // has finished every command up to n.
    uint64_t sent_ = 0;
    uint64_t finished_ = 0;
    uint64_t last_compute_ = 0;
    Counters counters_;
};

}  // namespace ggml_remote::guest
