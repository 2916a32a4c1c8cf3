#include "host/common/peer_channel.h"

#include <utility>
#include <vector>

#include "host/common/store_channel.h"

namespace ggml_remote::host::peer_channel {

Status ask(int channel, const Request &request, int connection_to_send, int timeout_ms, UniqueFd *connection) {
    store_channel::NoSigpipe no_sigpipe;
    const size_t sent_fds = connection_to_send >= 0 ? 1 : 0;
    if (!store_channel::send_message(channel, &request, sizeof(request), &connection_to_send, sent_fds)) {
        return error(Code::disconnected, "the listener's peer broker is gone");
    }
    Reply reply;
    std::vector<UniqueFd> fds;
    if (!store_channel::receive_message(channel, &reply, sizeof(reply), &fds, 1, timeout_ms)) {
        return error(Code::disconnected, "no answer from the listener's peer broker");
    }
    reply.message[sizeof(reply.message) - 1] = '\0';
    if (reply.code != 0) return error(static_cast<Code>(reply.code), reply.message);
    if (connection != nullptr) {
        if (fds.size() != 1) return error(Code::error, "the listener's peer broker sent no connection");
        *connection = std::move(fds.front());
    }
    return Status::success();
}

}  // namespace ggml_remote::host::peer_channel
