// Session: everything one guest owns on the host, and the dispatch of its commands.
// One session runs in one worker process (see worker.h).
#pragma once

#include <ggml-backend.h>

#include <array>
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "host/common/refusals.h"
#include "host/common/session_figures.h"
#include "host/common/session_limits.h"
#include "host/common/status_board.h"
#include "host/worker/graph/graph_builder.h"
#include "host/worker/session/core_schedule.h"
#include "host/worker/session/dispatcher.h"
#include "host/worker/session/frame_recorder.h"
#include "host/worker/session/graph_slots.h"
#include "host/worker/session/handle_table.h"
#include "host/worker/session/idle_compute.h"
#include "host/worker/session/region_heap.h"
#include "host/worker/session/watchdog.h"
#include "host/worker/session/weight_upload.h"
#include "host/worker/weights/store_fill.h"
#include "host/worker/weights/weight_repack.h"
#include "protocol/commands.h"
#include "protocol/tensor_codec.h"
#include "transport/connection.h"
#include "transport/peer_exchange.h"
#include "transport/peer_links.h"
#include "transport/shared_memory.h"
#include "transport/shared_ring.h"

namespace ggml_remote::host {

// Per-session totals, for the disconnect log line: the session's figures
// (session_figures.h) and what only the log line tells.
struct SessionCounters : SessionFigureValues {
    uint64_t weights_repacked = 0;
};

class Session {
  public:
    Session(std::vector<ggml_backend_dev_t> devices, SessionLimits limits);
    ~Session();
    Session(const Session &) = delete;
    Session &operator=(const Session &) = delete;

    // Lets the guest ask for shared-memory buffers: only when it is on a unix socket.
    void allow_shared_memory() { shared_memory_allowed_ = true; }
    // An ivshmem session: buffers in CPU memory may live in the region's heap
    // [heap_offset, +heap_size), for a guest that asks (kSessionRegionHeap).
    void use_region_heap(std::shared_ptr<const Mapping> region, uint64_t heap_offset, uint64_t heap_size);

    // Offers the guest the weight store, through the channel to its owner
    // (store_owner.h), for the tenant the listener named.
    Status use_weight_store(UniqueFd channel) {
        Status status = store_fill_.open(std::move(channel));
        if (status) weight_repack_.share_images(&store_fill_);
        return status;
    }
    // The server has a model library (--models): with the store, the guest is told
    // to look up weights of files it never loaded too (kSessionModelLibrary).
    void offer_model_library() { model_library_offered_ = true; }
    // Lets the guest join tensor-parallel groups across machines (CommJoinLinks),
    // through the channel to the listener's peer broker (peer_channel.h).
    void use_peer_channel(UniqueFd channel) { peer_channel_ = std::move(channel); }
    // --handshake-timeout counts from `connected` (the worker's start) instead of
    // serve()'s: the time the worker spent looking at the first byte counts too.
    void count_handshake_from(std::chrono::steady_clock::time_point connected) { connected_at_ = connected; }
    const StoreFillCounters &store_counters() const { return store_fill_.counters(); }
    // Test-only: waits until the store has checked and named every new entry.
    void wait_for_store_for_testing() { store_fill_.store().wait_for_commits(); }

    // Publishes this session's counters in `slot` after every command, and answers
    // status queries from `board` when `may_query` (a trusted local peer).
    void attach_status(const StatusBoard *board, SessionSlot *slot, bool may_query, uint32_t max_sessions) {
        status_board_ = board;
        status_slot_ = slot;
        status_query_allowed_ = may_query;
        max_sessions_ = max_sessions;
        cores_.attach(board, slot);
        publish_status();
    }

    // Tells `log` of each graph compute that failed (a refused graph, a backend
    // error), so that the server's log names the session: the first few of a
    // session, then one line saying that further ones go untold.
    using FailureLog = std::function<void(const std::string &message)>;
    void log_compute_failures(FailureLog log) { compute_failure_log_ = std::move(log); }

    // Writes every frame serve() receives to `recorder` (GGML_REMOTE_RECORD_DIR).
    void record_frames(FrameRecorder *recorder) { recorder_ = recorder; }

    // Test-only: called with each graph that passed validation, just before it is
    // computed; when it returns false the compute is skipped (as a success). The
    // dispatcher fuzzer uses it to keep out graphs whose data-dependent indexes
    // ggml would abort on (a documented, contained gap, see docs/SECURITY.md).
    using ComputeGateForTesting = std::function<bool(const ggml_cgraph *graph)>;
    void set_compute_gate_for_testing(ComputeGateForTesting gate) { compute_gate_for_testing_ = std::move(gate); }
    // Test-only: called with each graph right after it was computed (the write-set
    // oracle of the fuzzers compares the buffers with what the gate saw).
    using ComputeCheckForTesting = std::function<void(const ggml_cgraph *graph)>;
    void set_compute_check_for_testing(ComputeCheckForTesting check) { compute_check_for_testing_ = std::move(check); }

    // Serves the guest until it disconnects (success) or breaks the protocol
    // (the returned status says how). The session's objects stay until destruction.
    Status serve(FramedStream &stream);

    // Handles one decoded frame; `reply` is filled for commands that reply.
    // Exposed for in-process tests and fuzzing.
    // `fds` are the descriptors that came with the frame; handlers take what they expect.
    Status handle(uint16_t command, protocol::ByteView payload, ReplyFrame *reply,
                  std::vector<UniqueFd> *fds = nullptr);

    SessionCounters counters() const;
    bool handshaken() const { return handshaken_; }
    const SessionLimits &limits() const { return limits_; }
    uint64_t memory_in_use() const { return memory_in_use_; }
    uint64_t mapped_file_bytes() const { return mapped_file_bytes_; }
    size_t buffer_count() const { return buffers_.size(); }
    size_t backend_count() const { return backends_.size(); }
    size_t weight_copies() const { return weight_repack_.copies(); }
    const CoreStats &core_stats() const { return cores_.stats(); }

  private:
    struct BufferDeleter {
        void operator()(ggml_backend_buffer *buffer) const { ggml_backend_buffer_free(buffer); }
    };
    struct BackendDeleter {
        void operator()(ggml_backend *backend) const { ggml_backend_free(backend); }
    };
    struct SessionBuffer {
        Mapping mapping;  // shared memory or a mapped file; outlives the buffer over it
        std::unique_ptr<ggml_backend_buffer, BufferDeleter> buffer;
        uint32_t device = 0;
        uint64_t size = 0;
        uint64_t charged = 0;  // bytes counted against the session's memory quota
        uint64_t mapped = 0;   // bytes of a guest's file, counted against the mapped-file quota
        bool writable = true;
        bool weights = false;            // the guest said it holds weights (BufferSetUsage)
        bool shared_with_guest = false;  // a memory file the guest maps too
        bool private_memory = false;     // `mapping` is the worker's own memory (allocate_private)
        // Until a command reads or computes with its bytes, a private buffer may
        // still move in its page (place_like_entry), with the few bytes written so far.
        bool placed = true;
        std::vector<protocol::BufferRange> early_writes;
        bool in_region = false;  // at region_offset in the ivshmem region's heap
        uint64_t region_offset = 0;
        BufferUpload upload;  // its share of weight_upload_
    };
    // A CPU backend computes with a thread pool of its own, kept across computes
    // as llama.cpp does: without one, ggml starts and stops its threads on every
    // compute, which costs more than a small model's whole token.
    struct ThreadPool {
        ggml_threadpool *pool = nullptr;
        void (*free)(ggml_threadpool *) = nullptr;
        // Stops its idle threads' polling until the next compute (core_schedule.h).
        void (*pause)(ggml_threadpool *) = nullptr;
        int n_threads = 0;
        ThreadPool() = default;
        ThreadPool(ThreadPool &&other) noexcept
            : pool(std::exchange(other.pool, nullptr)),
              free(other.free),
              pause(other.pause),
              n_threads(other.n_threads) {}
        ThreadPool &operator=(ThreadPool &&other) noexcept {
            std::swap(pool, other.pool);
            std::swap(free, other.free);
            std::swap(pause, other.pause);
            std::swap(n_threads, other.n_threads);
            return *this;
        }
        ~ThreadPool() {
            if (pool != nullptr) free(pool);
        }
    };
    struct SessionBackend {
        // Destroyed in reverse: the backend goes before the pool it uses.
        ThreadPool threads;
        std::unique_ptr<ggml_backend, BackendDeleter> backend;
        uint32_t device = 0;
        // CPU backends (those with ggml_backend_set_n_threads): the threads the guest
        // wants (its pool's size), and those the next compute uses (its share).
        ggml_backend_set_n_threads_t set_n_threads = nullptr;
        int wanted_threads = 0;
        int compute_threads = 0;
    };

    // The handler of each command (protocol/commands.h), by subject in
    // session_devices.cpp, session_buffers.cpp, session_tensors.cpp and
    // session_compute.cpp. Each checks everything in its request.
#define GGML_REMOTE_SESSION_HANDLER(number, name, Cmd, size) \
    Status handle(const protocol::Cmd::Request &request, Call<protocol::Cmd> &call);
    GGML_REMOTE_COMMANDS(GGML_REMOTE_SESSION_HANDLER)
#undef GGML_REMOTE_SESSION_HANDLER

    // session.cpp: dispatch and lookups.
    // Hands every command to its handler above.
    void register_handlers();
    // handle() as serve() calls it: `streamed` is the tail when it is still in
    // the ring, and a reply tail's `fill` is left for the sender.
    Status handle_frame(uint16_t command, protocol::ByteView payload, TailStream *streamed, std::vector<UniqueFd> &fds,
                        ReplyFrame *reply);
    // handle_frame() without the refusal count: finds the command's handler and runs it.
    Status run_handler(uint16_t command, protocol::ByteView payload, TailStream *streamed, std::vector<UniqueFd> &fds,
                       ReplyFrame *reply);
    // "this session already has 16 backends (--max-backends)": the refusal of a capped object.
    static Status over_cap(size_t count, const char *what, const char *flag);
    // Tensor parallelism across machines (session_comm.cpp).
    struct Group;
    Status dial_lower_ranks(const PeerExchange::Place &place, const std::vector<std::string> &endpoints,
                            std::vector<UniqueFd> *connections);
    void leave_broker(const PeerExchange::Place &place);
    Status open_links(Group *group);
    Status device_at(uint32_t index, ggml_backend_dev_t *device) const;
    Status buffer_at(uint64_t handle, SessionBuffer **buffer);
    Status backend_at(uint64_t handle, SessionBackend **backend);
    Status build(protocol::ByteView bytes, DataPolicy policy, BuiltTensors *built);
    // Bytes [offset, +size) of a buffer changed: the copies made from them
    // (repacked weights, store entries on their way) are out of date.
    void bytes_written(uint64_t buffer, uint64_t offset, uint64_t size);
    // `bytes` the guest sent into a buffer (already checked) arrived: they count
    // towards its upload of weights (weight_upload.h).
    void count_guest_bytes(uint64_t buffer, uint64_t bytes);

    // session_serve.cpp: serve()'s loop, and its state between frames.
    struct ServeLoop;
    // serve() without the last publication of the session's figures.
    Status serve_frames(FramedStream &stream);
    // Waits for the next frame into loop.payload; *ended when the guest hung up.
    // Tensor data is left in the stream for its handler (loop.streamed_tail).
    Status receive_frame(ServeLoop &loop, protocol::FrameHeader *header, bool *ended);

    // The bytes at the end of this frame's payload that its handler reads from the
    // stream itself (SetTensor's data: in place from a ring, a bounded piece at a
    // time from a socket), or 0.
    uint64_t tail_left_in_ring(const ServeLoop &loop, const protocol::FrameHeader &header) const;
    // Arms the watchdog for the wait before a frame (the handshake's, or idleness).
    void arm_wait_for_frame(ServeLoop &loop);
    // Handles a frame, unless an earlier one-way command failed: a command with a
    // reply is then answered with that failure instead.
    Status carry_out(ServeLoop &loop, const protocol::FrameHeader &header, bool one_way, ReplyFrame *reply);
    // Sends the reply to a command (or its failure); *ended when the guest is gone.
    Status answer(ServeLoop &loop, const protocol::FrameHeader &header, const Status &status, const ReplyFrame &reply,
                  bool *ended);
    // A reply's flags: whether a guest on this machine must not spin for the next.
    uint16_t reply_flags();

    // session_devices.cpp.
    // The device and the built tensor list of an op query (supports_op, alloc_size),
    // whose last tensor is the one asked about.
    Status op_query(uint32_t device_index, protocol::ByteView list, const char *command, ggml_backend_dev_t *device,
                    BuiltTensors *built);

    // session_buffers.cpp.
    // Whether `size` more bytes stay within the session's memory quota.
    bool fits_quota(uint64_t size) const;
    // Whether buffers of this device can live in shared memory.
    bool device_shares_memory(ggml_backend_dev_t device) const;
    Status allocate_shared(ggml_backend_dev_t device, uint64_t size, SessionBuffer *record, UniqueFd *fd);
    // A buffer in the ivshmem region's heap, which the guest reads and writes in place.
    Status allocate_in_region(ggml_backend_dev_t device, uint64_t size, SessionBuffer *record);
    // Whether this session's buffers of `device` are memory the guest maps too.
    bool shares_with_guest(ggml_backend_dev_t device) const {
        return (shared_memory_ || region_heap_granted_) && device_shares_memory(device);
    }
    // A CPU-memory device's buffer that only the host sees: our own mapping, so
    // that it can be backed by huge pages (ggml's CPU buffers are plain malloc).
    Status allocate_private(ggml_backend_dev_t device, uint64_t size, SessionBuffer *record, size_t phase_in_page = 0);
    // A private buffer that no command has reached yet moves so that the entry for
    // the first lookup into it lies in the same place in a page as its file: a
    // model's tensors lie in the buffer as in their file (in order, with GGUF's
    // alignment), so then the pages of all of them map from it.
    void place_like_entry(SessionBuffer *buffer, const protocol::BufferRange &range,
                          const protocol::ContentDigest &digest);
    // Keeps the ranges written into a buffer that may still move, within limits;
    // any other access, or more writes, fix where it lies.
    static void note_before_placed(SessionBuffer *buffer, const protocol::BufferRange &range, bool write);
    // Checks what a WeightLookup or WeightOffer asks of the store, but its range
    // (write_range's); *memory: the buffer's own mapping, where the store's pages
    // may go (StoreFill::Target).
    Status check_store_request(const protocol::BufferRange &range, const char *command, Mapping **memory);

    // session_tensors.cpp: every command that reads or writes bytes of a buffer
    // comes through these.
    // The buffer that holds all of `range`; for writing, a writable one.
    enum class Access { read, write };
    Status buffer_range(const protocol::BufferRange &range, Access access, SessionBuffer **buffer);
    // A 1-D byte tensor over a checked range.
    static void byte_tensor(const SessionBuffer &buffer, const protocol::BufferRange &range, ggml_tensor *bytes);
    // A 1-D byte tensor over `range`, once checked for reading.
    Status read_range(const protocol::BufferRange &range, ggml_tensor *bytes);
    // Checks `range` for writing, has `write(ggml_tensor *bytes)` change its bytes
    // through a byte tensor over it, and only once that succeeded tells the copies
    // made from them (bytes_written). `write` refuses before it changes anything.
    template <class Write>
    Status write_range(const protocol::BufferRange &range, Write write);

    // session_compute.cpp.
    // The graph a GraphCompute names: built from `tail` (and kept, for kGraphStore:
    // then *graph is the slot's, else `once`), or kept in a slot.
    Status graph_to_compute(const protocol::GraphCompute::Request &request, protocol::ByteView tail,
                            SessionBackend *backend, BuiltTensors *once, BuiltTensors **graph);
    // Whether `backend` (handle `handle`) may compute `graph`: its buffers, and its
    // data-dependent indexes.
    Status check_graph_on_backend(uint64_t handle, const SessionBackend &backend, BuiltTensors *graph);
    Status check_ops_supported(const SessionBackend &backend, ggml_cgraph *graph) const;
    void report_compute_failure(const Status &status);
    // The guest computes: the uploads of its weights buffers are over (weight_upload.h).
    void settle_weight_uploads();
    // Points the graph's matrix products at repacked copies of their weights.
    void repack_weights(SessionBackend *backend, BuiltTensors *graph);
    // Lets a backend's compute stop early once the guest has hung up (guest_gone_),
    // and a heavy CPU compute step aside between nodes, where its backend has an
    // abort callback (ggml-cpu has one).
    void abort_compute_when_guest_gone(ggml_backend_t backend);
    // The backend's callback after each node (on the thread that called the
    // compute): whether to stop; a heavy CPU compute steps aside there for a light
    // session (core_schedule.h).
    static bool between_nodes(void *session);
    // The guest wants `n_threads` for this backend's computes (capped by --max-threads).
    void set_threads(SessionBackend *backend, int n_threads);
    // The threads this backend's next compute uses, at most those the guest wants.
    void use_threads(SessionBackend *backend, int n_threads);
    // A thread pool of `n_threads` for a CPU backend, kept across its computes.
    void attach_pool(SessionBackend *backend, int n_threads);
    // Computes on the backend; a CPU backend with its share of the host's cores.
    // Indexes the graph computes and that fail their check stop it, in *refused.
    ggml_status compute_on_shared_cores(SessionBackend *backend, BuiltTensors *built, Status *refused);

    std::vector<ggml_backend_dev_t> devices_;
    SessionLimits limits_;
    Dispatcher dispatcher_;
    // Before buffers_: the buffers in it end first.
    std::shared_ptr<const Mapping> region_;
    RegionHeap region_heap_;
    bool region_heap_granted_ = false;
    HandleTable<SessionBuffer> buffers_;
    HandleTable<SessionBackend> backends_;
    GraphSlots graph_slots_;
    // Tensor parallelism (session_comm.cpp): the groups this session joined; each
    // file's bytes (PeerExchange::area_bytes) count against the memory quota.
    struct Group {
        PeerExchange::Place place;  // as the join named it
        PeerExchange exchange;      // one machine: the guest's memory file
        // Across machines (CommJoinLinks): the connections by rank, those to lower
        // ranks dialled at the join, the others taken from the listener at the
        // first step, which opens `links` with them.
        bool over_links = false;
        std::vector<UniqueFd> connections;
        PeerLinks links;
        Status links_failure;               // the first step's, when it could not open the links
        std::chrono::milliseconds wait{0};  // for the other servers, each step
    };
    HandleTable<Group> groups_;
    bool peer_exchange_granted_ = false;
    UniqueFd peer_channel_;  // to the listener's peer broker (peer_channel.h), or none
    std::optional<std::chrono::steady_clock::time_point> connected_at_;  // count_handshake_from's
    bool peer_links_granted_ = false;
    // Granted in the handshake: the watchdog's thread sends keep-alives while the session computes.
    bool keepalive_granted_ = false;
    uint64_t memory_in_use_ = 0;
    uint64_t mapped_file_bytes_ = 0;
    // Set by serve()'s watchdog when the guest hangs up during a compute.
    std::atomic<bool> guest_gone_{false};
    Watchdog *watchdog_ = nullptr;  // serve()'s, while it runs
    bool handshaken_ = false;
    bool shared_memory_allowed_ = false;
    bool shared_memory_ = false;                 // granted in the handshake
    std::unique_ptr<RingChannel> pending_ring_;  // granted in the handshake, used after its reply
    const StatusBoard *status_board_ = nullptr;
    SessionSlot *status_slot_ = nullptr;
    bool status_query_allowed_ = false;
    uint32_t max_sessions_ = 0;
    void publish_status();
    // The status board's mark that this is a guest's session, at its first command
    // that is neither the handshake nor a status query.
    void mark_guest_session_at(uint16_t command);
    bool guest_session_marked_ = false;
    // One observation of a histogram that /metrics shows (figure_histograms.h).
    void observe(SessionHistogram which, uint64_t ns) {
        const auto index = static_cast<size_t>(which);
        counters_.histograms[index].observe(*kSessionHistogramSpecs[index].bounds, ns);
    }
    SessionCounters counters_;  // only what the session counts itself; see counters()
    WeightRepack weight_repack_;
    WeightUpload weight_upload_;
    int compute_threads_ = 0;  // of the last CPU thread count set (SpinPolicy::set_compute_threads)
    CoreSchedule cores_;
    IdleComputeThread idle_compute_;  // for heavy computes beside light sessions
    FrameRecorder *recorder_ = nullptr;
    FailureLog compute_failure_log_;
    uint64_t compute_failures_ = 0;
    ComputeGateForTesting compute_gate_for_testing_;
    ComputeCheckForTesting compute_check_for_testing_;
    bool weight_store_granted_ = false;
    bool model_library_offered_ = false;
    // Last: its store's thread finishes its commits before anything else goes.
    StoreFill store_fill_;
};

template <class Write>
Status Session::write_range(const protocol::BufferRange &range, Write write) {
    SessionBuffer *buffer = nullptr;
    if (Status s = buffer_range(range, Access::write, &buffer); !s) return s;
    ggml_tensor bytes;
    byte_tensor(*buffer, range, &bytes);
    Status status = write(&bytes);
    if (status) bytes_written(range.buffer, range.offset, range.size);
    return status;
}

}  // namespace ggml_remote::host
