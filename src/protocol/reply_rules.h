// ReplyRule<Cmd>: what a server's reply to a command may hold, given the request
// that asked for it. The guest never trusts its server (across machines it is
// another party, and it may be taken over): RemoteSession reads every reply
// through its command's rule, before any of its bytes become an object of ours.
//
// Each rule has two parts:
//  - max_tail(request, request_tail): the most bytes the reply's tail may have.
//    The frame header's payload size is held against it before a byte of the
//    payload is read, so a huge length costs nothing (no allocation, no endless
//    read);
//  - check(request, reply, tail_size): the reply's fixed fields and its tail's
//    size against what was asked: sizes, counts, lengths, offsets, kinds.
// What a rule cannot see is checked where the guest holds it: an AllocSize
// answer against the tensor (guest/device.cpp), a node order against the graph
// (guest/node_order.cpp), a memory file against its size and seals
// (guest/buffer.cpp), a region offset against the region (RemoteSession::region_bytes).
//
// Every command with a reply has a rule: the static_assert below fails to
// compile for one without, and RemoteSession::Call<Cmd> cannot be used without one.
#pragma once

#include <cstdint>
#include <type_traits>

#include "protocol/commands.h"
#include "protocol/status.h"

namespace ggml_remote::protocol {

// The most devices a guest takes from one server (ggml's scheduler takes 16
// backends in all); a handshake that claims more is refused.
constexpr uint32_t kMaxServerDevices = 64;
// The longest refusal reason a guest reads; a longer one is a protocol error.
constexpr uint64_t kMaxReplyReason = 64 * 1024;
// DeviceInfo's three strings (name, description, buffer type name), in all.
constexpr uint64_t kMaxDeviceStrings = 4096;
// The largest buffer alignment a guest accepts (real devices ask for 32 to 4096 bytes).
constexpr uint64_t kMaxBufferAlignment = 1u << 20;
// ServerStatus's tables (the status command).
constexpr uint32_t kMaxStatusDevices = 1024;
constexpr uint32_t kMaxStatusSessions = 65536;

// Defined below for every command with a reply, and only for those: by the
// command's kFixedReply column, or a rule of its own.
template <class Cmd, class = void>
struct ReplyRule;

#define GGML_REMOTE_REPLY_RULE(Cmd)                                                                    \
    template <>                                                                                        \
    struct ReplyRule<Cmd> {                                                                            \
        static uint64_t max_tail(const Cmd::Request &request, uint64_t request_tail);                  \
        static Status check(const Cmd::Request &request, const Cmd::Reply &reply, uint64_t tail_size); \
    };
GGML_REMOTE_REPLY_RULE(Hello)
GGML_REMOTE_REPLY_RULE(DeviceInfo)
GGML_REMOTE_REPLY_RULE(AllocSize)
GGML_REMOTE_REPLY_RULE(BufferAlloc)
GGML_REMOTE_REPLY_RULE(GetTensor)
GGML_REMOTE_REPLY_RULE(GetTensor2d)
GGML_REMOTE_REPLY_RULE(GraphOptimize)
GGML_REMOTE_REPLY_RULE(ServerStatus)
#undef GGML_REMOTE_REPLY_RULE

// Whether a ServerStatus reply's tail of `tail_size` bytes holds the StatusUpload
// table after its sessions: the request asked for it and the server knew it.
bool status_reply_has_uploads(const ServerStatus::Request &request, const ServerStatus::Reply &reply,
                              uint64_t tail_size);

// A refusal of `tail_size` bytes after a reply that has none, or success.
Status reply_without_tail(CommandId id, uint64_t tail_size);

// The rule of a reply that is its fixed fields alone: no tail. Their values are
// the server's answer to a question (found or not, supported or not, a handle
// the server checks when it is used), with nothing to hold them against here.
template <class Cmd>
struct NoTailRule {
    static uint64_t max_tail(const typename Cmd::Request &, uint64_t) { return 0; }
    static Status check(const typename Cmd::Request &, const typename Cmd::Reply &, uint64_t tail_size) {
        return reply_without_tail(Cmd::id, tail_size);
    }
};
template <class Cmd>
struct ReplyRule<Cmd, std::enable_if_t<command_has(Cmd::id, kFixedReply)>> : NoTailRule<Cmd> {};

// Whether Cmd has a rule: one-way commands need none; for the others, an
// incomplete ReplyRule<Cmd> fails to compile here.
template <class Cmd, bool one_way = Cmd::one_way>
struct HasReplyRule : std::true_type {};
template <class Cmd>
struct HasReplyRule<Cmd, false> : std::integral_constant<bool, sizeof(ReplyRule<Cmd>) != 0> {};

#define GGML_REMOTE_REPLY_RULE_CHECK(number, name, Cmd, policy) \
    static_assert(HasReplyRule<Cmd>::value, #Cmd " has a reply but no ReplyRule");
GGML_REMOTE_COMMANDS(GGML_REMOTE_REPLY_RULE_CHECK)
#undef GGML_REMOTE_REPLY_RULE_CHECK

// The largest request and reply structs; RemoteSession keeps copies of both.
constexpr size_t kMaxRequestBytes = 64;
constexpr size_t kMaxReplyBytes = 64;

}  // namespace ggml_remote::protocol
