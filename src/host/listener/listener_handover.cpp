#include "host/listener/listener_handover.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "transport/socket.h"

namespace ggml_remote::host {

namespace {

constexpr int kFirstFd = 3;  // systemd's SD_LISTEN_FDS_START
// More than any listener hands over (its sockets, the board, the ledger and a pidfd
// per session); also bounds what a bad LISTEN_FDS makes us touch.
constexpr int kMostHandedFds = 1 << 16;

std::vector<std::string> split_names(const char *names) {
    std::vector<std::string> split;
    std::istringstream stream(names != nullptr ? names : "");
    for (std::string name; std::getline(stream, name, ':');) split.push_back(name);
    return split;
}

// Keeps `fd` in `slot` unless it already holds one.
void take_single(int fd, UniqueFd *slot) {
    ::fcntl(fd, F_SETFD, FD_CLOEXEC);
    if (!slot->valid()) {
        slot->reset(fd);
        return;
    }
    ::close(fd);  // one only
}

void take_one(int fd, const std::string &name, Inheritance *inheritance) {
    if (name == kHandedBoardName) return take_single(fd, &inheritance->status_board);
    if (name == kHandedLedgerName) return take_single(fd, &inheritance->ledger);
    if (name.rfind(kHandedWorkerPrefix, 0) == 0) {
        ::fcntl(fd, F_SETFD, FD_CLOEXEC);
        inheritance->workers.push_back({name, UniqueFd(fd)});
        return;
    }
    InheritedListener listener;
    if (!adopt_listening_socket(fd, &listener.socket)) {
        ::close(fd);
        return;
    }
    listener.unlink_at_exit = name == kHandedUnlinkName && listener.socket.endpoint.uses_unix_socket();
    if (name == kHandedListenName || name == kHandedUnlinkName) inheritance->from_listener = true;
    inheritance->sockets.push_back(std::move(listener));
}

}  // namespace

Inheritance take_inheritance() {
    Inheritance inheritance;
    const char *pid = std::getenv("LISTEN_PID");
    const char *count_text = std::getenv("LISTEN_FDS");
    if (pid == nullptr || count_text == nullptr || std::atol(pid) != static_cast<long>(::getpid())) return inheritance;
    const int count = std::atoi(count_text);
    const std::vector<std::string> names = split_names(std::getenv("LISTEN_FDNAMES"));
    for (int i = 0; i >= 0 && i < count && i < kMostHandedFds; ++i) {
        take_one(kFirstFd + i, i < static_cast<int>(names.size()) ? names[i] : std::string(), &inheritance);
    }
    unsetenv("LISTEN_PID");
    unsetenv("LISTEN_FDS");
    unsetenv("LISTEN_FDNAMES");
    return inheritance;
}

Status exec_with_fds(const std::string &program, const std::vector<std::string> &argv, const std::vector<HandedFd> &fds,
                     const sigset_t &mask) {
    std::vector<std::string> args = argv;
    std::vector<char *> pointers;
    for (std::string &arg : args) pointers.push_back(arg.data());
    pointers.push_back(nullptr);
    std::string names;
    for (const HandedFd &handed : fds) names += (names.empty() ? "" : ":") + handed.name;
    const int count = static_cast<int>(fds.size());
    // First out of the way of 3..3+count, then into place: no descriptor handed is
    // overwritten by another before it was moved.
    std::vector<int> moved;
    for (const HandedFd &handed : fds) {
        const int fd = ::fcntl(handed.fd, F_DUPFD_CLOEXEC, kFirstFd + count);
        if (fd < 0) return error(Code::error, std::string("dup: ") + std::strerror(errno));
        moved.push_back(fd);
    }
    for (int i = 0; i < count; ++i) {
        if (::dup2(moved[i], kFirstFd + i) < 0) return error(Code::error, std::string("dup2: ") + std::strerror(errno));
    }
    setenv("LISTEN_FDS", std::to_string(count).c_str(), 1);
    setenv("LISTEN_PID", std::to_string(::getpid()).c_str(), 1);
    setenv("LISTEN_FDNAMES", names.c_str(), 1);
    sigset_t blocked;
    ::sigprocmask(SIG_SETMASK, &mask, &blocked);
    ::execv(program.c_str(), pointers.data());
    const int failure = errno;
    ::sigprocmask(SIG_SETMASK, &blocked, nullptr);
    return error(Code::error, "exec " + program + ": " + std::strerror(failure));
}

namespace {

// One message to the service manager, with `fd` attached (-1: none).
Status notify_service_manager(const std::string &message, int fd) {
    const char *path = std::getenv("NOTIFY_SOCKET");
    if (path == nullptr || (path[0] != '/' && path[0] != '@')) return error(Code::error, "no service manager");
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    const size_t length = std::strlen(path);
    if (length >= sizeof(address.sun_path)) return error(Code::error, "NOTIFY_SOCKET: path too long");
    std::memcpy(address.sun_path, path, length);
    if (path[0] == '@') address.sun_path[0] = '\0';  // an abstract socket
    UniqueFd notify(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    if (!notify.valid()) return error(Code::error, std::string("socket: ") + std::strerror(errno));
    std::string text = message;
    iovec data{text.data(), text.size()};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
    msghdr header{};
    header.msg_name = &address;
    header.msg_namelen = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + length);
    header.msg_iov = &data;
    header.msg_iovlen = 1;
    if (fd >= 0) attach_fds(&header, control, sizeof(control), &fd, 1);
    if (::sendmsg(notify.get(), &header, MSG_NOSIGNAL) < 0) {
        return error(Code::error, "notify " + std::string(path) + ": " + std::strerror(errno));
    }
    return Status::success();
}

}  // namespace

bool has_service_manager() { return std::getenv("NOTIFY_SOCKET") != nullptr; }

Status store_with_service_manager(int fd, const std::string &name) {
    return notify_service_manager("FDSTORE=1\nFDNAME=" + name + "\n", fd);
}

Status remove_from_service_manager(const std::string &name) {
    return notify_service_manager("FDSTOREREMOVE=1\nFDNAME=" + name + "\n", -1);
}

}  // namespace ggml_remote::host
