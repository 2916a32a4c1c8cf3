#include "host/listener/device_probe.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "transport/unique_fd.h"

namespace ggml_remote::host {

namespace {

std::vector<std::string> probe_arguments(const std::string &worker_program, const ServingOptions &options) {
    std::vector<std::string> args = {worker_program, "--list-devices"};
    for (const std::string &name : options.devices) args.insert(args.end(), {"--device", name});
    if (options.verbose) args.push_back("--verbose");
    // What ggml says goes to our stderr: in our lines' format.
    if (options.log_format == LogFormat::json) args.insert(args.end(), {"--log-format", "json"});
    return args;
}

// Runs the probe with its stdout on a pipe (its stderr stays ours: what ggml says
// while loading backends reaches the server's log as before); its whole output.
Status run_probe(const std::vector<std::string> &args, std::string *output, int *wait_status) {
    int ends[2];
    if (::pipe2(ends, O_CLOEXEC) != 0) return error(Code::error, std::string("pipe: ") + std::strerror(errno));
    UniqueFd read_end(ends[0]), write_end(ends[1]);
    std::vector<char *> argv;
    std::vector<std::string> owned = args;
    for (std::string &arg : owned) argv.push_back(arg.data());
    argv.push_back(nullptr);
    const pid_t child = ::fork();
    if (child < 0) return error(Code::error, std::string("fork: ") + std::strerror(errno));
    if (child == 0) {
        if (::dup2(write_end.get(), STDOUT_FILENO) < 0) ::_exit(127);
        ::execv(argv[0], argv.data());
        ::_exit(127);
    }
    write_end.reset();
    char buffer[4096];
    ssize_t got;
    while ((got = ::read(read_end.get(), buffer, sizeof(buffer))) != 0) {
        if (got > 0)
            output->append(buffer, static_cast<size_t>(got));
        else if (errno != EINTR)
            break;
    }
    while (::waitpid(child, wait_status, 0) < 0 && errno == EINTR) {
    }
    return Status::success();
}

}  // namespace

Status probe_devices(const std::string &worker_program, const ServingOptions &options,
                     std::vector<ProbedDevice> *devices) {
    std::string output;
    int wait_status = 0;
    Status status = run_probe(probe_arguments(worker_program, options), &output, &wait_status);
    if (!status) return status;
    status = parse_device_probe(output, devices);
    const bool answered = status.ok() || status.code() == Code::not_found;  // its list, or its error line
    if (answered || (WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0)) return status;
    if (WIFSIGNALED(wait_status)) {
        return error(Code::error, "the device probe (" + worker_program + " --list-devices) died of signal " +
                                      std::to_string(WTERMSIG(wait_status)) + " while loading the host's backends");
    }
    return error(Code::error, "the device probe (" + worker_program + " --list-devices) failed with exit status " +
                                  std::to_string(WEXITSTATUS(wait_status)));
}

}  // namespace ggml_remote::host
