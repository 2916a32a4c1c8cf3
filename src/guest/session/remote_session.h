// RemoteSession: the guest's connection to one server, and the one generic way
// to make a call on it.
#pragma once

#include "guest/graph_cache.h"
#include "guest/session/connector.h"
#include "guest/session/handshake.h"
#include "guest/guest_options.h"
#include "protocol/commands.h"
#include "protocol/reply_rules.h"
#include "transport/connection.h"
#include "transport/endpoint.h"
#include "transport/ivshmem_region.h"

#include <chrono>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

namespace ggml_remote::guest {

// What a reconnection put back, and what it could not.
struct RestoreReport {
    size_t restored = 0;             // host objects made again
    std::vector<std::string> lost;   // buffers whose contents only the host held
    bool scratch_lost = false;       // compute buffers: the graph in flight cannot run again
    bool intact() const { return lost.empty() && !scratch_lost; }
};

// A guest object that names host objects (a buffer, a backend). On a new
// connection it makes them again under the same guest-side identity, and puts
// back what it can of their contents.
class Restorable {
  public:
    virtual ~Restorable() = default;
    virtual void restore(RestoreReport *report) = 0;
};

class RemoteSession {
  public:
    using Connector = guest::Connector;

    // Connects (within options.connect_timeout_ms) and performs the handshake.
    static Status open(const Endpoint &endpoint, const GuestOptions &options, std::unique_ptr<RemoteSession> *session);
    // Performs the handshake on a stream already connected to a server (plain
    // protocol: no TLS); `name` names the server in messages.
    static Status start(FramedStream stream, const std::string &name, const GuestOptions &options,
                        std::unique_ptr<RemoteSession> *session);

    // How a lost connection is made again (GuestOptions::reconnect); none: it stays lost.
    void set_connector(Connector connector);
    // Objects made again, in the order added, on every new connection.
    void add_restorable(Restorable *object);
    void remove_restorable(Restorable *object);
    // Counts the connections made again; with last_restore_intact(), a caller
    // whose call failed with the connection knows whether running it again (with
    // handles read afresh) is sound: nothing it could read was lost.
    uint64_t reconnections();
    bool last_restore_intact();

    // The threads the host's compute now uses: whether waiting behind it may spin
    // (SpinPolicy::set_compute_threads).
    void set_compute_threads(int threads);

    template <class Cmd>
    class Call;
    // A command with a reply, described in words and then run:
    //   session.call<BufferAlloc>(request).reply(&reply).receive_fd(&memory_file).run();
    // Everything but the request is optional; the description lives on the stack.
    template <class Cmd>
    Call<Cmd> call(const typename Cmd::Request &request) {
        static_assert(!Cmd::one_way, "use post() for one-way commands");
        return Call<Cmd>(this, request);
    }

    // A one-way command: no reply; a failure is reported with the next reply.
    template <class Cmd>
    Status post(const typename Cmd::Request &request, protocol::ByteView request_tail = {}) {
        static_assert(Cmd::one_way, "use call() for commands with a reply");
        Exchange exchange;
        exchange.fixed = protocol::ByteView(&request, sizeof(request));
        exchange.tail = request_tail;
        return run(Cmd::id, exchange);
    }

    // Computes an encoded graph on a host backend: sent once, then named by its
    // slot while the host keeps it. `ticket` names the graph for compute_graph_again.
    struct GraphTicket {
        uint32_t slot = 0;
        uint64_t stamp = 0;
    };
    // Whether a compute call returns at once (a failure on the host comes back with
    // the next reply) or once the host is done, as synchronize() would. A graph
    // new to the host always waits (see compute_graph).
    enum class Completion { returns_at_once, waits };
    Status compute_graph(uint64_t backend, const std::vector<uint8_t> &graph, Completion completion,
                         GraphTicket *ticket = nullptr);
    // Computes the graph a ticket names again, if the host still keeps it
    // (*replayed false otherwise: nothing was sent, encode it and compute_graph).
    Status compute_graph_again(uint64_t backend, const GraphTicket &ticket, Completion completion, bool *replayed);
    // Waits for the host to finish the computes sent so far and reads the replies
    // of run_later() calls; a round trip only when one of those is outstanding.
    Status synchronize(uint64_t backend);
    // Events: a mark is the position of the last command sent; the host works in
    // order, so everything up to a mark is done once any later reply has come.
    uint64_t mark();
    Status wait_for_mark(uint64_t mark, uint64_t backend);
    // Frees a host buffer; the host then forgets its kept graphs, and so do we.
    Status free_buffer(uint64_t buffer);

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
    Counters counters();
    void count_mapped_file(uint64_t bytes) {
        std::lock_guard<std::recursive_mutex> lock(mutex_);
        counters_.file_bytes_mapped += bytes;
    }

    const std::string &endpoint() const { return endpoint_; }
    // The plugin's settings, as the session was opened with them.
    const GuestOptions &options() const { return options_; }
    uint32_t device_count() const { return terms_.device_count; }
    // Whether the server granted shared-memory buffers (shm: endpoints).
    bool shared_memory() const { return terms_.shared_memory; }
    // The server keeps a weight store for this session (WeightLookup).
    bool weight_store() const { return terms_.weight_store; }
    // Whether buffers in CPU memory live in the ivshmem region's heap.
    bool region_heap() const { return terms_.region_heap; }
    // Where the buffer at `offset` of the region, `size` bytes, is mapped here;
    // an error when the server named a range outside the region's heap.
    Status region_bytes(uint64_t offset, uint64_t size, void **at) const;

  private:
    RemoteSession(std::string endpoint, const GuestOptions &options)
        : endpoint_(std::move(endpoint)), options_(options) {}
    // open() for an ivshmem endpoint: a VM's session, which never reconnects.
    static Status open_in_region(const Endpoint &endpoint, const GuestOptions &options,
                                 std::unique_ptr<RemoteSession> *session);
    // The first handshake; `shared_memory` asks for shared buffers (shm: endpoints).
    Status handshake(bool shared_memory, bool region_heap = false);
    // One request and, unless one-way, its reply.
    struct Exchange {
        protocol::ByteView fixed;
        protocol::ByteView tail;
        int send_fd = -1;
        bool expect_reply = false;
        void *reply = nullptr;
        size_t reply_size = 0;
        std::vector<uint8_t> *reply_tail = nullptr;
        void *tail_into = nullptr;
        size_t tail_into_size = 0;
        UniqueFd *received_fd = nullptr;
        bool send_now = false;  // a one-way command that should not wait in the queue
        const char *deferred = nullptr;  // run_later(): what to name in a failure
        // The command's ReplyRule, bound to a copy of its request (bind_rule): a
        // reply is read only through one.
        struct Rule {
            uint64_t max_tail = 0;
            Status (*check)(const uint8_t *request, const uint8_t *reply, uint64_t tail_size) = nullptr;
            alignas(8) uint8_t request[protocol::kMaxRequestBytes] = {};
        };
        Rule rule = {};
    };
    // Makes `x` wait for Cmd's reply and read it through ReplyRule<Cmd>; x.tail is set.
    template <class Cmd>
    static void bind_rule(Exchange &x, const typename Cmd::Request &request);
    template <class Cmd>
    static Status check_reply(const uint8_t *request, const uint8_t *reply, uint64_t tail_size);
    // A reply not read yet (run_later), in the order the host sends them.
    struct PendingReply {
        protocol::CommandId id;
        uint64_t sequence;
        Exchange exchange;
    };
    Status run(protocol::CommandId id, Exchange &exchange);  // takes the lock
    Status run_locked(protocol::CommandId id, Exchange &exchange);
    Status read_reply(protocol::CommandId id, uint64_t sequence, Exchange &exchange);
    // The reply's payload once its header passed: the fixed part and the tail, checked.
    Status read_reply_payload(protocol::CommandId id, const protocol::FrameHeader &header, Exchange &exchange);
    // A refusal's reason, read (bounded) and made printable.
    Status read_refusal(const protocol::FrameHeader &header);
    // Reads every pending reply; false only when the connection is lost.
    Status read_pending_replies();
    Status synchronize_locked(uint64_t backend, uint64_t up_to);
    Status send_compute(uint64_t backend, uint32_t slot, protocol::GraphMode mode, protocol::ByteView graph,
                        Completion completion);
    void queue(protocol::CommandId id, const Exchange &exchange);
    Status flush_queue();
    Status lost(const Status &cause);
    // After a call: a lost connection is made again (a series of attempts with
    // back-off, bounded by the connect timeout) and its objects restored.
    void recover_locked();
    Status reconnect_once(int timeout_ms);
    void restore_objects_locked(RestoreReport *report);
    // Before a call: when the connection is lost, tries to make it again, and
    // fails the call either way: its request may name the old connection's handles.
    Status refuse_if_lost_locked();

    // One call at a time: replies come back in order. Recursive: restoring
    // objects on a new connection makes calls of its own.
    std::recursive_mutex mutex_;
    FramedStream stream_;
    Connector connector_;
    std::vector<Restorable *> restorables_;
    HandshakeAsk ask_;  // asked again on every new connection
    bool restoring_ = false;
    uint64_t reconnections_ = 0;
    bool last_restore_intact_ = true;
    int compute_threads_ = 0;
    std::chrono::steady_clock::time_point next_series_{};
    std::string endpoint_;
    GuestOptions options_;
    SessionTerms terms_;
    std::shared_ptr<GuestRegion> region_;  // ivshmem: the region the session runs in
    bool broken_ = false;  // the connection failed; every later call fails at once
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

// One call<Cmd>() being described: a copy of the request and a few pointers, on
// the caller's stack. Each step returns the description, and dropping it unrun
// is a warning. Every place named must stay valid until the reply is read
// (run_later: until synchronize() or the next call).
template <class Cmd>
class [[nodiscard]] RemoteSession::Call {
  public:
    using Reply = typename Cmd::Reply;

    // Bytes that follow the request (tensor data, an op's signature).
    [[nodiscard]] Call &tail(protocol::ByteView bytes) { return set(&Exchange::tail, bytes); }
    // A descriptor that goes along with the request.
    [[nodiscard]] Call &send_fd(int fd) { return set(&Exchange::send_fd, fd); }
    // Where the reply's fixed part goes (else it is read and dropped).
    [[nodiscard]] Call &reply(Reply *into) { return set(&Exchange::reply, static_cast<void *>(into)); }
    // Where the reply's tail goes, whatever its size.
    [[nodiscard]] Call &reply_tail(std::vector<uint8_t> *into) { return set(&Exchange::reply_tail, into); }
    // Where the reply's tail goes, read in place when it is exactly `size` bytes;
    // another size is a protocol error, unless reply_tail() takes it.
    [[nodiscard]] Call &reply_tail_into(void *into, size_t size) {
        exchange_.tail_into_size = size;
        return set(&Exchange::tail_into, into);
    }
    // Where a descriptor that comes with the reply lands.
    [[nodiscard]] Call &receive_fd(UniqueFd *into) { return set(&Exchange::received_fd, into); }

    // Sends the call and waits for its reply.
    Status run() {
        exchange_.fixed = protocol::ByteView(&request_, sizeof(request_));
        bind_rule<Cmd>(exchange_, request_);
        return session_->run(Cmd::id, exchange_);
    }
    // Sends the call; its reply is read later (by synchronize() or the next call),
    // so the guest goes on while the host works: ggml's asynchronous get and copy.
    // A failure is logged then, naming `what`.
    Status run_later(const char *what) {
        exchange_.deferred = what;
        return run();
    }

  private:
    friend class RemoteSession;
    Call(RemoteSession *session, const typename Cmd::Request &request) : session_(session), request_(request) {}
    template <class Field, class Value>
    Call &set(Field Exchange::*field, Value value) {
        exchange_.*field = value;
        return *this;
    }

    RemoteSession *session_;
    typename Cmd::Request request_;
    Exchange exchange_;  // its `fixed` is set when run: the description may have been copied
};

template <class Cmd>
void RemoteSession::bind_rule(Exchange &x, const typename Cmd::Request &request) {
    using Reply = typename Cmd::Reply;
    static_assert(sizeof(request) <= protocol::kMaxRequestBytes, "raise kMaxRequestBytes");
    static_assert(std::is_empty<Reply>::value || sizeof(Reply) <= protocol::kMaxReplyBytes, "raise kMaxReplyBytes");
    x.expect_reply = true;
    x.reply_size = std::is_empty<Reply>::value ? 0 : sizeof(Reply);
    x.rule.max_tail = protocol::ReplyRule<Cmd>::max_tail(request, x.tail.size);
    x.rule.check = &check_reply<Cmd>;
    std::memcpy(x.rule.request, &request, sizeof(request));
}

template <class Cmd>
Status RemoteSession::check_reply(const uint8_t *request_bytes, const uint8_t *reply_bytes, uint64_t tail_size) {
    typename Cmd::Request request;
    std::memcpy(&request, request_bytes, sizeof(request));
    typename Cmd::Reply reply{};
    if constexpr (!std::is_empty<typename Cmd::Reply>::value) std::memcpy(&reply, reply_bytes, sizeof(reply));
    return protocol::ReplyRule<Cmd>::check(request, reply, tail_size);
}

}  // namespace ggml_remote::guest
