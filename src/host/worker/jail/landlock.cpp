#include "host/worker/jail/landlock.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/landlock.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "transport/unique_fd.h"

namespace ggml_remote::host {

namespace {

// The ruleset attribute as far as ABI 6 defines it; newer headers add fields that
// older kernels refuse, so the size passed is the one the running kernel's ABI knows.
struct RulesetAttributes {
    uint64_t handled_access_fs;
    uint64_t handled_access_net;
    uint64_t scoped;
};

// LANDLOCK_ACCESS_NET_* and LANDLOCK_SCOPE_* by number: they arrived in ABI 4 and 6.
constexpr uint64_t kNetBindTcp = 1ull << 0;
constexpr uint64_t kNetConnectTcp = 1ull << 1;
constexpr uint64_t kScopeAbstractUnixSocket = 1ull << 0;
constexpr uint64_t kScopeSignal = 1ull << 1;

constexpr uint64_t kAbi1FileSystemRights = (1ull << 13) - 1;  // EXECUTE .. MAKE_SYM
constexpr uint64_t kRefer = 1ull << 13;                       // ABI 2
constexpr uint64_t kTruncate = 1ull << 14;                    // ABI 3
constexpr uint64_t kIoctlDevice = 1ull << 15;                 // ABI 5

constexpr uint64_t kReadOnly = LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_READ_DIR | LANDLOCK_ACCESS_FS_EXECUTE;
constexpr uint64_t kDevice = LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_WRITE_FILE |
                             LANDLOCK_ACCESS_FS_READ_DIR | kTruncate | kIoctlDevice;
// The rights Landlock lets a rule on a file (rather than a directory) carry.
constexpr uint64_t kFileRights = LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_WRITE_FILE |
                                 LANDLOCK_ACCESS_FS_READ_FILE | kTruncate | kIoctlDevice;

uint64_t handled_file_system_rights(int abi) {
    uint64_t rights = kAbi1FileSystemRights;
    if (abi >= 2) rights |= kRefer;
    if (abi >= 3) rights |= kTruncate;
    if (abi >= 5) rights |= kIoctlDevice;
    return rights;
}

size_t attributes_size(int abi) {
    if (abi < 4) return offsetof(RulesetAttributes, handled_access_net);
    if (abi < 6) return offsetof(RulesetAttributes, scoped);
    return sizeof(RulesetAttributes);
}

Status failure(const std::string &what) {
    return error(Code::error, "landlock: " + what + ": " + std::strerror(errno));
}

// Adds a rule that grants `rights` beneath `path`; a path that is not there is skipped.
Status allow_beneath(int ruleset, const std::string &path, uint64_t rights, uint64_t handled) {
    UniqueFd fd(::open(path.c_str(), O_PATH | O_CLOEXEC));
    if (!fd.valid()) return Status::success();
    struct stat st{};
    if (::fstat(fd.get(), &st) != 0) return failure("stat " + path);
    if (!S_ISDIR(st.st_mode)) rights &= kFileRights;
    landlock_path_beneath_attr rule{};
    rule.allowed_access = rights & handled;
    rule.parent_fd = fd.get();
    if (rule.allowed_access == 0) return Status::success();
    if (::syscall(SYS_landlock_add_rule, ruleset, LANDLOCK_RULE_PATH_BENEATH, &rule, 0) != 0) {
        return failure("rule for " + path);
    }
    return Status::success();
}

// LANDLOCK_RULE_NET_PORT and its attribute, by number (ABI 4).
constexpr int kRuleNetPort = 2;
struct NetPortAttributes {
    uint64_t allowed_access;
    uint64_t port;
};

Status allow_connect(int ruleset, uint16_t port) {
    NetPortAttributes rule{kNetConnectTcp, port};
    if (::syscall(SYS_landlock_add_rule, ruleset, kRuleNetPort, &rule, 0) != 0) {
        return failure("rule for TCP port " + std::to_string(port));
    }
    return Status::success();
}

int thread_count() {
    std::ifstream status("/proc/self/status");
    std::string line;
    while (std::getline(status, line)) {
        if (line.rfind("Threads:", 0) == 0) return std::atoi(line.c_str() + 8);
    }
    return -1;
}

std::string directory_of_executable() {
    char path[PATH_MAX] = {};
    const ssize_t length = ::readlink("/proc/self/exe", path, sizeof(path) - 1);
    if (length <= 0) return "";
    std::string text(path, static_cast<size_t>(length));
    return text.substr(0, text.rfind('/'));
}

// Device nodes a backend drives a GPU or accelerator through, and the few every
// program may use; not disks, not /dev/mem, not terminals.
bool is_compute_device(const std::string &name) {
    static const char *const kExact[] = {"null", "zero", "full", "random", "urandom", "kfd", "dri", "accel", "dxg"};
    for (const char *exact : kExact) {
        if (name == exact) return true;
    }
    return name.rfind("nvidia", 0) == 0;
}

void append_path_list(const char *variable, std::vector<std::string> *paths) {
    const char *value = std::getenv(variable);
    if (value == nullptr) return;
    std::string list = value;
    size_t start = 0;
    while (start <= list.size()) {
        const size_t end = std::min(list.find(':', start), list.size());
        // Relative entries ("", ".") would name the working directory: not granted.
        if (end > start && list[start] == '/') paths->push_back(list.substr(start, end - start));
        start = end + 1;
    }
}

}  // namespace

FilesystemPolicy worker_filesystem_policy(const WorkerPaths &paths) {
    FilesystemPolicy policy;
    // Libraries, ggml's backend directory and the drivers' files (Vulkan and OpenCL
    // ICDs live in /usr/share and /etc; NVIDIA's profiles, Mesa's drirc), and what a
    // backend reads about the machine.
    policy.read_only = {"/usr",           "/lib",        "/lib32",      "/lib64",     "/opt",        "/etc/ld.so.cache",
                        "/etc/localtime", "/etc/vulkan", "/etc/OpenCL", "/etc/glvnd", "/etc/nvidia", "/etc/drirc",
                        "/proc",          "/sys"};
    // ggml looks for backends beside the executable, and GGML_BACKEND_PATH names one.
    const std::string own_directory = directory_of_executable();
    if (!own_directory.empty()) policy.read_only.push_back(own_directory);
    if (!paths.backend_path.empty()) policy.read_only.push_back(paths.backend_path);
    append_path_list("LD_LIBRARY_PATH", &policy.read_only);
    append_path_list("VK_ICD_FILENAMES", &policy.read_only);
    append_path_list("VK_DRIVER_FILES", &policy.read_only);
    if (DIR *dev = ::opendir("/dev")) {
        while (const dirent *entry = ::readdir(dev)) {
            if (is_compute_device(entry->d_name)) policy.devices.push_back(std::string("/dev/") + entry->d_name);
        }
        ::closedir(dev);
    }
    // The worker writes the session's frames there. It is made now if need be:
    // once sandboxed, the worker could not make it.
    if (!paths.record_dir.empty()) {
        (void)::mkdir(paths.record_dir.c_str(), 0700);
        policy.read_write.push_back(paths.record_dir);
    }
    return policy;
}

bool policy_lets_read(const FilesystemPolicy &policy, const std::string &path) {
    char resolved[PATH_MAX];
    if (::realpath(path.c_str(), resolved) == nullptr) return false;
    const std::string target = resolved;
    for (const std::vector<std::string> *paths : {&policy.read_only, &policy.devices, &policy.read_write}) {
        for (const std::string &allowed : *paths) {
            char allowed_resolved[PATH_MAX];
            if (::realpath(allowed.c_str(), allowed_resolved) == nullptr) continue;
            const std::string root = allowed_resolved;
            if (target == root || (target.rfind(root, 0) == 0 && (root == "/" || target[root.size()] == '/'))) {
                return true;
            }
        }
    }
    return false;
}

int landlock_abi() {
    const long abi = ::syscall(SYS_landlock_create_ruleset, nullptr, 0, LANDLOCK_CREATE_RULESET_VERSION);
    return abi > 0 ? static_cast<int>(abi) : 0;
}

Status restrict_filesystem(const FilesystemPolicy &policy, bool *applied) {
    *applied = false;
    const int abi = landlock_abi();
    if (abi == 0) return Status::success();
    if (thread_count() != 1) {
        return error(Code::error, "landlock: the process has more than one thread (sandbox it before starting any)");
    }
    RulesetAttributes attributes{};
    attributes.handled_access_fs = handled_file_system_rights(abi);
    if (abi >= 4) attributes.handled_access_net = kNetBindTcp | kNetConnectTcp;
    if (abi >= 6) attributes.scoped = kScopeAbstractUnixSocket | kScopeSignal;
    UniqueFd ruleset(static_cast<int>(::syscall(SYS_landlock_create_ruleset, &attributes, attributes_size(abi), 0)));
    if (!ruleset.valid()) return failure("create a ruleset");
    const uint64_t handled = attributes.handled_access_fs;
    const uint64_t read_write = handled & ~kIoctlDevice;
    struct Grant {
        const std::vector<std::string> &paths;
        uint64_t rights;
    };
    for (const Grant &grant :
         {Grant{policy.read_only, kReadOnly}, Grant{policy.devices, kDevice}, Grant{policy.read_write, read_write}}) {
        for (const std::string &path : grant.paths) {
            Status status = allow_beneath(ruleset.get(), path, grant.rights, handled);
            if (!status) return status;
        }
    }
    for (uint16_t port : abi >= 4 ? policy.connect_ports : std::vector<uint16_t>()) {
        Status status = allow_connect(ruleset.get(), port);
        if (!status) return status;
    }
    if (::prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) != 1) return error(Code::error, "landlock: needs no_new_privs first");
    if (::syscall(SYS_landlock_restrict_self, ruleset.get(), 0) != 0) return failure("restrict");
    *applied = true;
    return Status::success();
}

}  // namespace ggml_remote::host
