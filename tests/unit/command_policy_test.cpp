// The policy columns of the command list (protocol/commands.h): each holds what the
// dispatchers assume of it, and the old per-command tests read the same sets.
#include <gtest/gtest.h>

#include <set>
#include <type_traits>

#include "protocol/commands.h"

namespace ggml_remote::protocol {
namespace {

template <class F>
void for_each_command(F f) {
    std::apply([&f](auto... command) { (f(command), ...); }, AllCommands());
}

std::set<CommandId> commands_with(uint32_t policy) {
    std::set<CommandId> found;
    for_each_command([&](auto command) {
        using Cmd = decltype(command);
        if (command_has(Cmd::id, policy)) found.insert(Cmd::id);
    });
    return found;
}

TEST(CommandPolicy, OnlyTheHandshakeOpensASession) {
    EXPECT_EQ(commands_with(kOpensSession), std::set<CommandId>{CommandId::hello});
}

TEST(CommandPolicy, OnlyTensorWritesKeepTheirTailInTheRingAndAStoreEntryOpen) {
    const std::set<CommandId> writes{CommandId::set_tensor, CommandId::set_tensor_2d};
    EXPECT_EQ(commands_with(kTailInRing), writes);
    EXPECT_EQ(commands_with(kWritesWeights), writes);
}

// The failures of computes, and of the all-reduces between them (a peer server
// gone or hostile), reach the server's log.
TEST(CommandPolicy, OnlyComputeAndAllReduceFailuresAreLogged) {
    EXPECT_EQ(commands_with(kFailureLogged),
              (std::set<CommandId>{CommandId::graph_compute, CommandId::comm_all_reduce}));
}

TEST(CommandPolicy, ReleasesAreTheFreesAndLeavingAGroup) {
    EXPECT_EQ(commands_with(kReleases),
              (std::set<CommandId>{CommandId::buffer_free, CommandId::backend_free, CommandId::comm_leave}));
}

// A column that implies another: a tail read in place is a tail; a one-way command
// has nothing to reply, and a release never waits for a reply it could not get.
TEST(CommandPolicy, ColumnsAgreeWithEachOtherAndWithTheStructs) {
    for_each_command([](auto command) {
        using Cmd = decltype(command);
        const char *name = command_name(Cmd::id);
        if (command_has(Cmd::id, kTailInRing)) {
            EXPECT_TRUE(takes_tail(Cmd::id)) << name;
        }
        if (command_has(Cmd::id, kReleases)) {
            EXPECT_TRUE(Cmd::one_way) << name;
        }
        if (Cmd::one_way) {
            EXPECT_TRUE(std::is_empty<typename Cmd::Reply>::value) << name;
        }
        if (command_has(Cmd::id, kFixedReply)) {
            EXPECT_FALSE(Cmd::one_way) << name;  // a rule for a reply that never comes
        }
        EXPECT_EQ(Cmd::one_way, command_has(Cmd::id, kOneWay)) << name;
        EXPECT_EQ(request_size(Cmd::id), sizeof(typename Cmd::Request)) << name;
    });
}

TEST(CommandPolicy, AnIdOfNoCommandHasNoPolicy) {
    EXPECT_EQ(command_policy(CommandId::count_), kPlain);
    EXPECT_FALSE(command_has(uint16_t{0}, kOpensSession));
    EXPECT_FALSE(command_has(uint16_t{9999}, kOneWay));
    EXPECT_EQ(request_size(static_cast<CommandId>(9999)), 0u);
}

}  // namespace
}  // namespace ggml_remote::protocol
