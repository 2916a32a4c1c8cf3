// ggml-remote-hostile-server: a server that lies to its guests. It stands between
// a guest and a real ggml-remote-server (both on unix sockets), passes every frame
// on, and falsifies the replies that its attack names:
//   alloc-short   a BufferAlloc reply gives half the size asked
//   huge-length   a DeviceInfo reply announces a payload of 2^62 bytes
//   devices       the handshake claims 2^31 devices
//   alignment     a DeviceInfo reply asks for a buffer alignment of 2^63
//   get-short     a GetTensor reply has half the bytes asked
//   stall         after the guest's first graph compute, no reply ever comes
//                 (the connection stays open)
// A guest must end each with a ggml error, in bounded time: no abort, no
// exception, no endless log (tests/integration/errors_hostile_server.sh).
// usage: ggml-remote-hostile-server LISTEN-PATH SERVER-PATH ATTACK
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "protocol/commands.h"
#include "protocol/wire.h"

using namespace ggml_remote::protocol;

namespace {

enum class Attack { alloc_short, huge_length, devices, alignment, get_short, stall };

bool read_exactly(int fd, void *data, size_t size) {
    auto *out = static_cast<uint8_t *>(data);
    while (size > 0) {
        const ssize_t got = ::recv(fd, out, size, 0);
        if (got <= 0) return false;
        out += got;
        size -= static_cast<size_t>(got);
    }
    return true;
}

bool write_all(int fd, const void *data, size_t size) {
    const auto *in = static_cast<const uint8_t *>(data);
    while (size > 0) {
        const ssize_t sent = ::send(fd, in, size, MSG_NOSIGNAL);
        if (sent <= 0) return false;
        in += sent;
        size -= static_cast<size_t>(sent);
    }
    return true;
}

sockaddr_un address_of(const std::string &path) {
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::snprintf(address.sun_path, sizeof(address.sun_path), "%s", path.c_str());
    return address;
}

// One guest's connection and its connection to the real server.
struct Relay {
    int guest = -1, server = -1;
    Attack attack;
    std::atomic<bool> computed{false};  // the guest sent a graph compute
    std::mutex mutex;                   // guards the two lists
    std::vector<uint64_t> alloc_sizes;  // the sizes asked, in order (replies come in order)
    std::vector<uint64_t> get_sizes;

    ~Relay() {
        ::close(guest);
        ::close(server);
    }
    void hang_up() {
        ::shutdown(guest, SHUT_RDWR);
        ::shutdown(server, SHUT_RDWR);
    }
};

bool read_frame(int fd, FrameHeader *header, std::vector<uint8_t> *payload) {
    if (!read_exactly(fd, header, sizeof(*header))) return false;
    if (header->payload_size > (uint64_t(1) << 30)) return false;
    payload->resize(header->payload_size);
    return read_exactly(fd, payload->data(), payload->size());
}

// Guest to server: passed on as it is; what the lies need is noted on the way.
void guest_to_server(std::shared_ptr<Relay> relay) {
    FrameHeader header;
    std::vector<uint8_t> payload;
    while (read_frame(relay->guest, &header, &payload)) {
        const auto command = static_cast<CommandId>(header.command);
        if (command == CommandId::graph_compute) relay->computed = true;
        if (command == CommandId::buffer_alloc && payload.size() >= sizeof(BufferAlloc::Request)) {
            BufferAlloc::Request request;
            std::memcpy(&request, payload.data(), sizeof(request));
            std::lock_guard<std::mutex> lock(relay->mutex);
            relay->alloc_sizes.push_back(request.size);
        }
        if (command == CommandId::get_tensor && payload.size() >= sizeof(GetTensor::Request)) {
            GetTensor::Request request;
            std::memcpy(&request, payload.data(), sizeof(request));
            std::lock_guard<std::mutex> lock(relay->mutex);
            relay->get_sizes.push_back(request.range.size);
        }
        if (!write_all(relay->server, &header, sizeof(header)) ||
            !write_all(relay->server, payload.data(), payload.size())) {
            break;
        }
    }
    relay->hang_up();
}

// Falsifies one reply as the attack says; false: send nothing more.
bool falsify(Relay &relay, FrameHeader &header, std::vector<uint8_t> &payload, size_t *alloc_seen, size_t *get_seen) {
    const auto command = static_cast<CommandId>(header.command);
    const bool ok = header.status == 0;
    std::lock_guard<std::mutex> lock(relay.mutex);
    switch (relay.attack) {
        case Attack::devices:
            if (command == CommandId::hello && ok && payload.size() >= sizeof(Hello::Reply)) {
                auto *reply = reinterpret_cast<Hello::Reply *>(payload.data());
                reply->device_count = 1u << 31;
            }
            break;
        case Attack::huge_length:
            if (command == CommandId::device_info) header.payload_size = uint64_t(1) << 62;
            break;
        case Attack::alignment:
            if (command == CommandId::device_info && ok && payload.size() >= sizeof(DeviceInfo::Reply)) {
                reinterpret_cast<DeviceInfo::Reply *>(payload.data())->buffer_alignment = uint64_t(1) << 63;
            }
            break;
        case Attack::alloc_short:
            if (command == CommandId::buffer_alloc && *alloc_seen < relay.alloc_sizes.size()) {
                const uint64_t asked = relay.alloc_sizes[(*alloc_seen)++];
                if (ok && payload.size() >= sizeof(BufferAlloc::Reply)) {
                    reinterpret_cast<BufferAlloc::Reply *>(payload.data())->size = asked / 2;
                }
            }
            break;
        case Attack::get_short:
            if (command == CommandId::get_tensor && *get_seen < relay.get_sizes.size()) {
                (*get_seen)++;
                if (ok && payload.size() >= 2) {
                    payload.resize(payload.size() / 2);
                    header.payload_size = payload.size();
                }
            }
            break;
        case Attack::stall:
            if (relay.computed) return false;
            break;
    }
    return true;
}

// Server to guest: every reply, falsified where the attack says.
void server_to_guest(std::shared_ptr<Relay> relay) {
    FrameHeader header;
    std::vector<uint8_t> payload;
    size_t alloc_seen = 0, get_seen = 0;
    bool silent = false;
    while (read_frame(relay->server, &header, &payload)) {
        if (silent) continue;  // the server's replies go nowhere; the guest waits
        if (!falsify(*relay, header, payload, &alloc_seen, &get_seen)) {
            std::fprintf(stderr, "hostile-server: withholding every reply from now on\n");
            silent = true;
            continue;
        }
        if (!write_all(relay->guest, &header, sizeof(header)) ||
            !write_all(relay->guest, payload.data(), payload.size())) {
            break;
        }
    }
    if (!silent) relay->hang_up();
}

bool parse_attack(const std::string &name, Attack *attack) {
    const struct {
        const char *name;
        Attack attack;
    } known[] = {{"alloc-short", Attack::alloc_short}, {"huge-length", Attack::huge_length},
                 {"devices", Attack::devices},         {"alignment", Attack::alignment},
                 {"get-short", Attack::get_short},     {"stall", Attack::stall}};
    for (const auto &entry : known) {
        if (name == entry.name) {
            *attack = entry.attack;
            return true;
        }
    }
    return false;
}

int listen_on(const std::string &path) {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un address = address_of(path);
    ::unlink(path.c_str());
    if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr *>(&address), sizeof(address)) != 0 || ::listen(fd, 16) != 0) {
        std::perror("hostile-server: listen");
        return -1;
    }
    return fd;
}

}  // namespace

int main(int argc, char **argv) {
    Attack attack;
    if (argc != 4 || !parse_attack(argv[3], &attack)) {
        std::fprintf(stderr,
                     "usage: %s LISTEN-PATH SERVER-PATH "
                     "alloc-short|huge-length|devices|alignment|get-short|stall\n",
                     argv[0]);
        return 2;
    }
    const int listener = listen_on(argv[1]);
    if (listener < 0) return 1;
    std::fprintf(stderr, "hostile-server: listening on %s, attack %s\n", argv[1], argv[3]);
    for (;;) {
        const int guest = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
        if (guest < 0) continue;
        auto relay = std::make_shared<Relay>();
        relay->guest = guest;
        relay->attack = attack;
        relay->server = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_un address = address_of(argv[2]);
        if (::connect(relay->server, reinterpret_cast<sockaddr *>(&address), sizeof(address)) != 0) {
            std::perror("hostile-server: connect to the real server");
            continue;
        }
        std::thread(guest_to_server, relay).detach();
        std::thread(server_to_guest, relay).detach();
    }
}
