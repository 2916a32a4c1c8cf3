// worker_probe: a test-only LD_PRELOAD library that plays the attacker who got code
// running inside a session worker (worker_isolation.sh).
//
// It hooks recv and recvmsg. On the first call in a process that is sandboxed
// (/proc/self/status says "Seccomp: 2", which only a worker is) it tries what such an
// attacker would do next, and reports each attempt on stderr (the server log):
//   worker-probe[PID]: WHAT: refused (reason)    or    worker-probe[PID]: WHAT: ALLOWED
// then lets the worker carry on. Everywhere else (the listener, clients, a worker of a
// --no-sandbox server) it does nothing but pass the call on.
//
// Targets: the listener (the worker's parent) and every sibling worker (processes with
// the same parent), and the files named in GGML_REMOTE_PROBE_FILES (colon-separated:
// the key file, a file in the test's directory); GGML_REMOTE_PROBE_WRITE names a file
// it tries to create.
#include <dlfcn.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
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

void probe() {
    if (g_probed.exchange(true)) return;
    const int saved_errno = errno;
    try_process("listener", ::getppid());
    const std::vector<pid_t> others = siblings();
    for (pid_t sibling : others) try_process("sibling " + std::to_string(sibling), sibling);
    std::vector<std::string> files;
    split(std::getenv("GGML_REMOTE_PROBE_FILES"), &files);
    for (const std::string &file : files) try_open("read", file, O_RDONLY);
    if (const char *target = std::getenv("GGML_REMOTE_PROBE_WRITE")) try_open("create", target, O_WRONLY | O_CREAT);
    std::fprintf(stderr, "worker-probe[%d]: done (%zu sibling(s))\n", static_cast<int>(::getpid()), others.size());
    errno = saved_errno;
}

void maybe_probe() {
    if (!g_probed.load() && sandboxed()) probe();
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
