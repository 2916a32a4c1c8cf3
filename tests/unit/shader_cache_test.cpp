// Shader cache (src/host/common/shader_cache.h): each tenant's directory lies right beneath
// the cache's root, whatever the tenant's name holds, and a worker uses it only when
// it is a private directory of its own, not a link or a file planted in its place.
#include "host/common/shader_cache.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

namespace ggml_remote::host {
namespace {

class ShaderCacheTest : public ::testing::Test {
  protected:
    void SetUp() override {
        char pattern[] = "/tmp/shader-cache-test.XXXXXX";
        ASSERT_NE(::mkdtemp(pattern), nullptr);
        root_ = pattern;
    }
    void TearDown() override { (void)std::system(("rm -rf '" + root_ + "'").c_str()); }

    std::string root_;
};

TEST_F(ShaderCacheTest, EachTenantGetsItsOwnDirectoryRightBeneathTheRoot) {
    const std::string user = tenant_shader_cache("/cache", "uid 1000");
    const std::string address = tenant_shader_cache("/cache", "address 10.0.0.7");
    EXPECT_NE(user, address);
    EXPECT_EQ(user, tenant_shader_cache("/cache", "uid 1000")) << "a tenant finds its cache again";
    for (const std::string &tenant : {std::string("../../etc"), std::string("a/b"), std::string()}) {
        const std::string directory = tenant_shader_cache("/cache", tenant);
        EXPECT_EQ(directory.rfind("/cache/t-", 0), 0u) << directory;
        EXPECT_EQ(directory.find('/', 7), std::string::npos) << directory << ": not right beneath the root";
    }
}

TEST_F(ShaderCacheTest, PreparingMakesAPrivateDirectoryAndFindsItAgain) {
    const std::string directory = tenant_shader_cache(root_, "uid 0");
    ASSERT_TRUE(prepare_tenant_shader_cache(directory).ok());
    struct stat st{};
    ASSERT_EQ(::stat(directory.c_str(), &st), 0);
    EXPECT_TRUE(S_ISDIR(st.st_mode));
    EXPECT_EQ(st.st_mode & 0777, 0700u);
    EXPECT_TRUE(prepare_tenant_shader_cache(directory).ok()) << "the next session of the tenant";
}

TEST_F(ShaderCacheTest, ALinkInTheTenantsPlaceIsRefused) {
    const std::string elsewhere = root_ + "/elsewhere";
    ASSERT_EQ(::mkdir(elsewhere.c_str(), 0700), 0);
    const std::string directory = tenant_shader_cache(root_, "uid 0");
    ASSERT_EQ(::symlink(elsewhere.c_str(), directory.c_str()), 0);
    const Status status = prepare_tenant_shader_cache(directory);
    EXPECT_FALSE(status.ok()) << "a link would grant the worker wherever it points";
    EXPECT_NE(status.message().find("not a directory"), std::string::npos) << status.message();
}

TEST_F(ShaderCacheTest, AFileInTheTenantsPlaceIsRefused) {
    const std::string directory = tenant_shader_cache(root_, "uid 0");
    std::ofstream(directory) << "not a directory";
    EXPECT_FALSE(prepare_tenant_shader_cache(directory).ok());
}

TEST_F(ShaderCacheTest, TheRootIsMadePrivate) {
    const std::string root = root_ + "/shaders";
    ASSERT_TRUE(prepare_shader_cache_root(root, static_cast<uid_t>(-1), static_cast<gid_t>(-1)).ok());
    struct stat st{};
    ASSERT_EQ(::stat(root.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0700u);
}

}  // namespace
}  // namespace ggml_remote::host
