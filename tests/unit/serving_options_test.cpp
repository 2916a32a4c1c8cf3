// The server's settings from its environment (host/common/serving_options.h).
#include "host/common/serving_options.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>

namespace ggml_remote::host {
namespace {

using ::testing::HasSubstr;

// Each test starts without the variables (ctest runs it in a process of its own).
class ServerEnvironment : public ::testing::Test {
  protected:
    void SetUp() override { clear(); }
    void TearDown() override { clear(); }
    static void clear() {
        for (const char *name :
             {"GGML_REMOTE_RING_SPIN_US", "GGML_REMOTE_SPIN_SPARE", "GGML_REMOTE_RECORD_DIR", "GGML_BACKEND_PATH"}) {
            unsetenv(name);
        }
    }
};

TEST_F(ServerEnvironment, NoVariablesKeepTheDefaults) {
    ServingOptions options;
    ASSERT_TRUE(read_server_environment(&options).ok());
    EXPECT_EQ(options.waiting.max_spin_ns, 200000u);
    EXPECT_TRUE(options.waiting.spin_on_spare_cores);
    EXPECT_EQ(options.record_dir, "");
    EXPECT_EQ(options.backend_path, "");
}

TEST_F(ServerEnvironment, WaitSettingsAndRecordDirectoryAreRead) {
    setenv("GGML_REMOTE_RING_SPIN_US", "50", 1);
    setenv("GGML_REMOTE_SPIN_SPARE", "0", 1);
    setenv("GGML_REMOTE_RECORD_DIR", "/tmp/frames", 1);
    ServingOptions options;
    ASSERT_TRUE(read_server_environment(&options).ok());
    EXPECT_EQ(options.waiting.max_spin_ns, 50000u);
    EXPECT_FALSE(options.waiting.spin_on_spare_cores);
    EXPECT_EQ(options.record_dir, "/tmp/frames");
}

// The worker's sandbox grants both paths (landlock.h): they come from here only.
TEST_F(ServerEnvironment, BackendPathAndRecordDirectoryReachTheWorkersPaths) {
    setenv("GGML_BACKEND_PATH", "/opt/ggml/libggml-cuda.so", 1);
    setenv("GGML_REMOTE_RECORD_DIR", "/tmp/frames", 1);
    ServingOptions options;
    ASSERT_TRUE(read_server_environment(&options).ok());
    const WorkerPaths paths = worker_paths(options);
    EXPECT_EQ(paths.backend_path, "/opt/ggml/libggml-cuda.so");
    EXPECT_EQ(paths.record_dir, "/tmp/frames");
}

TEST_F(ServerEnvironment, MalformedSpinLimitIsNamedAndKeepsItsDefault) {
    setenv("GGML_REMOTE_RING_SPIN_US", "fast", 1);
    ServingOptions options;
    const Status status = read_server_environment(&options);
    EXPECT_FALSE(status.ok());
    EXPECT_THAT(status.message(), HasSubstr("GGML_REMOTE_RING_SPIN_US=fast"));
    EXPECT_EQ(options.waiting.max_spin_ns, 200000u);
}

}  // namespace
}  // namespace ggml_remote::host
