#include "host/common/shader_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "protocol/content_digest.h"
#include "transport/unique_fd.h"

namespace ggml_remote::host {

namespace {

Status failure(const std::string &what) {
    return error(Code::error, "shader cache: " + what + ": " + std::strerror(errno));
}

// Makes `path` a directory (mode 0700) if it is not there; opens it without following
// a link, so that what is checked is what was there, not what a link points to.
Status make_directory(const std::string &path, UniqueFd *directory) {
    if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) return failure("mkdir " + path);
    directory->reset(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!directory->valid()) return failure(path + " is not a directory");
    return Status::success();
}

}  // namespace

std::string tenant_shader_cache(const std::string &root, const std::string &tenant) {
    // A digest: whatever the tenant's name holds, it names one directory beneath root.
    const protocol::ContentDigest digest = protocol::content_digest(tenant.data(), tenant.size());
    return root + "/t-" + digest.hex().substr(0, 24);
}

Status prepare_shader_cache_root(const std::string &root, uid_t owner, gid_t group) {
    UniqueFd directory;
    Status status = make_directory(root, &directory);
    if (!status) return status;
    if (owner != static_cast<uid_t>(-1) && ::fchown(directory.get(), owner, group) != 0) {
        return failure("give " + root + " to uid " + std::to_string(owner));
    }
    return Status::success();
}

Status prepare_tenant_shader_cache(const std::string &directory) {
    UniqueFd opened;
    Status status = make_directory(directory, &opened);
    if (!status) return status;
    struct stat st{};
    if (::fstat(opened.get(), &st) != 0) return failure("stat " + directory);
    if (st.st_uid != ::geteuid()) {
        return error(Code::error, "shader cache: " + directory + " belongs to uid " + std::to_string(st.st_uid) +
                                      ", not to this worker's");
    }
    return Status::success();
}

void use_shader_cache(const std::string &directory) {
    ::setenv("MESA_SHADER_CACHE_DIR", directory.c_str(), 1);
    ::setenv("XDG_CACHE_HOME", directory.c_str(), 1);
    ::setenv("__GL_SHADER_DISK_CACHE_PATH", (directory + "/nvidia").c_str(), 1);
    ::setenv("CUDA_CACHE_PATH", (directory + "/cuda").c_str(), 1);
}

}  // namespace ggml_remote::host
