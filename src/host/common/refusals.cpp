#include "host/common/refusals.h"

namespace ggml_remote::host {

static_assert(static_cast<size_t>(GuestRefusal::start_budget) + 1 == kGuestRefusalReasons);
static_assert(static_cast<size_t>(CommandRefusal::host_error) + 1 == kCommandRefusalReasons);

const char *refusal_name(GuestRefusal reason) {
    switch (reason) {
        case GuestRefusal::server_full:
            return "server_full";
        case GuestRefusal::peer_limit:
            return "peer_limit";
        case GuestRefusal::unauthenticated_full:
            return "unauthenticated_full";
        case GuestRefusal::unauthenticated_timeout:
            return "unauthenticated_timeout";
        case GuestRefusal::tls_failed:
            return "tls_failed";
        case GuestRefusal::version_mismatch:
            return "version_mismatch";
        case GuestRefusal::handshake_failed:
            return "handshake_failed";
        case GuestRefusal::server_error:
            return "server_error";
        case GuestRefusal::start_budget:
            return "start_budget";
    }
    return "unknown";
}

const char *refusal_name(CommandRefusal reason) {
    switch (reason) {
        case CommandRefusal::invalid_request:
            return "invalid_request";
        case CommandRefusal::limit_reached:
            return "limit_reached";
        case CommandRefusal::unsupported:
            return "unsupported";
        case CommandRefusal::host_error:
            return "host_error";
    }
    return "unknown";
}

CommandRefusal command_refusal_for(Code code) {
    switch (code) {
        case Code::bad_request:
        case Code::not_found:
            return CommandRefusal::invalid_request;
        case Code::limit_exceeded:
        case Code::out_of_memory:
            return CommandRefusal::limit_reached;
        case Code::unsupported:
            return CommandRefusal::unsupported;
        default:
            return CommandRefusal::host_error;
    }
}

bool decided_by_worker(GuestRefusal reason) {
    return reason == GuestRefusal::tls_failed || reason == GuestRefusal::version_mismatch ||
           reason == GuestRefusal::handshake_failed;
}

GuestRefusal handshake_refusal_for(Code code) {
    return code == Code::version_mismatch ? GuestRefusal::version_mismatch : GuestRefusal::handshake_failed;
}

}  // namespace ggml_remote::host
