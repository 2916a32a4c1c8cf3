#include "transport/peer_account.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
// After sys/socket.h, which it needs.
#include <linux/vm_sockets.h>

#include <cerrno>
#include <cstring>

namespace ggml_remote {

namespace {

std::string ipv4_text(const in_addr &address) {
    char text[INET_ADDRSTRLEN] = "";
    ::inet_ntop(AF_INET, &address, text, sizeof(text));
    return text;
}

std::string ipv6_prefix_text(in6_addr address) {
    std::memset(address.s6_addr + 8, 0, 8);  // the interface half is the host's to choose
    char text[INET6_ADDRSTRLEN] = "";
    ::inet_ntop(AF_INET6, &address, text, sizeof(text));
    return std::string(text) + "/64";
}

}  // namespace

std::string address_account(const sockaddr *address, socklen_t length) {
    if (address->sa_family == AF_INET && length >= static_cast<socklen_t>(sizeof(sockaddr_in))) {
        return "address " + ipv4_text(reinterpret_cast<const sockaddr_in *>(address)->sin_addr);
    }
    if (address->sa_family == AF_INET6 && length >= static_cast<socklen_t>(sizeof(sockaddr_in6))) {
        const in6_addr &ip = reinterpret_cast<const sockaddr_in6 *>(address)->sin6_addr;
        if (IN6_IS_ADDR_V4MAPPED(&ip)) {
            in_addr ipv4{};
            std::memcpy(&ipv4, ip.s6_addr + 12, sizeof(ipv4));
            return "address " + ipv4_text(ipv4);
        }
        return "address " + ipv6_prefix_text(ip);
    }
    if (address->sa_family == AF_VSOCK && length >= static_cast<socklen_t>(sizeof(sockaddr_vm))) {
        // The hypervisor sets a VM's CID; the guest cannot choose it.
        return "vsock cid " + std::to_string(reinterpret_cast<const sockaddr_vm *>(address)->svm_cid);
    }
    return "";
}

Status peer_account(int fd, PeerAccount *account) {
    sockaddr_storage address{};
    socklen_t length = sizeof(address);
    if (::getsockname(fd, reinterpret_cast<sockaddr *>(&address), &length) != 0) {
        return error(Code::error, std::string("getsockname: ") + std::strerror(errno));
    }
    if (address.ss_family == AF_UNIX) {
        ucred credentials{};
        socklen_t size = sizeof(credentials);
        if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &credentials, &size) != 0) {
            return error(Code::error, std::string("SO_PEERCRED: ") + std::strerror(errno));
        }
        account->kind = PeerAccount::Kind::user;
        account->uid = credentials.uid;
        account->key = "uid " + std::to_string(credentials.uid);
        return Status::success();
    }
    length = sizeof(address);
    if (::getpeername(fd, reinterpret_cast<sockaddr *>(&address), &length) != 0) {
        return error(Code::error, std::string("getpeername: ") + std::strerror(errno));
    }
    account->kind = PeerAccount::Kind::address;
    account->uid = 0;
    account->key = address_account(reinterpret_cast<const sockaddr *>(&address), length);
    if (account->key.empty()) {
        return error(Code::error, "a peer of address family " + std::to_string(address.ss_family));
    }
    return Status::success();
}

}  // namespace ggml_remote
