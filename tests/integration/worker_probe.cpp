// worker_probe: a test-only LD_PRELOAD library that plays the attacker who got code
// running inside a session worker (worker_isolation.sh).
//
// It hooks recv and recvmsg. On the first call in a process that is sandboxed
// (under a seccomp filter: a worker, or the services process) it tries what such an
// attacker would do next, and reports each attempt on stderr (the server log):
//   worker-probe[PID]: WHAT: refused (reason)    or    worker-probe[PID]: WHAT: ALLOWED
// then lets the worker carry on. Everywhere else (the listener, clients, a worker of a
// --no-sandbox server) it does nothing but pass the call on.
//
// GGML_REMOTE_PROBE_SERVICES=1 probes the services process too (probed_here).
//
// Targets: the listener (the worker's parent) and every sibling (processes with
// the same parent: the other workers and the services process), and the files named in GGML_REMOTE_PROBE_FILES
// (colon-separated: the key file, a file in the test's directory); GGML_REMOTE_PROBE_WRITE names files
// (colon-separated) it tries to create.
//
// GGML_REMOTE_PROBE_KEY_FILE: a key file of one "identity:hexkey" line, read when the
// library loads (before any sandbox). The probe also hooks ggml_backend_load_all,
// which a worker calls once its guest is authenticated, and there searches the
// worker's writable memory for that key, as bytes and as hex text:
//   worker-probe[PID]: key in memory after authentication: refused (not found)
// It keeps the key only masked, so that it never finds its own copy.
//
// GGML_REMOTE_PROBE_BOARD forges the status board (which every worker maps) for the
// next listener (listener_board.sh):
//   decoys:PID:SLOT,PID:SLOT   marks SLOT live for process PID (a decoy) in each
//   zero                       writes 0 as the board's slot count
// and reports "worker-probe[PID]: forged the status board: WHAT".
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace {

std::atomic<bool> g_probed{false};

void report(const std::string &what, bool allowed, int error_number) {
    std::fprintf(stderr, "worker-probe[%d]: %s: %s%s%s\n", static_cast<int>(::getpid()), what.c_str(),
                 allowed ? "ALLOWED" : "refused (", allowed ? "" : std::strerror(error_number), allowed ? "" : ")");
}

bool sandboxed() {
    // PR_GET_SECCOMP says 2 under a filter; a process that may not read /proc (the
    // services process) is asked this way.
    if (::prctl(PR_GET_SECCOMP, 0, 0, 0, 0) == 2) return true;
    std::ifstream status("/proc/self/status");
    std::string line;
    while (std::getline(status, line)) {
        if (line.rfind("Seccomp:", 0) == 0) return line.find('2') != std::string::npos;
    }
    return false;
}

pid_t parent_of(pid_t pid) {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    const size_t end_of_name = text.rfind(')');
    if (end_of_name == std::string::npos) return -1;
    char state = 0;
    int parent = -1;
    if (std::sscanf(text.c_str() + end_of_name + 1, " %c %d", &state, &parent) != 2) return -1;
    return parent;
}

std::vector<pid_t> siblings() {
    std::vector<pid_t> found;
    DIR *proc = ::opendir("/proc");
    if (proc == nullptr) return found;
    while (const dirent *entry = ::readdir(proc)) {
        const pid_t pid = static_cast<pid_t>(std::atoi(entry->d_name));
        if (pid > 0 && pid != ::getpid() && parent_of(pid) == ::getppid()) found.push_back(pid);
    }
    ::closedir(proc);
    return found;
}

void try_open(const std::string &what, const std::string &path, int flags) {
    const int fd = ::open(path.c_str(), flags | O_CLOEXEC, 0600);
    const int saved = errno;
    report(what + " " + path, fd >= 0, saved);
    if (fd >= 0) ::close(fd);
}

// Sets `pid`'s affinity and priority to what they are: the attempt is the test, not the change.
void try_scheduling(const std::string &who, pid_t pid) {
    cpu_set_t cpus;
    CPU_ZERO(&cpus);
    if (::sched_getaffinity(pid, sizeof(cpus), &cpus) != 0) CPU_SET(0, &cpus);
    int result = ::sched_setaffinity(pid, sizeof(cpus), &cpus);
    report("sched_setaffinity(" + who + ")", result == 0, errno);
    errno = 0;
    const int nice = ::getpriority(PRIO_PROCESS, static_cast<id_t>(pid));
    result = ::setpriority(PRIO_PROCESS, static_cast<id_t>(pid), errno == 0 ? nice : 0);
    report("setpriority(" + who + ")", result == 0, errno);
}

void try_process(const std::string &who, pid_t pid) {
    const std::string proc = "/proc/" + std::to_string(pid);
    try_open("open " + who + " memory read-write", proc + "/mem", O_RDWR);
    try_open("open " + who + " environment", proc + "/environ", O_RDONLY);
    long result = ::ptrace(PTRACE_SEIZE, pid, nullptr, nullptr);
    report("ptrace(" + who + ")", result == 0, errno);
    result = ::kill(pid, 0);
    report("kill(" + who + ", 0)", result == 0, errno);
    try_scheduling(who, pid);
}

void split(const char *list, std::vector<std::string> *out) {
    if (list == nullptr) return;
    std::string text = list;
    size_t start = 0;
    while (start <= text.size()) {
        const size_t end = std::min(text.find(':', start), text.size());
        if (end > start) out->push_back(text.substr(start, end - start));
        start = end + 1;
    }
}

// The board's mapping in this worker (the listener's memfd "ggml-remote-status").
unsigned char *board_mapping() {
    std::ifstream maps("/proc/self/maps");
    std::string line;
    while (std::getline(maps, line)) {
        if (line.find("ggml-remote-status") == std::string::npos || line.find("rw-s") == std::string::npos) continue;
        unsigned long start = 0;
        if (std::sscanf(line.c_str(), "%lx-", &start) == 1) return reinterpret_cast<unsigned char *>(start);
    }
    return nullptr;
}

// The board's layout (src/host/common/status_board.cpp): a header (magic, slots,
// slot size, figures layout), then the slots from offset 64; a slot starts with
// live (u32), id (i32), pid (i32).
void forge_board(const std::string &how) {
    unsigned char *board = board_mapping();
    if (board == nullptr) {
        std::fprintf(stderr, "worker-probe[%d]: forged the status board: no board mapped\n",
                     static_cast<int>(::getpid()));
        return;
    }
    uint32_t slot_size = 0;
    std::memcpy(&slot_size, board + 8, 4);
    if (how == "zero") {
        const uint32_t zero = 0;
        std::memcpy(board + 4, &zero, 4);
    } else if (how.rfind("decoys:", 0) == 0) {
        std::vector<std::string> decoys;
        std::string list = how.substr(7);
        for (char &c : list) c = c == ',' ? ':' : c;
        split(list.c_str(), &decoys);
        for (size_t i = 0; i + 1 < decoys.size(); i += 2) {
            unsigned char *slot = board + 64 + size_t(std::atoi(decoys[i + 1].c_str())) * slot_size;
            const int32_t id = 900 + static_cast<int32_t>(i), pid = std::atoi(decoys[i].c_str());
            std::memcpy(slot + 4, &id, 4);
            std::memcpy(slot + 8, &pid, 4);
            reinterpret_cast<std::atomic<uint32_t> *>(slot)->store(1);
        }
    }
    std::fprintf(stderr, "worker-probe[%d]: forged the status board: %s\n", static_cast<int>(::getpid()), how.c_str());
}

void probe() {
    if (g_probed.exchange(true)) return;
    if (const char *board = std::getenv("GGML_REMOTE_PROBE_BOARD")) {
        forge_board(board);
        return;
    }
    const int saved_errno = errno;
    try_process("listener", ::getppid());
    const std::vector<pid_t> others = siblings();
    for (pid_t sibling : others) try_process("sibling " + std::to_string(sibling), sibling);
    std::vector<std::string> files;
    split(std::getenv("GGML_REMOTE_PROBE_FILES"), &files);
    for (const std::string &file : files) try_open("read", file, O_RDONLY);
    std::vector<std::string> targets;
    split(std::getenv("GGML_REMOTE_PROBE_WRITE"), &targets);
    for (const std::string &target : targets) try_open("create", target, O_WRONLY | O_CREAT);
    std::fprintf(stderr, "worker-probe[%d]: done (%zu sibling(s))\n", static_cast<int>(::getpid()), others.size());
    errno = saved_errno;
}

// The services process (ggml-remote-services) is probed only where the test asks
// (GGML_REMOTE_PROBE_SERVICES=1): it may write the store, which workers may not.
bool probed_here() {
    const std::string program = program_invocation_name;  // argv[0], without /proc
    const std::string services = "ggml-remote-services";
    const bool is_services = program.size() >= services.size() &&
                             program.compare(program.size() - services.size(), services.size(), services) == 0;
    const char *wanted = std::getenv("GGML_REMOTE_PROBE_SERVICES");
    return !is_services || (wanted != nullptr && std::strcmp(wanted, "1") == 0);
}

void maybe_probe() {
    if (!g_probed.load() && sandboxed() && probed_here()) probe();
}

// The key to look for, masked (XOR kMask) so that this library's copy never matches.
constexpr unsigned char kMask = 0x5a;
struct MaskedKey {
    std::vector<unsigned char> bytes, hex;
};
// A function's static, so that it exists before the constructor below fills it.
MaskedKey &masked_key() {
    static MaskedKey key;
    return key;
}

__attribute__((constructor)) void read_key_file() {
    const char *path = std::getenv("GGML_REMOTE_PROBE_KEY_FILE");
    if (path == nullptr) return;
    std::vector<unsigned char> &bytes = masked_key().bytes;
    std::vector<unsigned char> &hex_text = masked_key().hex;
    std::ifstream file(path);
    std::string line;
    std::getline(file, line);
    const size_t colon = line.rfind(':');
    const std::string hex = line.substr(colon == std::string::npos ? 0 : colon + 1);
    for (size_t i = 0; i + 1 < hex.size(); i += 2) {
        bytes.push_back(static_cast<unsigned char>(std::stoi(hex.substr(i, 2), nullptr, 16)) ^ kMask);
    }
    for (char c : hex) hex_text.push_back(static_cast<unsigned char>(c) ^ kMask);
}

bool contains_masked(const unsigned char *data, size_t size, const std::vector<unsigned char> &masked) {
    if (masked.empty() || size < masked.size()) return false;
    for (size_t i = 0; i + masked.size() <= size; ++i) {
        size_t j = 0;
        while (j < masked.size() && (data[i + j] ^ kMask) == masked[j]) ++j;
        if (j == masked.size()) return true;
    }
    return false;
}

bool is_worker() {
    std::ifstream cmdline("/proc/self/cmdline");
    std::string text((std::istreambuf_iterator<char>(cmdline)), std::istreambuf_iterator<char>());
    return text.find(std::string("--worker-fd") + '\0') != std::string::npos;
}

// Searches every private writable mapping (heap, stacks, anonymous memory, libraries'
// data) for the key.
void search_memory_for_key() {
    const MaskedKey &key = masked_key();
    if (key.bytes.empty() || !is_worker()) return;
    std::ifstream maps("/proc/self/maps");
    std::string line, found;
    while (std::getline(maps, line)) {
        unsigned long start = 0, end = 0;
        char permissions[5] = {};
        if (std::sscanf(line.c_str(), "%lx-%lx %4s", &start, &end, permissions) != 3) continue;
        if (std::string(permissions) != "rw-p") continue;
        const auto *data = reinterpret_cast<const unsigned char *>(start);
        if (contains_masked(data, end - start, key.bytes) || contains_masked(data, end - start, key.hex)) {
            found += " " + line.substr(line.find_last_of(' ') + 1) + "@" + line.substr(0, line.find(' '));
        }
    }
    if (found.empty()) {
        std::fprintf(stderr, "worker-probe[%d]: key in memory after authentication: refused (not found)\n",
                     static_cast<int>(::getpid()));
    } else {
        std::fprintf(stderr, "worker-probe[%d]: key in memory after authentication: ALLOWED (found in%s)\n",
                     static_cast<int>(::getpid()), found.c_str());
    }
}

template <typename Function>
Function next(const char *name) {
    return reinterpret_cast<Function>(::dlsym(RTLD_NEXT, name));
}

}  // namespace

extern "C" ssize_t recv(int fd, void *buffer, size_t size, int flags) {
    static const auto real = next<ssize_t (*)(int, void *, size_t, int)>("recv");
    maybe_probe();
    return real(fd, buffer, size, flags);
}

extern "C" ssize_t recvmsg(int fd, msghdr *message, int flags) {
    static const auto real = next<ssize_t (*)(int, msghdr *, int)>("recvmsg");
    maybe_probe();
    return real(fd, message, flags);
}

extern "C" void ggml_backend_load_all() {
    static const auto real = next<void (*)()>("ggml_backend_load_all");
    search_memory_for_key();
    real();
}
