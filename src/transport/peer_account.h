// Whom a guest's connection belongs to, for limits per peer: what the kernel says
// about the socket, never anything the guest sends.
#pragma once

#include <sys/socket.h>
#include <sys/types.h>

#include <string>

#include "protocol/status.h"

namespace ggml_remote {

struct PeerAccount {
    enum class Kind { user, address };
    Kind kind = Kind::address;
    uid_t uid = 0;    // Kind::user: the guest process's user
    std::string key;  // what limits count, also for log lines: "uid 1000", "address 10.0.0.7"
};

// The account of a connected socket: its user on a unix socket (SO_PEERCRED), its
// address on TCP or vsock (see address_account). An error when the kernel cannot say.
Status peer_account(int fd, PeerAccount *account);

// The account of a TCP peer's address: an IPv4 address as it is (also when it comes
// IPv4-mapped on an IPv6 socket); an IPv6 address by its /64 prefix, the block that
// one host is usually free to pick addresses from; a vsock peer by its VM's CID.
// Empty for another family.
std::string address_account(const sockaddr *address, socklen_t length);

}  // namespace ggml_remote
