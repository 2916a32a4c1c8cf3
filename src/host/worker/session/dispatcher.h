// Dispatcher: one handler per command, with the decoding done once for all.
#pragma once

#include <array>
#include <functional>
#include <type_traits>
#include <vector>

#include "protocol/commands.h"
#include "transport/unique_fd.h"

namespace ggml_remote::host {

// What a handler hands back besides its fixed Reply: owned bytes, or a view of
// memory that stays valid until the reply is sent (the contents of a buffer in CPU
// memory), or bytes written when sent (`fill`: a device buffer's contents).
struct ReplyTail {
    // Writes the tail's bytes [at, at + size) into `into`.
    using Fill = std::function<void(uint64_t at, uint8_t *into, size_t size)>;

    std::vector<uint8_t> owned;
    protocol::ByteView view;
    UniqueFd fd;  // a descriptor to pass along (unix sockets), closed once sent
    // serve() has `fill` write straight into the ring, or into a bounded piece sent
    // at a time over a socket (FramedStream::send_in_place); in-process callers
    // gather() it into `owned` first.
    Fill fill;
    uint64_t fill_size = 0;

    void gather() {
        if (!fill) return;
        owned.resize(fill_size);
        fill(0, owned.data(), fill_size);
        fill = nullptr;
    }
    // Not for a tail that has a `fill` (gather() it first).
    protocol::ByteView bytes() const { return view.data != nullptr ? view : protocol::ByteView(owned); }
    uint64_t size() const { return fill ? fill_size : bytes().size; }
};

// A request's tail left in the stream (Session::serve: tensor data), read as it
// comes instead of being gathered into the frame first: where it lies in the
// shared ring, or from the socket a bounded piece at a time.
class TailStream {
  public:
    // Takes the bytes [at, at + size) of the tail.
    using Take = std::function<void(uint64_t at, const uint8_t *piece, size_t size)>;
    virtual ~TailStream() = default;
    virtual uint64_t size() const = 0;
    // Hands every byte of the tail, in order and at most once, to `take`.
    virtual Status read(const Take &take) = 0;
};

// Everything the session needs to send one reply.
struct ReplyFrame {
    std::vector<uint8_t> fixed;  // the command's Reply struct
    ReplyTail tail;
};

// One command being handled: what came with its Request, and what goes back.
template <class Cmd>
struct Call {
    protocol::ByteView tail;         // the bytes after the Request (commands that take a tail)
    std::vector<UniqueFd> &fds;      // descriptors that came with it; a handler moves out those it keeps
    typename Cmd::Reply reply{};     // the fixed reply, sent when the handler succeeds
    ReplyTail &reply_tail;           // what follows it
    TailStream *streamed = nullptr;  // set when the tail is still in the stream (`tail` is then empty)

    uint64_t tail_size() const { return streamed != nullptr ? streamed->size() : tail.size; }
    // Hands the tail's bytes to `take` in order: in one piece, or piece by piece from the stream.
    Status read_tail(const TailStream::Take &take) {
        if (streamed != nullptr) return streamed->read(take);
        if (tail.size > 0) take(0, tail.data, tail.size);
        return Status::success();
    }
};

class Dispatcher {
  public:
    // `streamed`: the payload's tail when it is still in the stream (else null).
    using RawHandler = std::function<Status(protocol::ByteView payload, TailStream *streamed,
                                            std::vector<UniqueFd> &fds, ReplyFrame *reply)>;

    // Cmd's requests go to (owner->*handler)(request, call).
    template <class Cmd, class Owner>
    void on(Owner *owner, Status (Owner::*handler)(const typename Cmd::Request &, Call<Cmd> &)) {
        handlers_[static_cast<size_t>(Cmd::id)] = [owner, handler](protocol::ByteView payload, TailStream *streamed,
                                                                   std::vector<UniqueFd> &fds,
                                                                   ReplyFrame *reply) -> Status {
            typename Cmd::Request request;
            if (Status s = decode_request<Cmd>(payload, &request); !s) return s;
            if (streamed != nullptr && !protocol::takes_tail(Cmd::id)) {
                return error(Code::bad_request, std::string(protocol::command_name(Cmd::id)) + " takes no tail");
            }
            Call<Cmd> call{payload.subview(sizeof(request)), fds, {}, reply->tail, streamed};
            Status status = (owner->*handler)(request, call);
            if (status.ok() && !std::is_empty<typename Cmd::Reply>::value) {
                protocol::append_pod(reply->fixed, call.reply);
            }
            return status;
        };
    }

    // Null when the command is unknown.
    const RawHandler *find(uint16_t command) const {
        if (command >= handlers_.size() || !handlers_[command]) return nullptr;
        return &handlers_[command];
    }
    bool one_way(uint16_t command) const { return protocol::command_has(command, protocol::kOneWay); }

  private:
    // The request's fixed part; refused when short, or longer than it for a
    // command that takes no tail.
    template <class Cmd>
    static Status decode_request(protocol::ByteView payload, typename Cmd::Request *request) {
        constexpr size_t size = sizeof(typename Cmd::Request);
        const bool whole = protocol::read_pod(payload, 0, request);
        if (whole && (payload.size == size || protocol::takes_tail(Cmd::id))) return Status::success();
        return error(Code::bad_request, std::string(protocol::command_name(Cmd::id)) + ": request of " +
                                            std::to_string(payload.size) + " bytes is " +
                                            (whole ? "longer than its " : "too short for its ") + std::to_string(size) +
                                            (whole ? " (this command takes no tail)" : ""));
    }

    static constexpr size_t kCount = static_cast<size_t>(protocol::CommandId::count_);
    std::array<RawHandler, kCount> handlers_{};
};

}  // namespace ggml_remote::host
