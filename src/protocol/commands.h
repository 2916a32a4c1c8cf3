// The command table: every call the guest can make, described once.
//
// GGML_REMOTE_COMMANDS below is the one list of commands: each line gives a
// command's wire id, its name, its struct, and whether its request takes a tail.
// From it come the CommandId enum, command_name(), AllCommands (for code that
// handles each command: the fuzzers, the tests), the host's handler table and its
// size checks (host/dispatcher.h, host/session.h).
//
// Each struct holds its id, whether the host replies (one-way commands report a
// failure with the next reply instead), its fixed Request and Reply layouts, and a
// comment on the variable tail that follows them. The guest calls
// `session.call<Cmd>(request, tail)`; the host handles it in
// `Session::handle(const Cmd::Request &, Call<Cmd> &)`. No host pointer ever
// crosses the wire: devices, buffers and backends are handles into per-session
// tables, and tensors are described by buffer handle + offset (see tensor_codec.h).
//
// Adding a command: a line here (the next id), its struct below, its handler on
// the host (declared for you; the build fails to link until it is written).
#pragma once

#include <cstddef>
#include <cstdint>
#include <tuple>

#include "protocol/wire.h"

namespace ggml_remote::protocol {

// What the dispatchers do around a command besides calling its handler: one bit a
// column of the list below, each read in one place (named beside it). A command
// with none is kPlain: an exact request, a reply, no special handling.
enum CommandPolicy : uint32_t {
    kPlain = 0,
    // The request is its Request struct and then a variable tail; without this bit,
    // exactly its struct (the host's dispatcher refuses any other size).
    kTakesTail = 1u << 0,
    // The host sends no reply; a failure is reported with the next reply
    // (guest: post(); host: Session::serve).
    kOneWay = 1u << 1,
    // The one command a session may start with (Session::run_handler).
    kOpensSession = 1u << 2,
    // On the shared ring the tail is tensor data, read in place by the handler
    // instead of copied out first (Session::tail_left_in_ring).
    kTailInRing = 1u << 3,
    // Writes a tensor's bytes: a new weight store entry being filled stays open;
    // every other command completes it (Session::run_handler).
    kWritesWeights = 1u << 4,
    // A failure goes to the server's log too, a few per session (Session::handle_frame).
    kFailureLogged = 1u << 5,
    // Frees a host object: with the connection lost it fails at once, and makes no
    // new connection for it (guest: RemoteSession::run).
    kReleases = 1u << 6,
    // The reply is its Reply struct alone: the guest refuses any tail and has no
    // more to check (its ReplyRule is NoTailRule, protocol/reply_rules.h). A reply
    // with a tail, or fields to hold against the request, has a rule of its own.
    kFixedReply = 1u << 7,
};

// X(id, name, struct, policy). The ids are the wire's: never renumber.
#define GGML_REMOTE_COMMANDS(X)                                                            \
    X(1, hello, Hello, kTakesTail | kOpensSession)                                         \
    X(2, device_info, DeviceInfo, kPlain)                                                  \
    X(3, device_memory, DeviceMemory, kFixedReply)                                         \
    X(4, supports_op, SupportsOp, kTakesTail | kFixedReply)                                \
    X(5, alloc_size, AllocSize, kTakesTail)                                                \
    X(6, buffer_alloc, BufferAlloc, kPlain)                                                \
    X(7, buffer_free, BufferFree, kOneWay | kReleases)                                     \
    X(8, buffer_clear, BufferClear, kOneWay)                                               \
    X(9, buffer_reset, BufferReset, kOneWay)                                               \
    X(10, init_tensor, InitTensor, kTakesTail | kOneWay)                                   \
    X(11, set_tensor, SetTensor, kTakesTail | kOneWay | kTailInRing | kWritesWeights)      \
    X(12, set_tensor_2d, SetTensor2d, kTakesTail | kOneWay | kTailInRing | kWritesWeights) \
    X(13, get_tensor, GetTensor, kPlain)                                                   \
    X(14, get_tensor_2d, GetTensor2d, kPlain)                                              \
    X(15, memset_tensor, MemsetTensor, kOneWay)                                            \
    X(16, copy_tensor, CopyTensor, kFixedReply)                                            \
    X(17, backend_init, BackendInit, kFixedReply)                                          \
    X(18, backend_free, BackendFree, kOneWay | kReleases)                                  \
    X(19, set_n_threads, SetNThreads, kOneWay)                                             \
    X(20, graph_compute, GraphCompute, kTakesTail | kOneWay | kFailureLogged)              \
    X(21, buffer_from_file, BufferFromFile, kFixedReply)                                   \
    X(22, synchronize, Synchronize, kFixedReply)                                           \
    X(23, server_status, ServerStatus, kPlain)                                             \
    X(24, buffer_set_usage, BufferSetUsage, kOneWay)                                       \
    X(25, buffer_written, BufferWritten, kOneWay)                                          \
    X(26, weight_lookup, WeightLookup, kFixedReply)                                        \
    X(27, weight_offer, WeightOffer, kOneWay)                                              \
    X(28, graph_optimize, GraphOptimize, kTakesTail)                                       \
    X(29, buffer_adopt, BufferAdopt, kFixedReply)                                          \
    X(30, comm_join, CommJoin, kFixedReply)                                                \
    X(31, comm_all_reduce, CommAllReduce, kOneWay | kFailureLogged)                        \
    X(32, comm_leave, CommLeave, kOneWay | kReleases)                                      \
    X(33, comm_join_links, CommJoinLinks, kTakesTail | kFixedReply)

#define GGML_REMOTE_COMMAND_ID(id, name, Cmd, size) name = id,
enum class CommandId : uint16_t {
    GGML_REMOTE_COMMANDS(GGML_REMOTE_COMMAND_ID) count_,  // not a command: one past the last id
};
#undef GGML_REMOTE_COMMAND_ID

// Each command's policy bits, indexed by its wire id (ids run 1, 2, 3... with no
// gap, checked below); index 0 names no command.
#define GGML_REMOTE_COMMAND_POLICY(number, name, Cmd, policy) , uint32_t(policy)
constexpr uint32_t kCommandPolicies[] = {kPlain GGML_REMOTE_COMMANDS(GGML_REMOTE_COMMAND_POLICY)};
#undef GGML_REMOTE_COMMAND_POLICY
static_assert(sizeof(kCommandPolicies) / sizeof(kCommandPolicies[0]) == static_cast<size_t>(CommandId::count_),
              "one policy per command id, and the ids run from 1 with no gap");

// The command's policy bits (kPlain for an id that names no command): one load,
// as the dispatcher asks for every frame.
constexpr uint32_t command_policy(CommandId id) {
    const auto index = static_cast<size_t>(id);
    return index < sizeof(kCommandPolicies) / sizeof(kCommandPolicies[0]) ? kCommandPolicies[index] : kPlain;
}

// Whether the command with wire id `command` has every bit of `policy`.
constexpr bool command_has(uint16_t command, uint32_t policy) {
    return (command_policy(static_cast<CommandId>(command)) & policy) == policy;
}
constexpr bool command_has(CommandId id, uint32_t policy) { return (command_policy(id) & policy) == policy; }

// Whether the command's request may be longer than its Request struct.
constexpr bool takes_tail(CommandId id) { return command_has(id, kTakesTail); }

// "set_tensor"; "unknown" for an id that names no command.
const char *command_name(CommandId id);

// Device capability bits (DeviceInfo::Reply::caps), from ggml's dev_props caps.
// "CPU memory" is what ggml calls host memory: memory the CPU addresses directly.
enum DeviceCaps : uint32_t {
    kCapAsync = 1 << 0,
    // The device offers a second buffer type in (pinned) CPU memory for staging
    // copies (ggml's caps.host_buffer, get_host_buffer_type).
    kCapCpuMemoryBufferType = 1 << 1,
    // The device can wrap CPU memory it is given as a buffer (ggml's
    // caps.buffer_from_host_ptr).
    kCapBufferFromCpuMemory = 1 << 2,
    kCapEvents = 1 << 3,
    kCapMmap = 1 << 4,
};

// Session capability bits (Hello): asked for by the guest, granted by the host.
enum SessionCaps : uint64_t {
    // Buffers in CPU memory are memory files mapped by both sides, and model
    // files are mapped instead of copied (unix sockets only).
    kSessionSharedMemory = 1 << 0,
    // With shared memory: after the handshake, frames go through two rings in a
    // memory file that comes with the hello reply (transport/shared_ring.h).
    kSessionSharedRing = 1 << 1,
    // The server keeps a store of weights by content (--weight-store): a guest names
    // a weight tensor by its digest before sending its bytes (WeightLookup).
    kSessionWeightStore = 1 << 2,
    // ivshmem: buffers in CPU memory live in the region's heap, which the guest maps
    // too (BufferAlloc says where); model files stay the guest's (no descriptors
    // reach a VM's host).
    kSessionRegionHeap = 1 << 3,
    // With the weight store: the server also has published models (--models), so a
    // guest names every weight by its digest before sending it (WeightLookup), even
    // of a model file it never loaded, of which the server may hold the bytes.
    kSessionModelLibrary = 1 << 4,
    // Tensor parallelism: the session may join a group of servers that sum partial
    // results through a memory file the guest gives them all (CommJoin; unix
    // sockets only, as descriptors must pass).
    kSessionPeerExchange = 1 << 5,
    // Tensor parallelism between machines: the session may join a group whose
    // servers sum partial results over TCP connections their listeners make
    // (CommJoinLinks; transport/peer_links.h). Granted where the listener gave the
    // worker a peer channel.
    kSessionPeerLinks = 1 << 6,
    // While the server computes for the session it proves that it is alive every
    // kKeepAliveIntervalMs: a kFrameKeepAlive frame, or on a shared ring a beat of
    // the ring's heartbeat. The guest may then give up on a server silent for
    // seconds instead of minutes (GGML_REMOTE_SILENCE_TIMEOUT_MS).
    kSessionKeepAlive = 1 << 7,
};

#pragma pack(push, 1)

struct Empty {};

// Handshake. The first message of every session. It takes a tail so that another
// version's longer Hello is still read far enough to be told which version we speak.
struct Hello {
    static constexpr CommandId id = CommandId::hello;
    static constexpr bool one_way = command_has(id, kOneWay);
    struct Request {
        uint32_t magic = kHelloMagic;
        uint32_t protocol_version = kProtocolVersion;
        uint64_t capabilities = 0;  // SessionCaps wanted
    };
    struct Reply {
        uint32_t protocol_version;
        uint32_t device_count;
        uint64_t capabilities;  // SessionCaps granted
    };
};

// Reply tail: three NUL-terminated strings: name, description, buffer type name.
struct DeviceInfo {
    static constexpr CommandId id = CommandId::device_info;
    static constexpr bool one_way = command_has(id, kOneWay);
    struct Request {
        uint32_t device;
    };
    struct Reply {
        uint32_t type;  // ggml_backend_dev_type of the host device
        uint32_t caps;  // DeviceCaps
        uint64_t memory_free;
        uint64_t memory_total;
        uint64_t buffer_alignment;
        uint64_t buffer_max_size;
        uint8_t buffer_in_cpu_memory;  // ggml_backend_buft_is_host
        // Whether the host's buffers implement init_tensor, and its buffer type a
        // get_alloc_size of its own; when not, the guest skips those round trips.
        uint8_t buffer_needs_init_tensor;
        uint8_t buffer_custom_alloc_size;
        // In this session, the device's buffers are shared memory (BufferAlloc
        // passes a memory file) and model files can be mapped (BufferFromFile).
        uint8_t shared_buffers;
    };
};

struct DeviceMemory {
    static constexpr CommandId id = CommandId::device_memory;
    static constexpr bool one_way = command_has(id, kOneWay);
    struct Request {
        uint32_t device;
    };
    struct Reply {
        uint64_t memory_free;
        uint64_t memory_total;
    };
};

// Request tail: an encoded tensor list whose last tensor is the op.
struct SupportsOp {
    static constexpr CommandId id = CommandId::supports_op;
    static constexpr bool one_way = command_has(id, kOneWay);
    struct Request {
        uint32_t device;
    };
    struct Reply {
        uint8_t supported;
    };
};

// Request tail: an encoded tensor list whose last tensor is the one to size.
struct AllocSize {
    static constexpr CommandId id = CommandId::alloc_size;
    static constexpr bool one_way = command_has(id, kOneWay);
    struct Request {
        uint32_t device;
    };
    struct Reply {
        uint64_t size;
    };
};

struct BufferAlloc {
    static constexpr CommandId id = CommandId::buffer_alloc;
    static constexpr bool one_way = command_has(id, kOneWay);
    struct Request {
        uint32_t device;
        uint64_t size;
    };
    struct Reply {
        uint64_t buffer;  // handle
        uint64_t size;
        uint8_t shared;  // kSharedFile: the buffer's memory file comes with the reply;
                         // kSharedInRegion: it lives in the ivshmem region's heap, and
                         // the reply's tail is its offset there (a uint64_t)
    };
    static constexpr uint8_t kSharedFile = 1, kSharedInRegion = 2;
    static constexpr uint64_t kRegionAlignment = 4096;  // of a buffer in the region
};

// A read-only buffer over [file_offset, +size) of a file whose descriptor comes
// with the request: the guest's memory-mapped model weights, mapped by the host
// too instead of copied. Only where DeviceInfo says shared_buffers.
struct BufferFromFile {
    static constexpr CommandId id = CommandId::buffer_from_file;
    static constexpr bool one_way = command_has(id, kOneWay);
    struct Request {
        uint32_t device;
        uint64_t file_offset;
        uint64_t size;
        uint64_t max_tensor_size;
    };
    struct Reply {
        uint64_t buffer;  // handle
    };
};

// A buffer over a memory file whose descriptor comes with the request: a shared
// buffer of an earlier connection, which the guest still maps and now hands back
// after reconnecting, contents and all. Only where DeviceInfo says
// shared_buffers; the file must be sealed against shrinking and growing (as the
// host seals those it makes) and exactly `size` bytes long.
struct BufferAdopt {
    static constexpr CommandId id = CommandId::buffer_adopt;
    static constexpr bool one_way = command_has(id, kOneWay);
    struct Request {
        uint32_t device;
        uint64_t size;
    };
    struct Reply {
        uint64_t buffer;  // handle
    };
};

struct BufferFree {
    static constexpr CommandId id = CommandId::buffer_free;
    static constexpr bool one_way = command_has(id, kOneWay);
    struct Request {
        uint64_t buffer;
    };
    using Reply = Empty;
};

struct BufferClear {
    static constexpr CommandId id = CommandId::buffer_clear;
    static constexpr bool one_way = command_has(id, kOneWay);
    struct Request {
        uint64_t buffer;
        uint8_t value;
    };
    using Reply = Empty;
};

// What ggml says a buffer holds (ggml_backend_buffer_usage): a guest names its
// weights once, before the first graph that reads them, so that the host may keep
// them in its CPU's fastest layouts (host/weight_repack.h).
struct BufferSetUsage {
    static constexpr CommandId id = CommandId::buffer_set_usage;
    static constexpr bool one_way = command_has(id, kOneWay);
    struct Request {
        uint64_t buffer;
        uint32_t usage;
    };
    using Reply = Empty;
};

// Bytes the guest wrote itself into shared memory of a buffer it named as weights
// (protocol version 3): the host's repacked copies of them are stale. A guest that
// writes without saying so only makes its own results wrong.
struct BufferWritten {
    static constexpr CommandId id = CommandId::buffer_written;
    static constexpr bool one_way = command_has(id, kOneWay);
    struct Request {
        uint64_t buffer;
        uint64_t offset;
        uint64_t size;
    };
    using Reply = Empty;
};

struct BufferReset {
    static constexpr CommandId id = CommandId::buffer_reset;
    static constexpr bool one_way = command_has(id, kOneWay);
    struct Request {
        uint64_t buffer;
    };
    using Reply = Empty;
};

// Request tail: an encoded tensor list whose last tensor is the one to initialise.
struct InitTensor {
    static constexpr CommandId id = CommandId::init_tensor;
    static constexpr bool one_way = command_has(id, kOneWay);
    struct Request {
        uint64_t buffer;
    };
    using Reply = Empty;
};

// A byte range inside one buffer, relative to the buffer's start.
struct BufferRange {
    uint64_t buffer;
    uint64_t offset;
    uint64_t size;
};

// A weight tensor's bytes named by their digest (protocol/content_digest.h), before
// they are sent; only where the handshake granted kSessionWeightStore. When the
// server's store holds those bytes for this guest's tenant, it fills the range
// from there and answers `found`: no bytes cross the wire. Otherwise the guest
// sends them (SetTensor) as it would have, and the server keeps them in its store
// once it has checked them against the digest itself.
constexpr uint64_t kMinWeightLookupBytes = uint64_t(64) << 10;

struct WeightLookup {
    static constexpr CommandId id = CommandId::weight_lookup;
    static constexpr bool one_way = command_has(id, kOneWay);
    struct Request {
        BufferRange range;
        uint8_t digest[16];
    };
    struct Reply {
        uint8_t found;
    };
};

// A weight tensor's digest, sent before its bytes by a guest that has never
// loaded it before (the digest was not in its cache): the store is not likely to
// hold it, and a lookup's round trip would stall the upload. The server keeps the
// bytes that follow as a new entry, as after a lookup that found nothing.
struct WeightOffer {
    static constexpr CommandId id = CommandId::weight_offer;
    static constexpr bool one_way = command_has(id, kOneWay);
    struct Request {
        BufferRange range;
        uint8_t digest[16];
    };
    using Reply = Empty;
};

// Request tail: `range.size` bytes.
struct SetTensor {
    static constexpr CommandId id = CommandId::set_tensor;
    static constexpr bool one_way = command_has(id, kOneWay);
    struct Request {
        BufferRange range;
    };
    using Reply = Empty;
};

// n_copies rows of range.size bytes, the i-th at range.offset + i * stride;
// request tail: the rows packed back to back.
struct SetTensor2d {
    static constexpr CommandId id = CommandId::set_tensor_2d;
    static constexpr bool one_way = command_has(id, kOneWay);
    struct Request {
        BufferRange range;
        uint64_t n_copies;
        uint64_t stride;
    };
    using Reply = Empty;
};

// Reply tail: `range.size` bytes.
struct GetTensor {
    static constexpr CommandId id = CommandId::get_tensor;
    static constexpr bool one_way = command_has(id, kOneWay);
    struct Request {
        BufferRange range;
    };
    using Reply = Empty;
};

// Reply tail: the n_copies rows packed back to back.
struct GetTensor2d {
    static constexpr CommandId id = CommandId::get_tensor_2d;
    static constexpr bool one_way = command_has(id, kOneWay);
    struct Request {
        BufferRange range;
        uint64_t n_copies;
        uint64_t stride;
    };
    using Reply = Empty;
};

struct MemsetTensor {
    static constexpr CommandId id = CommandId::memset_tensor;
    static constexpr bool one_way = command_has(id, kOneWay);
    struct Request {
        BufferRange range;
        uint8_t value;
    };
    using Reply = Empty;
};

// Copies src.size bytes between two buffers of the same session (dst.size must match).
struct CopyTensor {
    static constexpr CommandId id = CommandId::copy_tensor;
    static constexpr bool one_way = command_has(id, kOneWay);
    struct Request {
        BufferRange src;
        BufferRange dst;
    };
    struct Reply {
        uint8_t copied;
    };
};

struct BackendInit {
    static constexpr CommandId id = CommandId::backend_init;
    static constexpr bool one_way = command_has(id, kOneWay);
    struct Request {
        uint32_t device;
    };
    struct Reply {
        uint64_t backend;  // handle
    };
};

struct BackendFree {
    static constexpr CommandId id = CommandId::backend_free;
    static constexpr bool one_way = command_has(id, kOneWay);
    struct Request {
        uint64_t backend;
    };
    using Reply = Empty;
};

struct SetNThreads {
    static constexpr CommandId id = CommandId::set_n_threads;
    static constexpr bool one_way = command_has(id, kOneWay);
    struct Request {
        uint64_t backend;
        int32_t n_threads;
    };
    using Reply = Empty;
};

// Tensor parallelism (ggml's comm all-reduce, llama.cpp's -sm tensor): the
// session joins the group of servers that share the memory file coming with the
// request (transport/peer_exchange.h), as `rank` of `ranks`. Reply: the handle
// CommAllReduce names.
struct CommJoin {
    static constexpr CommandId id = CommandId::comm_join;
    static constexpr bool one_way = command_has(id, kOneWay);
    struct Request {
        uint32_t rank;
        uint32_t ranks;
        uint64_t slot_bytes;
        uint32_t wait_ms;  // how long a step waits for the other servers, at most kMaxPeerWaitMs
        uint8_t token[16];
    };
    struct Reply {
        uint64_t comm;
    };
};
constexpr uint32_t kMaxPeerWaitMs = 120000;

// Adds, in place, the F32 values of `tensor` on every other server of the group
// to those here, once every command before it is done: every server then holds
// the same sum. One-way; a failure (a peer gone, silent or hostile) fails the
// next reply, and every later all-reduce of the group.
struct CommAllReduce {
    static constexpr CommandId id = CommandId::comm_all_reduce;
    static constexpr bool one_way = command_has(id, kOneWay);
    struct Request {
        uint64_t comm;
        BufferRange tensor;  // size: a multiple of 4 (F32), at most the group's slot
    };
    using Reply = Empty;
};

// Tensor parallelism between machines: as CommJoin, but the servers sum over
// TCP connections between them (transport/peer_links.h) instead of a memory
// file. Rank r dials every lower rank (its listener, --tensor-peer) and awaits
// every higher one; the connections are made at the first all-reduce.
// Request tail: for each lower rank in order, its endpoint as this guest names
// it ("tcp://host:port" or "tls://host:port", options left out), each ended by a
// NUL. Reply: the handle CommAllReduce and CommLeave name.
struct CommJoinLinks {
    static constexpr CommandId id = CommandId::comm_join_links;
    static constexpr bool one_way = command_has(id, kOneWay);
    struct Request {
        uint32_t rank;
        uint32_t ranks;
        uint64_t slot_bytes;
        uint32_t wait_ms;
        uint8_t token[16];
    };
    struct Reply {
        uint64_t comm;
    };
};
constexpr uint32_t kMaxPeerEndpointBytes = 255;

struct CommLeave {
    static constexpr CommandId id = CommandId::comm_leave;
    static constexpr bool one_way = command_has(id, kOneWay);
    struct Request {
        uint64_t comm;
    };
    using Reply = Empty;
};

// Graphs the host keeps, decoded and validated, per session: a graph that comes
// again (every token of llama.cpp's decode) is named by its slot, not sent again.
// The guest decides what each slot holds, with the same rules on both sides: a
// slot is filled only by kGraphStore, and freeing any buffer empties every slot.
// ggml's meta backend (llama.cpp's -sm tensor) runs two sub-graphs a layer on
// every server, each token: 64 slots keep a 30-layer model's; the bytes they
// hold in all are bounded instead, so that more slots cost no more memory.
constexpr uint32_t kGraphSlots = 64;
// The encoded graphs the slots hold, in all: a store past it is refused (the
// guest runs such a graph once instead).
constexpr uint64_t kGraphSlotBytes = 32ull << 20;

enum GraphMode : uint8_t {
    kGraphRunOnce = 0,  // tail: the graph; compute it and forget it
    kGraphStore = 1,    // tail: the graph; keep it in `slot`, then compute it
    kGraphReplay = 2,   // no tail: compute the graph kept in `slot`
};

// Computes a graph on a backend. One-way: the host's compute status, if not
// success, comes back as the error of the next reply. Request tail: an encoded
// graph (tensor list + node indexes), unless replayed.
struct GraphCompute {
    static constexpr CommandId id = CommandId::graph_compute;
    static constexpr bool one_way = command_has(id, kOneWay);
    struct Request {
        uint64_t backend;
        uint32_t slot;
        uint8_t mode;  // GraphMode
    };
    using Reply = Empty;
};

// The order a host backend wants a graph's nodes in (ggml's graph_optimize: Vulkan
// reorders for parallelism and fusion), asked before the graph is allocated, so
// that the guest's scheduler allocates and sends what a local run would compute.
// Request tail: the graph as a tensor list without data. Reply tail: n_nodes
// int32 indexes into the request's nodes, in their new order; then n_alloc_deps
// pairs of int32 list indexes (tensor, until): keep tensor allocated until node
// `until` has run. A backend without graph_optimize replies has_optimizer 0.
struct GraphOptimize {
    static constexpr CommandId id = CommandId::graph_optimize;
    static constexpr bool one_way = command_has(id, kOneWay);
    struct Request {
        uint64_t backend;
    };
    struct Reply {
        uint8_t has_optimizer;
        uint32_t n_nodes;
        uint32_t n_alloc_deps;
    };
};

// Waits until everything sent before it is done. The host works through a
// session's commands in order, so the reply is the wait; a guest needs it only to
// read shared memory that a compute writes.
struct Synchronize {
    static constexpr CommandId id = CommandId::synchronize;
    static constexpr bool one_way = command_has(id, kOneWay);
    struct Request {
        uint64_t backend;
    };
    using Reply = Empty;
};

// The server's devices and live sessions (ggml-remote-server status). Answered
// only to a peer on a unix socket running as the server's user or root.
// Reply tail: n_devices StatusDevice, then n_sessions StatusSession, then, when
// the request asked for them and the server knows them, one row of each table it
// asked for (StatusTables) per session, in the same order. A server from before
// a table ignores the bit and leaves it out: the tail's size tells which came.
struct ServerStatus {
    static constexpr CommandId id = CommandId::server_status;
    static constexpr bool one_way = command_has(id, kOneWay);
    struct Request {
        uint32_t tables;  // StatusTables; 0 from guests from before them
    };
    struct Reply {
        uint32_t server_pid;
        uint32_t max_sessions;
        uint32_t n_devices;
        uint32_t n_sessions;
    };
};

struct StatusDevice {
    char name[64];
    char description[128];
    uint64_t memory_free;
    uint64_t memory_total;
};

struct StatusSession {
    int32_t id;
    int32_t pid;
    char peer[112];
    int64_t started_unix;
    uint64_t commands;
    uint64_t bytes_received;
    uint64_t bytes_sent;
    uint64_t graph_computes;
    uint64_t memory_in_use;
    uint64_t buffers;
    uint64_t backends;
    uint64_t mapped_file_bytes;
    // The session's limits: what the figures above are held against (0 quota: none).
    uint64_t memory_quota;
    uint64_t max_buffers;
    uint64_t max_backends;
    uint64_t mapped_file_quota;
    // Core scheduling (host/core_schedule.h): threads of the session's current or
    // last CPU compute, and its CPU computes while other sessions were active.
    uint64_t cores_threads;
    uint64_t cores_shared_computes;
};
static_assert(sizeof(StatusSession) == 4 + 4 + 112 + 8 + 12 * 8 + 2 * 8, "status session layout");

// The tables a ServerStatus request may ask for beyond StatusSession's. Each is
// new since StatusSession's layout was fixed: asking leaves older servers' replies,
// and not asking older guests' replies, as they were.
enum StatusTables : uint32_t {
    kStatusUploads = 1u << 0,  // StatusUpload
};

// A session's upload of its weights (host/worker/session/weight_upload.h): bytes
// of the buffers it flagged as weights, those it sent into them, and those the
// host's weight store filled.
struct StatusUpload {
    uint64_t weights_expected;
    uint64_t weights_received;
    uint64_t weights_found;
};
static_assert(sizeof(StatusUpload) == 3 * 8, "status upload layout");

#pragma pack(pop)

// Every command's struct, in the order of their ids.
#define GGML_REMOTE_COMMAND_TYPE(number, name, Cmd, policy) , std::tuple<Cmd>()
using AllCommands = decltype(std::tuple_cat(std::tuple<>() GGML_REMOTE_COMMANDS(GGML_REMOTE_COMMAND_TYPE)));
#undef GGML_REMOTE_COMMAND_TYPE

// The size of the command's Request struct (0 for an id that names no command).
constexpr size_t request_size(CommandId id) {
#define GGML_REMOTE_COMMAND_REQUEST_SIZE(number, name, Cmd, policy) \
    if (id == CommandId::name) return sizeof(Cmd::Request);
    GGML_REMOTE_COMMANDS(GGML_REMOTE_COMMAND_REQUEST_SIZE)
#undef GGML_REMOTE_COMMAND_REQUEST_SIZE
    return 0;
}

// Each struct names its own line of the list, and the ids run 1, 2, 3... with no
// gap (the host's handler table is indexed by them).
#define GGML_REMOTE_COMMAND_CHECK(number, name, Cmd, policy)                            \
    static_assert(Cmd::id == CommandId::name, #Cmd "::id is not the id of its line");   \
    static_assert(std::tuple_element_t<number - 1, AllCommands>::id == CommandId::name, \
                  #Cmd " is not where its id says in GGML_REMOTE_COMMANDS");
GGML_REMOTE_COMMANDS(GGML_REMOTE_COMMAND_CHECK)
#undef GGML_REMOTE_COMMAND_CHECK
static_assert(std::tuple_size<AllCommands>::value == static_cast<size_t>(CommandId::count_) - 1,
              "command ids run from 1 with no gap");

}  // namespace ggml_remote::protocol
