// ggml-remote-services: the weight store's owner, the model library and the peer
// broker, for the listener (ggml-remote-server) that started it with its services
// channel on descriptor 3 (host/services/services.h). Not meant to be run by hand.
#include <fcntl.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "host/common/server_log.h"
#include "host/common/services_channel.h"
#include "host/services/services.h"

using namespace ggml_remote;

int main(int argc, char **argv) {
    const std::vector<std::string> arguments(argv + 1, argv + argc);
    host::ServicesOptions options;
    const Status read = host::read_services_arguments(arguments, &options);
    if (!read) {
        host::log_error(read.message());
        return 2;
    }
    host::set_log_format(options.log_format);
    if (::fcntl(host::kServicesChannelFd, F_GETFD) < 0) {
        host::log_error(
            "ggml-remote-services serves the session workers of ggml-remote-server, which starts it; "
            "run ggml-remote-server instead");
        return 2;
    }
    host::run_services(host::kServicesChannelFd, options);
}
