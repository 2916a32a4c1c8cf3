// Dispatcher: one handler per command, with the decoding done once for all.
#pragma once

#include "protocol/commands.h"
#include "transport/unique_fd.h"

#include <array>
#include <functional>
#include <type_traits>
#include <vector>

namespace ggml_remote::host {

// What a handler hands back besides its fixed Reply: owned bytes, or a view of
// memory that stays valid until the reply is sent (the contents of a buffer in CPU memory).
struct ReplyTail {
    std::vector<uint8_t> owned;
    protocol::ByteView view;
    UniqueFd fd;  // a descriptor to pass along (unix sockets), closed once sent

    protocol::ByteView bytes() const { return view.data != nullptr ? view : protocol::ByteView(owned); }
};

// Everything the session needs to send one reply.
struct ReplyFrame {
    std::vector<uint8_t> fixed;  // the command's Reply struct
    ReplyTail tail;
};

// One command being handled: what came with its Request, and what goes back.
template <class Cmd>
struct Call {
    protocol::ByteView tail;      // the bytes after the Request (commands that take a tail)
    std::vector<UniqueFd> &fds;   // descriptors that came with it; a handler moves out those it keeps
    typename Cmd::Reply reply{};  // the fixed reply, sent when the handler succeeds
    ReplyTail &reply_tail;        // what follows it
};

class Dispatcher {
  public:
    using RawHandler = std::function<Status(protocol::ByteView payload, std::vector<UniqueFd> &fds, ReplyFrame *reply)>;

    // Cmd's requests go to (owner->*handler)(request, call).
    template <class Cmd, class Owner>
    void on(Owner *owner, Status (Owner::*handler)(const typename Cmd::Request &, Call<Cmd> &)) {
        handlers_[static_cast<size_t>(Cmd::id)] =
            [owner, handler](protocol::ByteView payload, std::vector<UniqueFd> &fds, ReplyFrame *reply) -> Status {
            typename Cmd::Request request;
            if (Status s = decode_request<Cmd>(payload, &request); !s) return s;
            Call<Cmd> call{payload.subview(sizeof(request)), fds, {}, reply->tail};
            Status status = (owner->*handler)(request, call);
            if (status.ok() && !std::is_empty<typename Cmd::Reply>::value) {
                protocol::append_pod(reply->fixed, call.reply);
            }
            return status;
        };
        one_way_[static_cast<size_t>(Cmd::id)] = Cmd::one_way;
    }

    // Null when the command is unknown.
    const RawHandler *find(uint16_t command) const {
        if (command >= handlers_.size() || !handlers_[command]) return nullptr;
        return &handlers_[command];
    }
    bool one_way(uint16_t command) const { return command < one_way_.size() && one_way_[command]; }

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
                                            (whole ? "longer than its " : "too short for its ") +
                                            std::to_string(size) + (whole ? " (this command takes no tail)" : ""));
    }

    static constexpr size_t kCount = static_cast<size_t>(protocol::CommandId::count_);
    std::array<RawHandler, kCount> handlers_{};
    std::array<bool, kCount> one_way_{};
};

}  // namespace ggml_remote::host
