// open_regular_file and read_regular_fd: whatever stands in a file's place is
// refused without hanging the open, and a file that changes after the check is
// read with a bound.
#include "transport/regular_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

namespace ggml_remote {
namespace {

using ::testing::HasSubstr;

class RegularFileTest : public ::testing::Test {
  protected:
    void SetUp() override {
        char name[] = "/tmp/ggml-remote-regular-file-test.XXXXXX";
        ASSERT_NE(::mkdtemp(name), nullptr);
        directory = name;
    }
    void TearDown() override { (void)!std::system(("rm -rf '" + directory + "'").c_str()); }

    std::string write(const std::string &name, const std::string &text) {
        const std::string path = directory + "/" + name;
        std::ofstream(path) << text;
        return path;
    }
    // What open_regular_file says of `path`: empty when it opens.
    std::string refusal(const std::string &path, RegularFileRules rules = {}) {
        UniqueFd file;
        Status status = open_regular_file(AT_FDCWD, path, rules, &file);
        EXPECT_EQ(status.ok(), file.valid());
        return status.ok() ? "" : status.message();
    }

    std::string directory;
};

TEST_F(RegularFileTest, ARegularFileOpensBlockingAndIsReadWhole) {
    const std::string path = write("settings", "threads=4\n");
    UniqueFd file;
    struct stat st{};
    ASSERT_TRUE(open_regular_file(AT_FDCWD, path, {}, &file, &st).ok());
    EXPECT_EQ(::fcntl(file.get(), F_GETFL) & O_NONBLOCK, 0);
    EXPECT_NE(::fcntl(file.get(), F_GETFD) & FD_CLOEXEC, 0);
    EXPECT_EQ(st.st_size, 10);
    std::string text;
    ASSERT_TRUE(read_regular_fd(file.get(), path, 100, &text).ok());
    EXPECT_EQ(text, "threads=4\n");
}

TEST_F(RegularFileTest, AFifoIsRefusedAtOnceWithoutAWriter) {
    const std::string path = directory + "/fifo";
    ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
    // Returning at all is the point: a blocking open waits for a writer for good.
    EXPECT_EQ(refusal(path, {UINT64_MAX, true}), path + ": not a regular file (a FIFO)");
    EXPECT_EQ(refusal(path), path + ": not a regular file (a FIFO)");
}

TEST_F(RegularFileTest, ADirectoryIsRefused) {
    EXPECT_EQ(refusal(directory, {UINT64_MAX, true}), directory + ": not a regular file (a directory)");
}

TEST_F(RegularFileTest, ACharacterDeviceIsRefused) {
    EXPECT_EQ(refusal("/dev/zero", {UINT64_MAX, true}), "/dev/zero: not a regular file (a character device)");
    EXPECT_EQ(refusal("/dev/null", {UINT64_MAX, true}), "/dev/null: not a regular file (a character device)");
}

TEST_F(RegularFileTest, ASocketIsRefused) {
    const std::string path = directory + "/socket";
    UniqueFd listening(::socket(AF_UNIX, SOCK_STREAM, 0));
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    ASSERT_LT(path.size(), sizeof(address.sun_path));
    std::memcpy(address.sun_path, path.c_str(), path.size());
    ASSERT_EQ(::bind(listening.get(), reinterpret_cast<sockaddr *>(&address), sizeof(address)), 0);
    EXPECT_EQ(refusal(path, {UINT64_MAX, true}), path + ": not a regular file (a socket)");
}

TEST_F(RegularFileTest, ALinkIsFollowedOnlyWhereTheRulesAllow) {
    const std::string target = write("elsewhere", "secret");
    const std::string link = directory + "/link";
    ASSERT_EQ(::symlink(target.c_str(), link.c_str()), 0);
    EXPECT_EQ(refusal(link), link + ": a symbolic link, not followed here");
    EXPECT_EQ(refusal(link, {UINT64_MAX, true}), "");
}

TEST_F(RegularFileTest, AFileLargerThanTheBoundIsRefusedBeforeItIsRead) {
    const std::string path = write("large", std::string(2000, 'x'));
    EXPECT_THAT(refusal(path, {1000, false}), HasSubstr(path + ": 2000 bytes, more than the 1000 bytes"));
}

TEST_F(RegularFileTest, AFileThatGrewAfterTheCheckIsReadOnlyToTheBound) {
    const std::string path = write("growing", "small");
    UniqueFd file;
    ASSERT_TRUE(open_regular_file(AT_FDCWD, path, {1000, false}, &file).ok());
    std::ofstream(path, std::ios::app) << std::string(5000, 'x');
    std::string text;
    Status status = read_regular_fd(file.get(), path, 1000, &text);
    EXPECT_THAT(status.message(), HasSubstr(path + ": grew past the 1000 bytes"));
    EXPECT_TRUE(text.empty());
}

TEST_F(RegularFileTest, AFileThatShrankAfterTheCheckIsReadAsItIsNow) {
    const std::string path = write("shrinking", std::string(100000, 'x'));
    UniqueFd file;
    struct stat st{};
    ASSERT_TRUE(open_regular_file(AT_FDCWD, path, {}, &file, &st).ok());
    ASSERT_EQ(::truncate(path.c_str(), 10), 0);
    std::string text;
    ASSERT_TRUE(read_regular_fd(file.get(), path, static_cast<size_t>(st.st_size), &text).ok());
    EXPECT_EQ(text, std::string(10, 'x'));
}

TEST_F(RegularFileTest, AnEntryOfADirectoryIsOpenedRelativeToIt) {
    write("entry", "bytes");
    UniqueFd dir(::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    std::string text;
    ASSERT_TRUE(read_regular_file(dir.get(), "entry", {}, &text).ok());
    EXPECT_EQ(text, "bytes");
    EXPECT_EQ(read_regular_file(dir.get(), "missing", {}, &text).message(), "missing: No such file or directory");
}

}  // namespace
}  // namespace ggml_remote
