#include "host/common/worker_contract.h"

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <sstream>

#include "protocol/commands.h"

namespace ggml_remote::host {

namespace {

// The flags that carry a descriptor or a number; --peer carries text.
struct NumberFlag {
    const char *flag;
    int WorkerLaunch::*field;
};

constexpr NumberFlag kNumberFlags[] = {
    {"--worker-fd", &WorkerLaunch::client_fd},       {"--session-id", &WorkerLaunch::session_id},
    {"--status-fd", &WorkerLaunch::status_fd},       {"--status-slot", &WorkerLaunch::status_slot},
    {"--admission-fd", &WorkerLaunch::admission_fd}, {"--store-fd", &WorkerLaunch::store_fd},
    {"--peer-channel-fd", &WorkerLaunch::peer_fd},
};

constexpr const char *kPeerFlag = "--peer";

constexpr char kDeviceTag[] = "device";
constexpr char kErrorTag[] = "error";

// A field of a probe line: no tab or newline inside.
std::string field(std::string text) {
    for (char &c : text) {
        if (c == '\t' || c == '\n' || c == '\r') c = ' ';
    }
    return text;
}

std::vector<std::string> split_tabs(const std::string &line) {
    std::vector<std::string> fields;
    std::string::size_type start = 0;
    while (true) {
        const std::string::size_type tab = line.find('\t', start);
        fields.push_back(line.substr(start, tab == std::string::npos ? std::string::npos : tab - start));
        if (tab == std::string::npos) return fields;
        start = tab + 1;
    }
}

}  // namespace

std::vector<std::string> worker_launch_arguments(const WorkerLaunch &launch) {
    std::vector<std::string> args = {"--worker-fd",  std::to_string(launch.client_fd),
                                     "--session-id", std::to_string(launch.session_id),
                                     kPeerFlag,      launch.peer};
    if (launch.status_slot >= 0) {
        args.insert(args.end(), {"--status-fd", std::to_string(launch.status_fd), "--status-slot",
                                 std::to_string(launch.status_slot)});
    }
    if (launch.admission_fd >= 0) args.insert(args.end(), {"--admission-fd", std::to_string(launch.admission_fd)});
    if (launch.store_fd >= 0) args.insert(args.end(), {"--store-fd", std::to_string(launch.store_fd)});
    if (launch.peer_fd >= 0) args.insert(args.end(), {"--peer-channel-fd", std::to_string(launch.peer_fd)});
    return args;
}

bool is_worker_launch_flag(const std::string &flag) {
    if (flag == kPeerFlag) return true;
    for (const NumberFlag &number : kNumberFlags) {
        if (flag == number.flag) return true;
    }
    return false;
}

Status read_worker_launch_flag(const std::string &flag, const std::string &value, WorkerLaunch *launch) {
    if (flag == kPeerFlag) {
        launch->peer = value;
        return Status::success();
    }
    for (const NumberFlag &number : kNumberFlags) {
        if (flag != number.flag) continue;
        char *end = nullptr;
        errno = 0;
        const long parsed = std::strtol(value.c_str(), &end, 10);
        if (value.empty() || *end != '\0' || errno != 0 || parsed < 0 || parsed > INT_MAX) {
            return error(Code::bad_request, flag + " needs a number, not '" + value + "'");
        }
        launch->*number.field = static_cast<int>(parsed);
        return Status::success();
    }
    return error(Code::bad_request, "not a worker launch flag: " + flag);
}

protocol::FrameHeader refusal_header(Code code, size_t reason_size) {
    return protocol::FrameHeader{static_cast<uint16_t>(protocol::CommandId::hello), protocol::kFrameReply,
                                 static_cast<int32_t>(code), reason_size};
}

std::string device_probe_line(const ProbedDevice &device) {
    return std::string(kDeviceTag) + '\t' + field(device.name) + '\t' + field(device.description) + '\t' +
           std::to_string(device.total_bytes) + '\t' + std::to_string(device.free_bytes) + '\n';
}

std::string device_probe_error_line(const std::string &message) {
    return std::string(kErrorTag) + '\t' + field(message) + '\n';
}

Status parse_device_probe(const std::string &output, std::vector<ProbedDevice> *devices) {
    devices->clear();
    std::istringstream lines(output);
    std::string line;
    while (std::getline(lines, line)) {
        const std::vector<std::string> fields = split_tabs(line);
        if (fields.size() == 2 && fields[0] == kErrorTag) return error(Code::not_found, fields[1]);
        if (fields.size() != 5 || fields[0] != kDeviceTag) {
            return error(Code::error, "the device probe answered a line it should not: " + field(line));
        }
        devices->push_back({fields[1], fields[2], std::strtoull(fields[3].c_str(), nullptr, 10),
                            std::strtoull(fields[4].c_str(), nullptr, 10)});
    }
    if (devices->empty()) return error(Code::error, "the device probe listed no device");
    return Status::success();
}

}  // namespace ggml_remote::host
