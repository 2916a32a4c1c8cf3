// The listener-to-worker contract (host/common/worker_contract.h): what the
// listener writes, the worker reads back the same.
#include "host/common/worker_contract.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace ggml_remote::host {
namespace {

using ::testing::HasSubstr;

WorkerLaunch read_back(const std::vector<std::string> &args) {
    WorkerLaunch launch;
    for (size_t i = 0; i + 1 < args.size(); i += 2) {
        EXPECT_TRUE(is_worker_launch_flag(args[i])) << args[i];
        EXPECT_TRUE(read_worker_launch_flag(args[i], args[i + 1], &launch).ok()) << args[i];
    }
    return launch;
}

TEST(WorkerContract, EveryLaunchFieldSurvivesTheCommandLine) {
    WorkerLaunch sent;
    sent.client_fd = 3;
    sent.session_id = 41;
    sent.peer = "tls://10.0.0.1:9 (identity x)";
    sent.status_fd = 4;
    sent.status_slot = 7;
    sent.admission_fd = 5;
    sent.store_fd = 8;
    const WorkerLaunch got = read_back(worker_launch_arguments(sent));
    EXPECT_EQ(got.client_fd, 3);
    EXPECT_EQ(got.session_id, 41);
    EXPECT_EQ(got.peer, sent.peer);
    EXPECT_EQ(got.status_fd, 4);
    EXPECT_EQ(got.status_slot, 7);
    EXPECT_EQ(got.admission_fd, 5);
    EXPECT_EQ(got.store_fd, 8);
}

TEST(WorkerContract, UnsetDescriptorsAreNotPassed) {
    WorkerLaunch sent;
    sent.client_fd = 3;
    sent.peer = "unix:pid 1";
    const std::vector<std::string> args = worker_launch_arguments(sent);
    EXPECT_EQ(args.size(), 6u);
    const WorkerLaunch got = read_back(args);
    EXPECT_EQ(got.status_fd, -1);
    EXPECT_EQ(got.store_fd, -1);
}

TEST(WorkerContract, AMalformedNumberIsRefusedByName) {
    WorkerLaunch launch;
    const Status status = read_worker_launch_flag("--worker-fd", "3x", &launch);
    EXPECT_FALSE(status.ok());
    EXPECT_THAT(status.message(), HasSubstr("--worker-fd"));
    EXPECT_FALSE(read_worker_launch_flag("--store-fd", "-2", &launch).ok());
    EXPECT_FALSE(is_worker_launch_flag("--listen"));
}

TEST(WorkerContract, TheDeviceProbeAnswerReadsBack) {
    const std::string answer = device_probe_line({"CPU", "AMD\tEPYC\n", 1u << 30, 1u << 29}) +
                               device_probe_line({"Vulkan0", "llvmpipe", 2, 1});
    std::vector<ProbedDevice> devices;
    ASSERT_TRUE(parse_device_probe(answer, &devices).ok());
    ASSERT_EQ(devices.size(), 2u);
    EXPECT_EQ(devices[0].description, "AMD EPYC ");  // no tab or newline survives in a field
    EXPECT_EQ(devices[0].total_bytes, 1u << 30);
    EXPECT_EQ(devices[1].name, "Vulkan0");
}

TEST(WorkerContract, TheDeviceProbeErrorIsTheProbesWords) {
    std::vector<ProbedDevice> devices;
    const Status status = parse_device_probe(device_probe_error_line("no host device named 'GPU9'"), &devices);
    EXPECT_EQ(status.code(), Code::not_found);
    EXPECT_EQ(status.message(), "no host device named 'GPU9'");
    EXPECT_FALSE(parse_device_probe("", &devices).ok());
    EXPECT_FALSE(parse_device_probe("garbage\n", &devices).ok());
}

}  // namespace
}  // namespace ggml_remote::host
