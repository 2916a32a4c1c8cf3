// RemoteSession: the guest's connection to one server, and the one generic way
// to make a call on it. It composes the session's parts, each in its own file:
//   connector.h     a new connection to an endpoint, and why one failed
//   handshake.h     the hello: what the guest asks for and the server grants
//   calls.h         call<Cmd>() / post<Cmd>(), described once for every command
//   call_pipeline.h requests out and replies in, in order
//   reconnector.h   a lost connection made again, and its objects restored
// and holds the one lock that serialises callers: replies come back in order.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "guest/guest_options.h"
#include "guest/session/call_pipeline.h"
#include "guest/session/calls.h"
#include "guest/session/connector.h"
#include "guest/session/handshake.h"
#include "guest/session/reconnector.h"
#include "guest/session/restorable.h"
#include "transport/connection.h"
#include "transport/endpoint.h"
#include "transport/ivshmem_region.h"

namespace ggml_remote::guest {

class RemoteSession : public SessionCalls {
  public:
    using Connector = guest::Connector;
    template <class Cmd>
    using Call = guest::Call<Cmd>;
    using Counters = CallPipeline::Counters;
    // Names a computed graph for compute_graph_again.
    using GraphTicket = CallPipeline::GraphTicket;
    // Whether a compute call returns at once (a failure on the host comes back with
    // the next reply) or once the host is done, as synchronize() would. A graph
    // new to the host always waits (see compute_graph).
    using Completion = CallPipeline::Completion;

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

    // Computes an encoded graph on a host backend: sent once, then named by its
    // slot while the host keeps it. `ticket` names the graph for compute_graph_again.
    Status compute_graph(uint64_t backend, const std::vector<uint8_t> &graph, Completion completion,
                         GraphTicket *ticket = nullptr);
    // Computes the graph a ticket names again, if the host still keeps it
    // (*replayed false otherwise: nothing was sent, encode it and compute_graph).
    Status compute_graph_again(uint64_t backend, const GraphTicket &ticket, Completion completion, bool *replayed);
    // Waits for the host to finish the computes sent so far and reads the replies
    // of run_later() calls; a round trip only when one of those is outstanding.
    Status synchronize(uint64_t backend);
    // A compute of `backend` that returned at once over shared memory (a backend
    // in a tensor-parallel group): the buffers this process maps may still change.
    void note_compute_in_flight(uint64_t backend);
    // Waits for such a compute before this process touches shared memory itself.
    Status finish_compute_in_flight();
    // Events: a mark is the position of the last command sent; the host works in
    // order, so everything up to a mark is done once any later reply has come.
    uint64_t mark();
    Status wait_for_mark(uint64_t mark, uint64_t backend);
    // Frees a host buffer; the host then forgets its kept graphs, and so do we.
    Status free_buffer(uint64_t buffer) override;

    // Traffic so far (GGML_REMOTE_STATS=1 prints it at exit).
    Counters counters();
    void count_mapped_file(uint64_t bytes) override;

    const std::string &endpoint() const { return endpoint_; }
    // The plugin's settings, as the session was opened with them.
    const GuestOptions &options() const { return options_; }
    uint32_t device_count() const { return terms_.device_count; }
    // Whether the server granted shared-memory buffers (shm: endpoints).
    bool shared_memory() const { return terms_.shared_memory; }
    // The server keeps a weight store for this session (WeightLookup).
    bool weight_store() const { return terms_.weight_store; }
    bool model_library() const { return terms_.model_library; }
    // Whether buffers in CPU memory live in the ivshmem region's heap.
    bool region_heap() const { return terms_.region_heap; }
    // Whether the session may join tensor-parallel groups (CommJoin).
    bool peer_exchange() const { return terms_.peer_exchange; }
    // Whether the session may join tensor-parallel groups across machines (CommJoinLinks).
    bool peer_links() const { return terms_.peer_links; }
    // Whether the server keeps the session alive while it computes (kSessionKeepAlive).
    bool keeps_alive() const { return terms_.keeps_alive; }
    // Where the buffer at `offset` of the region, `size` bytes, is mapped here;
    // an error when the server named a range outside the region's heap.
    Status region_bytes(uint64_t offset, uint64_t size, void **at) const;

  private:
    RemoteSession(std::string endpoint, const GuestOptions &options, const HandshakeAsk &ask)
        : endpoint_(std::move(endpoint)),
          options_(options),
          ask_(ask),
          pipeline_(endpoint_),
          reconnector_(endpoint_, options, ask) {}
    // open() for an ivshmem endpoint: a VM's session, which never reconnects.
    static Status open_in_region(const Endpoint &endpoint, const GuestOptions &options,
                                 std::unique_ptr<RemoteSession> *session);
    // Performs the first handshake on `stream`; the session is handed out once it passed.
    static Status begin(std::unique_ptr<RemoteSession> session, FramedStream stream,
                        std::unique_ptr<RemoteSession> *out);
    // A call from outside: takes the lock, and around the call, makes a lost
    // connection again (Reconnector), all under the lock, so that no other call
    // comes in while objects are restored.
    Status run(protocol::CommandId id, Exchange &exchange) override;

    // One call at a time: replies come back in order. A plain mutex: restoring
    // objects, which happens under it, calls through pipeline_ directly.
    std::mutex mutex_;
    std::string endpoint_;
    GuestOptions options_;
    HandshakeAsk ask_;
    // wait_for_mark's work, with mutex_ held.
    Status wait_for_mark_locked(uint64_t mark, uint64_t backend);

    SessionTerms terms_;
    uint64_t in_flight_backend_ = 0;       // note_compute_in_flight's, until finished
    std::shared_ptr<GuestRegion> region_;  // ivshmem: the region the session runs in
    CallPipeline pipeline_;
    Reconnector reconnector_;
};

}  // namespace ggml_remote::guest
