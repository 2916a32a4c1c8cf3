// ggml-remote-worker: serves exactly one guest, for the listener (ggml-remote-server)
// that started it with the guest's connection; or, with --list-devices, lists the
// host's devices for it (listener/device_probe.h). Not meant to be run by hand.
#include <cstdio>
#include <string>
#include <vector>

#include "host/common/server_log.h"
#include "host/common/serving_flags.h"
#include "host/common/worker_contract.h"
#include "host/worker/session/host_devices.h"
#include "host/worker/session/worker.h"

using namespace ggml_remote;

namespace {

// The device probe's answer on stdout: a line per device, or the error line.
int list_devices(const host::ServingOptions &options) {
    host::load_host_backends(options.verbose);
    std::vector<ggml_backend_dev_t> devices;
    const Status status = host::select_devices(options.devices, &devices);
    std::string answer = status ? "" : host::device_probe_error_line(status.message());
    for (ggml_backend_dev_t device : devices) {
        size_t free = 0, total = 0;
        ggml_backend_dev_memory(device, &free, &total);
        answer +=
            host::device_probe_line({ggml_backend_dev_name(device), ggml_backend_dev_description(device), total, free});
    }
    std::fputs(answer.c_str(), stdout);
    return status ? 0 : 1;
}

}  // namespace

int main(int argc, char **argv) {
    host::ServingOptions options;
    host::WorkerLaunch launch;
    bool list = false;
    host::CommandLineCursor args(argc, argv);
    while (args.next()) {
        const std::string flag = args.flag();
        if (flag == "--list-devices") {
            list = true;
        } else if (host::is_worker_launch_flag(flag)) {
            const Status read = host::read_worker_launch_flag(flag, args.value(), &launch);
            if (!read) host::fail_command_line(read.message());
        } else if (!host::parse_serving_flag(args, &options)) {
            host::fail_command_line("unknown argument: " + flag);
        }
    }
    host::set_log_format(options.log_format);
    // The listener named a malformed value at its start; a worker keeps quiet.
    (void)host::read_server_environment(&options);
    if (list) return list_devices(options);
    if (launch.client_fd < 0) {
        host::fail_command_line(
            "ggml-remote-worker serves one guest for ggml-remote-server, which starts it; "
            "run ggml-remote-server instead");
    }
    return host::run_worker(launch, options);
}
