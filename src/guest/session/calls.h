// The one generic way to make a call: a command is described once (its id, its
// request, its reply rule), and call<Cmd>() / post<Cmd>() do the rest through
// whatever runs the exchange (SessionCalls): RemoteSession for everyone, and its
// pipeline for a caller that already holds the session's lock (an object being
// restored on a new connection).
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "protocol/commands.h"
#include "protocol/reply_rules.h"
#include "transport/unique_fd.h"

namespace ggml_remote::guest {

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
    bool send_now = false;           // a one-way command that should not wait in the queue
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

// ReplyRule<Cmd>::check on the request and reply bytes an Exchange keeps.
template <class Cmd>
Status check_reply(const uint8_t *request_bytes, const uint8_t *reply_bytes, uint64_t tail_size) {
    typename Cmd::Request request;
    std::memcpy(&request, request_bytes, sizeof(request));
    typename Cmd::Reply reply{};
    if constexpr (!std::is_empty<typename Cmd::Reply>::value) std::memcpy(&reply, reply_bytes, sizeof(reply));
    return protocol::ReplyRule<Cmd>::check(request, reply, tail_size);
}

// Makes `x` wait for Cmd's reply and read it through ReplyRule<Cmd>; x.tail is set.
template <class Cmd>
void bind_rule(Exchange &x, const typename Cmd::Request &request) {
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
class Call;

// Where calls are made. Two kinds run them: RemoteSession, which takes its lock
// for each, and CallPipeline, for a caller that holds that lock already (a
// Restorable: restoring runs under the lock, so that no other call comes in
// between, and calling the session there would wait for ever).
class SessionCalls {
  public:
    virtual ~SessionCalls() = default;

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
    // A one-way command that leaves now, with the queue before it, instead of with
    // the next call: another server's work waits on it.
    template <class Cmd>
    Status post_now(const typename Cmd::Request &request) {
        static_assert(Cmd::one_way, "use call() for commands with a reply");
        Exchange exchange;
        exchange.fixed = protocol::ByteView(&request, sizeof(request));
        exchange.send_now = true;
        return run(Cmd::id, exchange);
    }

    // Frees a host buffer; the host then forgets its kept graphs, and so do we.
    virtual Status free_buffer(uint64_t buffer) = 0;
    // Counts model weights the host mapped instead of receiving (Counters).
    virtual void count_mapped_file(uint64_t bytes) = 0;

  protected:
    template <class Cmd>
    friend class Call;
    // Sends one request and, unless one-way or run later, reads its reply.
    virtual Status run(protocol::CommandId id, Exchange &exchange) = 0;
};

// One call<Cmd>() being described: a copy of the request and a few pointers, on
// the caller's stack. Each step returns the description, and dropping it unrun
// is a warning. Every place named must stay valid until the reply is read
// (run_later: until synchronize() or the next call).
template <class Cmd>
class [[nodiscard]] Call {
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
        return calls_->run(Cmd::id, exchange_);
    }
    // Sends the call; its reply is read later (by synchronize() or the next call),
    // so the guest goes on while the host works: ggml's asynchronous get and copy.
    // A failure is logged then, naming `what`.
    Status run_later(const char *what) {
        exchange_.deferred = what;
        return run();
    }

  private:
    friend class SessionCalls;
    Call(SessionCalls *calls, const typename Cmd::Request &request) : calls_(calls), request_(request) {}
    template <class Field, class Value>
    Call &set(Field Exchange::*field, Value value) {
        exchange_.*field = value;
        return *this;
    }

    SessionCalls *calls_;
    typename Cmd::Request request_;
    Exchange exchange_;  // its `fixed` is set when run: the description may have been copied
};

}  // namespace ggml_remote::guest
