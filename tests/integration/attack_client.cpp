// attack_client: plays a hostile guest against a ggml-remote-server. Each attack opens
// a session of its own and sends what a well-behaved guest never would: ranges outside
// buffers, sizes that overflow, broken tensor lists, graphs whose nodes break their
// op's rules, frames that lie about their length. The server must answer with an error
// of the expected code, or close that session; where it answers, the session must
// still serve the next command.
//
// usage: ggml-remote-attack-client ENDPOINT [--contained] [--list] [NAME...]
//   NAME...      run only these attacks (default: all of the refused group)
//   --contained  run the attacks that only the worker process can stop instead: data
//                that indexes out of range, seen by a kernel at compute time; each must
//                end its own session and nothing else
//   --list       print the attack names and exit
// prints one line per attack: "PASS name: what happened" or "FAIL name: why".
// exits 0 when every attack passed, 1 when one did not, 2 on a usage error.
#include <ggml.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "protocol/commands.h"
#include "protocol/tensor_codec.h"
#include "transport/connection.h"
#include "transport/endpoint.h"
#include "transport/socket.h"

using namespace ggml_remote;
using namespace ggml_remote::protocol;

namespace {

constexpr int kReplyTimeoutMs = 10000;
constexpr uint64_t kBufferSize = 64 * 1024;

const char *code_name(int32_t code) {
    switch (static_cast<Code>(code)) {
        case Code::ok:
            return "ok";
        case Code::error:
            return "error";
        case Code::version_mismatch:
            return "version_mismatch";
        case Code::bad_request:
            return "bad_request";
        case Code::not_found:
            return "not_found";
        case Code::out_of_memory:
            return "out_of_memory";
        case Code::unsupported:
            return "unsupported";
        case Code::limit_exceeded:
            return "limit_exceeded";
        case Code::disconnected:
            return "disconnected";
    }
    return "unknown";
}

// What came back for one request.
struct Outcome {
    enum Kind { reply, closed, timeout } kind = closed;
    int32_t code = 0;
    std::vector<uint8_t> payload;  // the reply, or the error message

    std::string message() const { return std::string(payload.begin(), payload.end()); }
    std::string describe() const {
        if (kind == closed) return "the server closed the session";
        if (kind == timeout) return "no reply within " + std::to_string(kReplyTimeoutMs / 1000) + " s";
        std::string text = std::string("reply ") + code_name(code);
        if (code != 0) text += " '" + message() + "'";
        return text;
    }
};

// The outcome of an attack: passed or not, and what happened.
struct Verdict {
    bool passed = false;
    std::string what;
};

Verdict pass(const std::string &what) { return {true, what}; }
Verdict failure(const std::string &what) { return {false, what}; }

// One session with the server, spoken frame by frame.
class Guest {
  public:
    Status connect(const Endpoint &endpoint) {
        UniqueFd fd;
        Status status = connect_endpoint(endpoint, 5000, &fd);
        if (!status) return status;
        stream_ = FramedStream(std::move(fd), endpoint.to_string());
        return Status::success();
    }

    Status send(uint16_t command, ByteView payload) {
        FrameHeader header;
        header.command = command;
        return stream_.send(header, {payload});
    }

    // Sends bytes as they are: frames that lie about their length.
    Status send_raw(ByteView bytes) { return stream_.send_frames(bytes); }

    Outcome receive() {
        Outcome outcome;
        pollfd readable{stream_.fd(), POLLIN, 0};
        if (!stream_.has_unread_bytes() && ::poll(&readable, 1, kReplyTimeoutMs) == 0) {
            outcome.kind = Outcome::timeout;
            return outcome;
        }
        FrameHeader header;
        if (!stream_.receive_header(&header, 1u << 30).ok()) return outcome;  // closed
        outcome.payload.resize(header.payload_size);
        if (!stream_.receive(outcome.payload.data(), outcome.payload.size()).ok()) return outcome;
        outcome.kind = Outcome::reply;
        outcome.code = header.status;
        return outcome;
    }

    Outcome call(uint16_t command, ByteView payload) {
        if (!send(command, payload).ok()) return Outcome();
        return receive();
    }

    template <class Cmd>
    static std::vector<uint8_t> payload_of(const typename Cmd::Request &request, ByteView tail) {
        std::vector<uint8_t> payload;
        append_pod(payload, request);
        payload.insert(payload.end(), tail.data, tail.data + tail.size);
        return payload;
    }

    template <class Cmd>
    Outcome call(const typename Cmd::Request &request, ByteView tail = ByteView()) {
        static_assert(!Cmd::one_way, "a one-way command has no reply: use post()");
        return call(static_cast<uint16_t>(Cmd::id), ByteView(payload_of<Cmd>(request, tail)));
    }

    // A one-way command: its failure comes back with the next reply.
    template <class Cmd>
    Status post(const typename Cmd::Request &request, ByteView tail = ByteView()) {
        static_assert(Cmd::one_way, "a command with a reply: use call()");
        return send(static_cast<uint16_t>(Cmd::id), ByteView(payload_of<Cmd>(request, tail)));
    }

    // The reply to the next two-way command, which tells a one-way command's failure.
    Outcome next_reply() { return call<DeviceMemory>(DeviceMemory::Request{0}); }

    // Whether the server hangs up within the reply timeout.
    bool closed_soon() {
        if (stream_.has_unread_bytes()) return false;  // a reply came first
        pollfd readable{stream_.fd(), POLLIN, 0};
        if (::poll(&readable, 1, kReplyTimeoutMs) == 0) return false;
        char byte;
        return ::recv(stream_.fd(), &byte, 1, MSG_PEEK) <= 0;
    }

    void close() { stream_.close(); }

    Status hello() {
        Outcome outcome = call<Hello>(Hello::Request{});
        if (outcome.kind != Outcome::reply || outcome.code != 0)
            return error(Code::error, "hello: " + outcome.describe());
        return Status::success();
    }

    uint64_t alloc(uint64_t size) {
        Outcome outcome = call<BufferAlloc>(BufferAlloc::Request{0, size});
        BufferAlloc::Reply reply{};
        if (outcome.kind != Outcome::reply || outcome.code != 0 || !read_pod(ByteView(outcome.payload), 0, &reply)) {
            return 0;
        }
        return reply.buffer;
    }

    uint64_t backend() {
        Outcome outcome = call<BackendInit>(BackendInit::Request{0});
        BackendInit::Reply reply{};
        if (outcome.kind != Outcome::reply || outcome.code != 0 || !read_pod(ByteView(outcome.payload), 0, &reply)) {
            return 0;
        }
        return reply.backend;
    }

  private:
    FramedStream stream_;
};

// An error reply with this code, after which the session still serves.
Verdict expect_error(Guest &guest, const Outcome &outcome, Code code) {
    if (outcome.kind != Outcome::reply || outcome.code != static_cast<int32_t>(code)) {
        return failure(std::string("expected ") + code_name(static_cast<int32_t>(code)) + ", got " +
                       outcome.describe());
    }
    const Outcome after = guest.next_reply();
    if (after.kind != Outcome::reply || after.code != 0) {
        return failure("refused as expected, but the next command got " + after.describe());
    }
    return pass(std::string(code_name(outcome.code)) + ": " + outcome.message());
}

// A one-way command was sent: its failure comes with the next reply.
Verdict expect_deferred_error(Guest &guest, Code code) { return expect_error(guest, guest.next_reply(), code); }

// An error reply with this code, then the server hangs up.
Verdict expect_error_then_close(Guest &guest, const Outcome &outcome, Code code) {
    if (outcome.kind != Outcome::reply || outcome.code != static_cast<int32_t>(code)) {
        return failure(std::string("expected ") + code_name(static_cast<int32_t>(code)) + ", got " +
                       outcome.describe());
    }
    if (!guest.closed_soon()) return failure("refused, but the session stayed open");
    return pass(std::string(code_name(outcome.code)) + " and closed: " + outcome.message());
}

// A guest's graph: tensors made by ggml's constructors, placed at offsets in one
// session buffer (a local arena stands in for it, so ggml computes view addresses
// as usual), then encoded as the guest backend does and edited to lie.
class GuestGraph {
  public:
    explicit GuestGraph(uint64_t buffer) : buffer_(buffer), arena_(kBufferSize) {
        ggml_init_params params{};
        params.mem_size = 256 * ggml_tensor_overhead();
        params.no_alloc = true;
        ctx_.reset(ggml_init(params));
    }

    ggml_context *ctx() { return ctx_.get(); }

    ggml_tensor *tensor(ggml_type type, int64_t ne0, int64_t ne1 = 1, int64_t ne2 = 1, int64_t ne3 = 1) {
        return place(ggml_new_tensor_4d(ctx_.get(), type, ne0, ne1, ne2, ne3));
    }
    ggml_tensor *f32(int64_t ne0, int64_t ne1 = 1, int64_t ne2 = 1, int64_t ne3 = 1) {
        return tensor(GGML_TYPE_F32, ne0, ne1, ne2, ne3);
    }

    // Gives a tensor the next free bytes of the buffer.
    ggml_tensor *place(ggml_tensor *t) {
        const size_t size = (ggml_nbytes(t) + 63) / 64 * 64;
        if (next_ + size > arena_.size()) std::abort();  // the attacks are small
        t->data = arena_.data() + next_;
        next_ += size;
        return t;
    }

    // Where a placed tensor lies in the buffer.
    uint64_t offset_of(const ggml_tensor *t) const {
        return static_cast<uint64_t>(static_cast<const uint8_t *>(t->data) - arena_.data());
    }

    // The graph of these nodes, as GraphCompute's tail.
    std::vector<uint8_t> encode(std::initializer_list<ggml_tensor *> nodes) {
        TensorListEncoder encoder([this](const ggml_tensor *t, TensorLocation *location) {
            const auto begin = reinterpret_cast<uintptr_t>(arena_.data());
            const auto address = reinterpret_cast<uintptr_t>(t->data);
            if (address < begin || address >= begin + arena_.size()) return false;
            location->buffer = buffer_;
            location->offset = address - begin;
            return true;
        });
        for (ggml_tensor *node : nodes) {
            node->flags |= GGML_TENSOR_FLAG_COMPUTE;  // as ggml_build_forward_expand marks it
            encoder.add_node(node);
        }
        if (encoder.failed()) std::abort();
        return encoder.finish();
    }

    // The tail of an op query (supports_op, alloc_size): the op's tensors without data.
    static std::vector<uint8_t> encode_query(ggml_tensor *op) {
        TensorListEncoder encoder{TensorListEncoder::Locator()};
        encoder.add(op);
        return encoder.finish();
    }

  private:
    struct ContextDeleter {
        void operator()(ggml_context *ctx) const { ggml_free(ctx); }
    };
    uint64_t buffer_;
    std::vector<uint8_t> arena_;
    size_t next_ = 0;
    std::unique_ptr<ggml_context, ContextDeleter> ctx_;
};

size_t tensor_count(const std::vector<uint8_t> &list) {
    TensorListHeader header;
    std::memcpy(&header, list.data(), sizeof(header));
    return header.n_tensors;
}

// Rewrites the i-th tensor of an encoded list (negative: from the end).
void edit(std::vector<uint8_t> &list, long index, const std::function<void(WireTensor &)> &change) {
    const size_t i = index < 0 ? tensor_count(list) + index : static_cast<size_t>(index);
    uint8_t *at = list.data() + sizeof(TensorListHeader) + i * sizeof(WireTensor);
    WireTensor tensor;
    std::memcpy(&tensor, at, sizeof(tensor));
    change(tensor);
    std::memcpy(at, &tensor, sizeof(tensor));
}

// The index of the tensor named `name` in an encoded list.
long index_of(const std::vector<uint8_t> &list, const char *name) {
    for (size_t i = 0; i < tensor_count(list); ++i) {
        WireTensor tensor;
        std::memcpy(&tensor, list.data() + sizeof(TensorListHeader) + i * sizeof(WireTensor), sizeof(tensor));
        if (std::strncmp(tensor.name, name, sizeof(tensor.name)) == 0) return static_cast<long>(i);
    }
    std::abort();
}

// A session ready for graphs: one buffer, one backend.
struct GraphSession {
    Guest &guest;
    uint64_t buffer = 0;
    uint64_t backend = 0;

    Status open() {
        Status status = guest.hello();
        if (!status) return status;
        buffer = guest.alloc(kBufferSize);
        backend = guest.backend();
        if (buffer == 0 || backend == 0) return error(Code::error, "cannot set up a buffer and a backend");
        return Status::success();
    }

    Status compute(const std::vector<uint8_t> &list, GraphMode mode = kGraphRunOnce, uint32_t slot = 0) {
        GraphCompute::Request request{};
        request.backend = backend;
        request.mode = mode;
        request.slot = slot;
        return guest.post<GraphCompute>(request, ByteView(list));
    }
};

// A graph attack: builds c = a + b, lets `change` break it, sends it, expects `code`.
Verdict graph_attack(Guest &guest, const std::function<void(std::vector<uint8_t> &)> &change,
                     Code code = Code::bad_request) {
    GraphSession session{guest};
    Status status = session.open();
    if (!status) return failure(status.message());
    GuestGraph graph(session.buffer);
    ggml_tensor *a = graph.f32(16, 4), *b = graph.f32(16, 4);
    ggml_set_name(a, "a");
    ggml_set_name(b, "b");
    ggml_tensor *sum = graph.place(ggml_add(graph.ctx(), a, b));
    ggml_set_name(sum, "sum");
    std::vector<uint8_t> list = graph.encode({sum});
    change(list);
    if (!session.compute(list).ok()) return failure("could not send the graph");
    return expect_deferred_error(guest, code);
}

// A node attack: `build` makes a valid node from ggml's constructors, `change` breaks it.
Verdict node_attack(Guest &guest, const std::function<ggml_tensor *(GuestGraph &)> &build,
                    const std::function<void(std::vector<uint8_t> &)> &change) {
    GraphSession session{guest};
    Status status = session.open();
    if (!status) return failure(status.message());
    GuestGraph graph(session.buffer);
    ggml_tensor *node = build(graph);
    ggml_set_name(node, "victim");
    std::vector<uint8_t> list = graph.encode({node});
    change(list);
    if (!session.compute(list).ok()) return failure("could not send the graph");
    return expect_deferred_error(guest, Code::bad_request);
}

// The attacks.

Verdict before_handshake(Guest &guest) {
    return expect_error_then_close(guest, guest.call<BufferAlloc>(BufferAlloc::Request{0, 4096}), Code::bad_request);
}

Verdict unknown_command(Guest &guest, uint16_t command) {
    if (!guest.hello().ok()) return failure("hello failed");
    return expect_error_then_close(guest, guest.call(command, ByteView()), Code::bad_request);
}

Verdict header_of_one_terabyte(Guest &guest) {
    if (!guest.hello().ok()) return failure("hello failed");
    FrameHeader header;
    header.command = static_cast<uint16_t>(CommandId::set_tensor);
    header.payload_size = 1ull << 40;
    if (!guest.send_raw(ByteView(&header, sizeof(header))).ok()) return failure("could not send the header");
    return expect_error_then_close(guest, guest.receive(), Code::limit_exceeded);
}

Verdict half_sent_message(Guest &guest) {
    if (!guest.hello().ok()) return failure("hello failed");
    const uint64_t buffer = guest.alloc(4096);
    std::vector<uint8_t> frame(sizeof(FrameHeader));
    FrameHeader header;
    header.command = static_cast<uint16_t>(CommandId::set_tensor);
    header.payload_size = sizeof(SetTensor::Request) + 1024;
    std::memcpy(frame.data(), &header, sizeof(header));
    append_pod(frame, SetTensor::Request{{buffer, 0, 1024}});
    frame.resize(frame.size() + 100);  // 100 of the 1024 data bytes, then hang up
    if (!guest.send_raw(ByteView(frame)).ok()) return failure("could not send the frame");
    guest.close();
    return pass("sent 100 of 1024 data bytes and hung up (the server log must show a clean end)");
}

Verdict short_request(Guest &guest) {
    if (!guest.hello().ok()) return failure("hello failed");
    const uint8_t three_bytes[3] = {1, 2, 3};
    return expect_error(guest, guest.call(static_cast<uint16_t>(CommandId::buffer_alloc), ByteView(three_bytes, 3)),
                        Code::bad_request);
}

// Set, get, memset and copy with ranges a buffer does not have.
Verdict range_attack(Guest &guest, const std::function<Outcome(Guest &, uint64_t buffer, uint64_t other)> &attack,
                     Code code = Code::bad_request) {
    if (!guest.hello().ok()) return failure("hello failed");
    const uint64_t buffer = guest.alloc(4096), other = guest.alloc(4096);
    if (buffer == 0 || other == 0) return failure("buffer_alloc failed");
    return expect_error(guest, attack(guest, buffer, other), code);
}

Outcome post_then_reply(Guest &guest, const std::function<Status(Guest &)> &post) {
    if (!post(guest).ok()) return Outcome();
    return guest.next_reply();
}

Verdict set_past_the_end(Guest &guest) {
    return range_attack(guest, [](Guest &g, uint64_t buffer, uint64_t) {
        const std::vector<uint8_t> data(16, 0xab);
        return post_then_reply(g, [&](Guest &h) { return h.post<SetTensor>({{buffer, 4090, 16}}, ByteView(data)); });
    });
}

Verdict set_offset_overflow(Guest &guest) {
    return range_attack(guest, [](Guest &g, uint64_t buffer, uint64_t) {
        const std::vector<uint8_t> data(16, 0xab);
        return post_then_reply(
            g, [&](Guest &h) { return h.post<SetTensor>({{buffer, UINT64_MAX - 7, 16}}, ByteView(data)); });
    });
}

Verdict get_past_the_end(Guest &guest) {
    return range_attack(guest, [](Guest &g, uint64_t buffer, uint64_t) {
        return g.call<GetTensor>(GetTensor::Request{{buffer, 4000, 200}});
    });
}

Verdict get_size_overflow(Guest &guest) {
    return range_attack(guest, [](Guest &g, uint64_t buffer, uint64_t) {
        return g.call<GetTensor>(GetTensor::Request{{buffer, 8, UINT64_MAX}});
    });
}

Verdict set_2d_stride_overflow(Guest &guest) {
    return range_attack(guest, [](Guest &g, uint64_t buffer, uint64_t) {
        const std::vector<uint8_t> data(12, 0xab);
        return post_then_reply(g, [&](Guest &h) {
            // Row 2 starts at 2 * 2^63: the offset overflows.
            return h.post<SetTensor2d>(SetTensor2d::Request{{buffer, 0, 4}, 3, 1ull << 63}, ByteView(data));
        });
    });
}

Verdict get_2d_rows_past_the_end(Guest &guest) {
    return range_attack(guest, [](Guest &g, uint64_t buffer, uint64_t) {
        return g.call<GetTensor2d>(GetTensor2d::Request{{buffer, 0, 64}, 4, 2048});
    });
}

Verdict get_2d_huge_reply(Guest &guest) {
    return range_attack(guest, [](Guest &g, uint64_t buffer, uint64_t) {
        return g.call<GetTensor2d>(GetTensor2d::Request{{buffer, 0, 4096}, 1ull << 40, 0});
    });
}

Verdict memset_past_the_end(Guest &guest) {
    return range_attack(guest, [](Guest &g, uint64_t buffer, uint64_t) {
        return post_then_reply(
            g, [&](Guest &h) { return h.post<MemsetTensor>(MemsetTensor::Request{{buffer, 4095, 2}, 0xff}); });
    });
}

Verdict copy_to_a_smaller_destination(Guest &guest) {
    return range_attack(guest, [](Guest &g, uint64_t buffer, uint64_t other) {
        return g.call<CopyTensor>(CopyTensor::Request{{buffer, 0, 1024}, {other, 0, 512}});
    });
}

Verdict copy_past_the_end(Guest &guest) {
    return range_attack(guest, [](Guest &g, uint64_t buffer, uint64_t other) {
        return g.call<CopyTensor>(CopyTensor::Request{{buffer, 0, 1024}, {other, 3584, 1024}});
    });
}

Verdict unknown_buffer_handle(Guest &guest) {
    return range_attack(
        guest,
        [](Guest &g, uint64_t buffer, uint64_t other) {
            return g.call<GetTensor>(GetTensor::Request{{buffer + other + 1000, 0, 16}});
        },
        Code::not_found);
}

Verdict freed_buffer_handle(Guest &guest) {
    return range_attack(
        guest,
        [](Guest &g, uint64_t buffer, uint64_t) {
            if (!g.post<BufferFree>(BufferFree::Request{buffer}).ok()) return Outcome();
            return g.call<GetTensor>(GetTensor::Request{{buffer, 0, 16}});
        },
        Code::not_found);
}

// Graphs whose tensor list is broken.

Verdict huge_counts(Guest &guest) {
    return graph_attack(guest, [](std::vector<uint8_t> &list) {
        const TensorListHeader header{UINT32_MAX, UINT32_MAX};
        std::memcpy(list.data(), &header, sizeof(header));
    });
}

Verdict data_outside_buffer(Guest &guest) {
    return graph_attack(guest, [](std::vector<uint8_t> &list) {
        edit(list, index_of(list, "sum"), [](WireTensor &t) { t.data_offset = kBufferSize - 64; });
    });
}

Verdict data_offset_overflow(Guest &guest) {
    return graph_attack(guest, [](std::vector<uint8_t> &list) {
        edit(list, index_of(list, "a"), [](WireTensor &t) { t.data_offset = UINT64_MAX - 16; });
    });
}

Verdict graph_on_unknown_buffer(Guest &guest) {
    return graph_attack(guest, [](std::vector<uint8_t> &list) {
        edit(list, index_of(list, "b"), [](WireTensor &t) { t.buffer = 0x7fffffff; });
    });
}

Verdict graph_on_freed_buffer(Guest &guest) {
    GraphSession session{guest};
    Status status = session.open();
    if (!status) return failure(status.message());
    const uint64_t freed = guest.alloc(kBufferSize);
    if (!guest.post<BufferFree>(BufferFree::Request{freed}).ok()) return failure("could not free");
    GuestGraph graph(freed);
    ggml_tensor *sum = graph.place(ggml_add(graph.ctx(), graph.f32(16), graph.f32(16)));
    if (!session.compute(graph.encode({sum})).ok()) return failure("could not send the graph");
    return expect_deferred_error(guest, Code::bad_request);
}

Verdict type_out_of_range(Guest &guest, int32_t type) {
    return graph_attack(guest, [type](std::vector<uint8_t> &list) {
        edit(list, index_of(list, "a"), [type](WireTensor &t) { t.type = type; });
    });
}

Verdict ne0_not_a_block_multiple(Guest &guest) {
    return graph_attack(guest, [](std::vector<uint8_t> &list) {
        edit(list, index_of(list, "a"), [](WireTensor &t) {
            t.type = GGML_TYPE_Q4_0;  // blocks of 32 elements in 18 bytes
            t.ne[0] = 33;
            t.nb[0] = 18;
            t.nb[1] = t.nb[2] = t.nb[3] = 36;
        });
    });
}

Verdict source_index(Guest &guest, int32_t index) {
    return graph_attack(guest, [index](std::vector<uint8_t> &list) {
        const long sum = index_of(list, "sum");
        edit(list, sum, [&](WireTensor &t) { t.src[1] = index == INT32_MIN ? static_cast<int32_t>(sum) : index; });
    });
}

Verdict view_source_index(Guest &guest, int32_t index) {
    return graph_attack(guest, [index](std::vector<uint8_t> &list) {
        const long sum = index_of(list, "sum");
        edit(list, sum, [&](WireTensor &t) { t.view_src = index == INT32_MIN ? static_cast<int32_t>(sum) : index; });
    });
}

Verdict node_index_out_of_range(Guest &guest) {
    return graph_attack(guest, [](std::vector<uint8_t> &list) {
        const int32_t past_the_end = static_cast<int32_t>(tensor_count(list)) + 1000;
        std::memcpy(list.data() + list.size() - sizeof(int32_t), &past_the_end, sizeof(past_the_end));
    });
}

Verdict op_refused(Guest &guest, int32_t op) {
    return graph_attack(guest, [op](std::vector<uint8_t> &list) {
        edit(list, index_of(list, "sum"), [op](WireTensor &t) { t.op = op; });
    });
}

// A view of `a` whose offset lies past a's bytes, and past the buffer.
Verdict view_offset_outside_source(Guest &guest, bool consistent) {
    GraphSession session{guest};
    Status status = session.open();
    if (!status) return failure(status.message());
    GuestGraph graph(session.buffer);
    ggml_tensor *a = graph.f32(16, 4);
    ggml_tensor *view = ggml_view_1d(graph.ctx(), a, 16, 0);
    ggml_set_name(view, "view");
    ggml_tensor *doubled = graph.place(ggml_scale(graph.ctx(), view, 2.0f));
    std::vector<uint8_t> list = graph.encode({doubled});
    edit(list, index_of(list, "view"), [consistent](WireTensor &t) {
        t.view_offs = 1ull << 62;
        if (consistent) t.data_offset += t.view_offs;  // where the view would really be
    });
    if (!session.compute(list).ok()) return failure("could not send the graph");
    return expect_deferred_error(guest, Code::bad_request);
}

// Nodes that break their op's rules (op_validation.cpp).

void drop_source(std::vector<uint8_t> &list, int source) {
    edit(list, index_of(list, "victim"), [source](WireTensor &t) { t.src[source] = -1; });
}

// Shrinks a tensor of the list to `ne0` elements in a row, keeping it contiguous.
void shrink_rows(std::vector<uint8_t> &list, const char *name, int64_t ne0) {
    edit(list, index_of(list, name), [ne0](WireTensor &t) {
        t.ne[0] = ne0;
        t.nb[1] = t.nb[0] * static_cast<uint64_t>(ne0);
        t.nb[2] = t.nb[1] * static_cast<uint64_t>(t.ne[1]);
        t.nb[3] = t.nb[2] * static_cast<uint64_t>(t.ne[2]);
    });
}

ggml_tensor *named(ggml_tensor *t, const char *name) {
    ggml_set_name(t, name);
    return t;
}

ggml_tensor *mul_mat(GuestGraph &g) {
    return g.place(ggml_mul_mat(g.ctx(), named(g.f32(64, 8), "weights"), named(g.f32(64, 4), "input")));
}

ggml_tensor *add(GuestGraph &g) {
    return g.place(ggml_add(g.ctx(), named(g.f32(16, 4), "left"), named(g.f32(16, 4), "right")));
}

ggml_tensor *get_rows(GuestGraph &g) {
    return g.place(ggml_get_rows(g.ctx(), g.f32(16, 8), named(g.tensor(GGML_TYPE_I32, 4), "rows")));
}

ggml_tensor *rope(GuestGraph &g) {
    return g.place(
        ggml_rope(g.ctx(), g.f32(64, 4, 6), named(g.tensor(GGML_TYPE_I32, 6), "positions"), 64, GGML_ROPE_TYPE_NEOX));
}

// M-RoPE over 64-float rows, 4 positions per token, sections {16, 8, 8, 0}.
ggml_tensor *multi_rope(GuestGraph &g) {
    int sections[GGML_MROPE_SECTIONS] = {16, 8, 8, 0};
    return g.place(ggml_rope_multi(g.ctx(), g.f32(64, 4, 6), named(g.tensor(GGML_TYPE_I32, 4 * 6), "positions"),
                                   nullptr, 64, sections, GGML_ROPE_TYPE_MROPE, 4096, 10000.0f, 1.0f, 0.0f, 1.0f, 32.0f,
                                   1.0f));
}

// POOL_1D's kernel writes result row i at i * nb[1] for every row of its source.
ggml_tensor *pool_rows(GuestGraph &g) {
    return g.place(ggml_pool_1d(g.ctx(), named(g.f32(16, 8), "rows"), GGML_OP_POOL_MAX, 2, 2, 0));
}

ggml_tensor *soft_max(GuestGraph &g) {
    return g.place(
        ggml_soft_max_ext(g.ctx(), g.f32(32, 4, 2), named(g.tensor(GGML_TYPE_F16, 32, 4), "mask"), 0.5f, 0.0f));
}

ggml_tensor *copy(GuestGraph &g) {
    return ggml_cpy(g.ctx(), g.f32(16, 4), named(g.tensor(GGML_TYPE_F16, 16, 4), "destination"));  // a view
}

ggml_tensor *flash_attn(GuestGraph &g) {
    ggml_tensor *q = g.f32(64, 2, 4), *k = g.tensor(GGML_TYPE_F16, 64, 32, 4), *v = g.tensor(GGML_TYPE_F16, 64, 32, 4);
    ggml_tensor *mask = named(g.tensor(GGML_TYPE_F16, 32, 2), "mask");
    return g.place(ggml_flash_attn_ext(g.ctx(), q, k, v, mask, 0.125f, 0.0f, 0.0f));
}

ggml_tensor *silu(GuestGraph &g) { return g.place(ggml_silu(g.ctx(), g.f32(16, 4))); }

// A matrix product whose second source claims 2^40 rows over 4 KiB: zero strides let a
// small tensor describe any number of elements, and ggml-cpu sizes the work buffer
// for converting that source from its element count (2 PB here).
ggml_tensor *mul_mat_over_zero_strides(GuestGraph &g) {
    ggml_tensor *input = g.f32(1024);
    ggml_tensor *product = g.place(ggml_mul_mat(g.ctx(), g.tensor(GGML_TYPE_F16, 1024, 8), input));
    for (ggml_tensor *t : {input, product}) {
        t->ne[1] = int64_t(1) << 40;
        t->nb[1] = t->nb[2] = t->nb[3] = 0;
    }
    return product;
}

// supports_op / alloc_size hand their tensor to the host device, which reads its sources.
Verdict query_without_source(Guest &guest, bool supports_op) {
    if (!guest.hello().ok()) return failure("hello failed");
    ggml_init_params params{};
    params.mem_size = 16 * ggml_tensor_overhead();
    params.no_alloc = true;
    ggml_context *ctx = ggml_init(params);
    ggml_tensor *node = ggml_mul_mat(ctx, ggml_new_tensor_2d(ctx, GGML_TYPE_Q4_0, 64, 8),
                                     ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 64, 4));
    std::vector<uint8_t> list = GuestGraph::encode_query(node);
    ggml_free(ctx);
    edit(list, -1, [](WireTensor &t) { t.src[1] = -1; });
    const Outcome outcome = supports_op ? guest.call<SupportsOp>(SupportsOp::Request{0}, ByteView(list))
                                        : guest.call<AllocSize>(AllocSize::Request{0}, ByteView(list));
    return expect_error(guest, outcome, Code::bad_request);
}

Verdict replay_of_an_empty_slot(Guest &guest, uint32_t slot) {
    GraphSession session{guest};
    Status status = session.open();
    if (!status) return failure(status.message());
    if (!session.compute({}, kGraphReplay, slot).ok()) return failure("could not send the replay");
    return expect_deferred_error(guest, Code::bad_request);
}

// Attacks the worker process contains: indexes in tensor data, which only the kernel
// sees. The session must end (the worker dies or refuses) and the server go on.
Verdict contained(Guest &guest, const std::function<ggml_tensor *(GuestGraph &, Guest &, uint64_t)> &build) {
    GraphSession session{guest};
    Status status = session.open();
    if (!status) return failure(status.message());
    GuestGraph graph(session.buffer);
    ggml_tensor *node = build(graph, guest, session.buffer);
    if (!session.compute(graph.encode({node})).ok()) return failure("could not send the graph");
    const Outcome outcome = guest.next_reply();
    if (outcome.kind == Outcome::closed) return pass("the session ended");
    if (outcome.kind == Outcome::reply && outcome.code != 0) return pass("refused: " + outcome.message());
    return failure("expected the session to end or an error, got " + outcome.describe());
}

ggml_tensor *get_rows_with_row_id_past_the_end(GuestGraph &g, Guest &guest, uint64_t buffer) {
    ggml_tensor *rows = g.tensor(GGML_TYPE_I32, 4);
    const int32_t ids[4] = {0, 1, 1000000, 2};  // an 8-row source has no row 1000000
    (void)guest.post<SetTensor>({{buffer, g.offset_of(rows), sizeof(ids)}}, ByteView(ids, sizeof(ids)));
    return g.place(ggml_get_rows(g.ctx(), g.f32(16, 8), rows));
}

struct Attack {
    const char *name;
    std::function<Verdict(Guest &)> run;
};

std::vector<Attack> refused_attacks() {
    using Change = std::function<void(std::vector<uint8_t> &)>;
    auto node = [](const char *name, std::function<ggml_tensor *(GuestGraph &)> build, Change change) {
        return Attack{name, [build, change](Guest &g) { return node_attack(g, build, change); }};
    };
    return {
        // Framing and the handshake.
        {"command-before-handshake", before_handshake},
        {"unknown-command-id", [](Guest &g) { return unknown_command(g, 999); }},
        {"command-id-zero", [](Guest &g) { return unknown_command(g, 0); }},
        {"header-announcing-1TB", header_of_one_terabyte},
        {"half-sent-message-then-disconnect", half_sent_message},
        {"request-shorter-than-its-struct", short_request},
        // Byte ranges of buffers.
        {"set-tensor-past-the-end", set_past_the_end},
        {"set-tensor-offset-overflow", set_offset_overflow},
        {"get-tensor-past-the-end", get_past_the_end},
        {"get-tensor-size-overflow", get_size_overflow},
        {"set-tensor-2d-stride-overflow", set_2d_stride_overflow},
        {"get-tensor-2d-rows-past-the-end", get_2d_rows_past_the_end},
        {"get-tensor-2d-reply-of-64TB", get_2d_huge_reply},
        {"memset-past-the-end", memset_past_the_end},
        {"copy-to-a-smaller-destination", copy_to_a_smaller_destination},
        {"copy-past-the-end", copy_past_the_end},
        {"unknown-buffer-handle", unknown_buffer_handle},
        {"freed-buffer-handle", freed_buffer_handle},
        // Tensor lists.
        {"tensor-list-of-4G-tensors-and-nodes", huge_counts},
        {"graph-data-outside-its-buffer", data_outside_buffer},
        {"graph-data-offset-overflow", data_offset_overflow},
        {"graph-on-an-unknown-buffer", graph_on_unknown_buffer},
        {"graph-on-a-freed-buffer", graph_on_freed_buffer},
        {"type-id-out-of-range", [](Guest &g) { return type_out_of_range(g, 1000); }},
        {"type-id-negative", [](Guest &g) { return type_out_of_range(g, -1); }},
        {"removed-type-q4_2", [](Guest &g) { return type_out_of_range(g, 4); }},
        {"ne0-not-a-multiple-of-the-block-size", ne0_not_a_block_multiple},
        {"src-index-naming-itself", [](Guest &g) { return source_index(g, INT32_MIN); }},
        {"src-index-past-the-end", [](Guest &g) { return source_index(g, 1000); }},
        {"src-index-negative", [](Guest &g) { return source_index(g, -7); }},
        {"view-src-index-naming-itself", [](Guest &g) { return view_source_index(g, INT32_MIN); }},
        {"view-src-index-past-the-end", [](Guest &g) { return view_source_index(g, 1 << 30); }},
        {"node-index-past-the-end", node_index_out_of_range},
        {"op-custom", [](Guest &g) { return op_refused(g, GGML_OP_CUSTOM); }},
        {"op-map-custom1", [](Guest &g) { return op_refused(g, GGML_OP_MAP_CUSTOM1); }},
        {"op-id-out-of-range", [](Guest &g) { return op_refused(g, 5000); }},
        {"view-offset-past-its-source", [](Guest &g) { return view_offset_outside_source(g, true); }},
        {"view-offset-elsewhere-than-it-lies", [](Guest &g) { return view_offset_outside_source(g, false); }},
        {"replay-of-an-empty-slot", [](Guest &g) { return replay_of_an_empty_slot(g, 3); }},
        {"replay-of-a-slot-past-the-last", [](Guest &g) { return replay_of_an_empty_slot(g, kGraphSlots); }},
        // Nodes against their op's rules.
        node("add-without-src1", add, [](std::vector<uint8_t> &l) { drop_source(l, 1); }),
        node("mul-mat-without-src1", mul_mat, [](std::vector<uint8_t> &l) { drop_source(l, 1); }),
        node("flash-attn-without-v", flash_attn, [](std::vector<uint8_t> &l) { drop_source(l, 2); }),
        node("unary-without-src0", silu, [](std::vector<uint8_t> &l) { drop_source(l, 0); }),
        node("add-of-shapes-that-do-not-broadcast", add, [](std::vector<uint8_t> &l) { shrink_rows(l, "right", 3); }),
        node("mul-mat-of-rows-of-different-length", mul_mat,
             [](std::vector<uint8_t> &l) { shrink_rows(l, "input", 16); }),
        node("mul-mat-result-larger-than-its-sources", mul_mat,
             [](std::vector<uint8_t> &l) { edit(l, index_of(l, "victim"), [](WireTensor &t) { t.ne[1] = 5; }); }),
        node("get-rows-with-f32-row-ids", get_rows,
             [](std::vector<uint8_t> &l) {
                 edit(l, index_of(l, "rows"), [](WireTensor &t) { t.type = GGML_TYPE_F32; });
             }),
        node("get-rows-result-with-fewer-rows-than-ids", get_rows,
             [](std::vector<uint8_t> &l) { edit(l, index_of(l, "victim"), [](WireTensor &t) { t.ne[1] = 3; }); }),
        node("rope-with-too-few-positions", rope, [](std::vector<uint8_t> &l) { shrink_rows(l, "positions", 2); }),
        node("rope-n-dims-past-the-row", rope,
             [](std::vector<uint8_t> &l) {
                 edit(l, index_of(l, "victim"), [](WireTensor &t) { t.op_params[1] = 128; });
             }),
        // ggml-cpu divides by the sections' sum (SIGFPE): {1, -1, 0, 0} passes its assert.
        node("rope-mrope-sections-adding-up-to-zero", multi_rope,
             [](std::vector<uint8_t> &l) {
                 edit(l, index_of(l, "victim"), [](WireTensor &t) {
                     t.op_params[11] = 1;
                     t.op_params[12] = -1;
                     t.op_params[13] = 0;
                 });
             }),
        // The issue-14 write: a result of one row whose nb[1], never multiplied by the
        // span check (ne[1] - 1 = 0), aims the kernel's other seven rows anywhere.
        node("pool-result-row-stride-of-a-size-1-dimension", pool_rows,
             [](std::vector<uint8_t> &l) {
                 edit(l, index_of(l, "victim"), [](WireTensor &t) {
                     t.ne[1] = 1;
                     t.nb[1] = 4096;
                     t.nb[2] = t.nb[3] = 4096;
                 });
             }),
        node(
            "op-without-a-rule", [](GuestGraph &g) { return g.place(ggml_win_part(g.ctx(), g.f32(8, 8, 8), 4)); },
            [](std::vector<uint8_t> &) {}),
        node("soft-max-mask-shorter-than-its-rows", soft_max,
             [](std::vector<uint8_t> &l) { shrink_rows(l, "mask", 16); }),
        node("cpy-to-a-smaller-destination", copy, [](std::vector<uint8_t> &l) { shrink_rows(l, "destination", 8); }),
        node("flash-attn-mask-shorter-than-the-keys", flash_attn,
             [](std::vector<uint8_t> &l) { shrink_rows(l, "mask", 8); }),
        node("unary-op-id-out-of-range", silu,
             [](std::vector<uint8_t> &l) {
                 edit(l, index_of(l, "victim"), [](WireTensor &t) { t.op_params[0] = 1000; });
             }),
        node("mul-mat-over-a-zero-stride-source-of-2^50-elements", mul_mat_over_zero_strides,
             [](std::vector<uint8_t> &) {}),
        {"supports-op-of-mul-mat-without-src1", [](Guest &g) { return query_without_source(g, true); }},
        {"alloc-size-of-mul-mat-without-src1", [](Guest &g) { return query_without_source(g, false); }},
    };
}

std::vector<Attack> contained_attacks() {
    return {
        {"get-rows-with-a-row-id-past-the-end",
         [](Guest &g) { return contained(g, get_rows_with_row_id_past_the_end); }},
    };
}

}  // namespace

int main(int argc, char **argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: ggml-remote-attack-client ENDPOINT [--contained] [--list] [NAME...]\n");
        return 2;
    }
    bool list_only = false, contained_group = false;
    std::vector<std::string> only;
    for (int i = 2; i < argc; ++i) {
        const std::string arg = argv[i];
        if (arg == "--list")
            list_only = true;
        else if (arg == "--contained")
            contained_group = true;
        else
            only.push_back(arg);
    }
    const std::vector<Attack> attacks = contained_group ? contained_attacks() : refused_attacks();
    if (list_only) {
        for (const Attack &attack : attacks) std::printf("%s\n", attack.name);
        return 0;
    }
    Endpoint endpoint;
    Status status = parse_endpoint(argv[1], &endpoint);
    if (!status) {
        std::fprintf(stderr, "ggml-remote-attack-client: %s\n", status.message().c_str());
        return 2;
    }

    int ran = 0, failed = 0;
    for (const Attack &attack : attacks) {
        if (!only.empty() && std::find(only.begin(), only.end(), attack.name) == only.end()) continue;
        Guest guest;
        status = guest.connect(endpoint);
        Verdict verdict = status.ok() ? attack.run(guest) : failure("cannot connect: " + status.message());
        ++ran;
        if (!verdict.passed) ++failed;
        std::printf("%s %s: %s\n", verdict.passed ? "PASS" : "FAIL", attack.name, verdict.what.c_str());
        std::fflush(stdout);
    }
    if (ran == 0) {
        std::fprintf(stderr, "ggml-remote-attack-client: no attack matched\n");
        return 2;
    }
    std::printf("%d attacks, %d passed, %d failed\n", ran, ran - failed, failed);
    return failed == 0 ? 0 : 1;
}
