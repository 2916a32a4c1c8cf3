// The start-up refusal of overlapping paths (host/server_paths.h).
#include "host/listener/server_paths.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

namespace ggml_remote::host {
namespace {

using ::testing::HasSubstr;

class ServerPaths : public ::testing::Test {
  protected:
    void SetUp() override {
        char pattern[] = "/tmp/server-paths-test.XXXXXX";
        ASSERT_NE(::mkdtemp(pattern), nullptr);
        root_ = pattern;
    }
    void TearDown() override { (void)std::system(("rm -rf " + root_).c_str()); }
    std::string make_directory(const std::string &name) const {
        const std::string path = root_ + "/" + name;
        EXPECT_EQ(::mkdir(path.c_str(), 0700), 0) << path;
        return path;
    }
    Status check(const std::string &store, const std::string &cache) const {
        ListenerOptions options;
        options.weight_store.directory = store;
        options.shader_cache = cache;
        return check_server_paths(options);
    }
    std::string root_;
};

TEST_F(ServerPaths, ResolvedPathFollowsLinksAndFoldsWhatIsNotThereYet) {
    const std::string real = make_directory("real");
    ASSERT_EQ(::symlink(real.c_str(), (root_ + "/link").c_str()), 0);
    char resolved_root[4096];
    ASSERT_NE(::realpath(root_.c_str(), resolved_root), nullptr);
    const std::string base = resolved_root;
    EXPECT_EQ(resolved_path(root_ + "/link"), base + "/real");
    EXPECT_EQ(resolved_path(root_ + "/link/new/./deeper/../store"), base + "/real/new/store");
    EXPECT_EQ(resolved_path(root_ + "/missing/../real//x"), base + "/real/x");
}

TEST_F(ServerPaths, PathWithinMeansEqualOrBeneathNotAPrefix) {
    EXPECT_TRUE(path_within("/a/b", "/a/b"));
    EXPECT_TRUE(path_within("/a/b/c", "/a/b"));
    EXPECT_TRUE(path_within("/a", "/"));
    EXPECT_FALSE(path_within("/a/bc", "/a/b"));
    EXPECT_FALSE(path_within("/a", "/a/b"));
}

TEST_F(ServerPaths, SeparateDirectoriesAreAccepted) {
    EXPECT_TRUE(check(make_directory("store"), make_directory("shaders")).ok());
    EXPECT_TRUE(check(root_ + "/not-made-yet", root_ + "/not-made-either").ok());
}

TEST_F(ServerPaths, ShaderCacheInsideTheStoreIsRefused) {
    const std::string store = make_directory("store");
    const Status status = check(store, store + "/shaders");
    ASSERT_FALSE(status.ok());
    EXPECT_THAT(status.message(), HasSubstr("--shader-cache " + store + "/shaders"));
    EXPECT_THAT(status.message(), HasSubstr("lies inside --weight-store " + store));
}

TEST_F(ServerPaths, StoreInsideTheShaderCacheAndTheSameDirectoryAreRefused) {
    const std::string cache = make_directory("shaders");
    EXPECT_THAT(check(cache + "/store", cache).message(), HasSubstr("contains --weight-store"));
    EXPECT_THAT(check(cache, cache).message(), HasSubstr("is the same directory as"));
}

TEST_F(ServerPaths, OverlapThroughALinkIsRefused) {
    const std::string store = make_directory("store");
    ASSERT_EQ(::symlink(store.c_str(), (root_ + "/innocent").c_str()), 0);
    const Status status = check(store, root_ + "/innocent/shaders");
    ASSERT_FALSE(status.ok());
    EXPECT_THAT(status.message(), HasSubstr("lies inside --weight-store"));
}

TEST_F(ServerPaths, RecordDirectoryMustStayApartToo) {
    ListenerOptions options;
    options.weight_store.directory = make_directory("store");
    options.record_dir = options.weight_store.directory + "/frames";
    EXPECT_THAT(check_server_paths(options).message(), HasSubstr("GGML_REMOTE_RECORD_DIR"));
}

TEST_F(ServerPaths, KeyFileSocketsAndRegionsInsideAWritableDirectoryAreRefused) {
    const std::string store = make_directory("store");
    ListenerOptions options;
    options.weight_store.directory = store;
    options.tls_psk_file = store + "/keys.psk";
    EXPECT_THAT(check_server_paths(options).message(), HasSubstr("--tls-psk " + store + "/keys.psk lies inside"));
    options.tls_psk_file.clear();
    options.listen = {"unix:" + store + "/server.sock"};
    EXPECT_THAT(check_server_paths(options).message(), HasSubstr("the socket of --listen"));
    options.listen = {"ivshmem:" + store + "/region,size=64M"};
    EXPECT_THAT(check_server_paths(options).message(), HasSubstr("the region file of --listen"));
    options.listen = {"unix:" + root_ + "/server.sock"};
    options.metrics = "unix:" + store + "/metrics.sock";
    EXPECT_THAT(check_server_paths(options).message(), HasSubstr("the socket of --metrics"));
}

TEST_F(ServerPaths, AWritableDirectoryAroundOrInsideWhatWorkersLoadIsRefused) {
    EXPECT_THAT(check("/", "").message(), HasSubstr("--weight-store / contains the path workers load from"));
    EXPECT_THAT(check("", "/usr/lib/shaders").message(), HasSubstr("lies inside the path workers load from /usr"));
    ListenerOptions options;
    options.backend_path = make_directory("backends");
    options.weight_store.directory = options.backend_path;
    EXPECT_THAT(check_server_paths(options).message(), HasSubstr("is the same directory as"));
}

}  // namespace
}  // namespace ggml_remote::host
