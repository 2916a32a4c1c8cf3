// The attack on the server's log (docs/SECURITY.md, "Logs"): the listener and its
// workers share one stderr, and each logs whenever its guest makes it. Here many
// processes log at once through the server's own paths (log_line, and ggml's
// messages, which ggml sends in pieces) into one pipe; every line that comes out
// must be one process's whole line.
#include <ggml.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "host/common/server_log.h"
#include "host/worker/session/host_devices.h"

namespace ggml_remote::host {
namespace {

constexpr int kProcesses = 8;
constexpr int kLinesEach = 300;
const std::string kLong(5000, 'x');  // longer than PIPE_BUF: one write keeps it whole only if cut

// One child: its lines, of three kinds, in turn.
[[noreturn]] void log_lines(int process, int pipe_end) {
    ::dup2(pipe_end, STDERR_FILENO);
    ggml_log_callback ggml_logger = nullptr;
    void *user_data = nullptr;
    ggml_log_get(&ggml_logger, &user_data);
    for (int i = 0; i < kLinesEach; ++i) {
        const std::string id = "p" + std::to_string(process) + " l" + std::to_string(i);
        if (i % 3 == 0) {
            log_line(id + " long " + kLong + " end");
        } else if (i % 3 == 1) {
            // As ggml sends a line: a message, then its continuations.
            ggml_logger(GGML_LOG_LEVEL_ERROR, (id + " ggml begin").c_str(), user_data);
            sched_yield();
            ggml_logger(GGML_LOG_LEVEL_CONT, " middle", user_data);
            sched_yield();
            ggml_logger(GGML_LOG_LEVEL_CONT, " end\n", user_data);
        } else {
            log_line(id + " short end");
        }
    }
    ::_exit(0);
}

std::string read_all(int fd) {
    std::string text;
    char chunk[65536];
    for (ssize_t n; (n = ::read(fd, chunk, sizeof(chunk))) != 0;) {
        if (n > 0) text.append(chunk, static_cast<size_t>(n));
        if (n < 0 && errno != EINTR) break;
    }
    return text;
}

// Whether `line` is one child's whole line (a long one possibly cut, with its marker).
bool is_whole(const std::string &line) {
    static const std::regex ggml_line(R"(p\d+ l\d+ ggml begin middle end)");
    static const std::regex start(R"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d [+-]\d{4} INFO ggml-remote-server: p\d+ l\d+ )");
    static const std::regex cut_marker(R"(\.\.\.\(cut \d+ bytes\))");
    if (line.size() < 100 && std::regex_match(line, ggml_line)) return true;
    std::smatch prefix;
    const std::string head = line.substr(0, 80);
    if (!std::regex_search(head, prefix, start, std::regex_constants::match_continuous)) return false;
    const std::string rest = line.substr(static_cast<size_t>(prefix.length(0)));
    if (rest == "short end") return true;
    if (rest.rfind("long ", 0) != 0) return false;
    const size_t xs_end = rest.find_first_not_of('x', 5);
    if (xs_end == std::string::npos) return false;
    const std::string tail = rest.substr(xs_end);
    // (the regex only ever sees the short tail: std::regex recurses per character)
    return (tail == " end" && xs_end - 5 == kLong.size()) || std::regex_match(tail, cut_marker);
}

TEST(LogInterleaving, LinesOfManyProcessesLoggingAtOnceStayWhole) {
    load_host_backends(true);  // the server's ggml logger, every level shown
    int ends[2];
    ASSERT_EQ(::pipe(ends), 0);
    std::vector<pid_t> children;
    for (int p = 0; p < kProcesses; ++p) {
        const pid_t pid = ::fork();
        ASSERT_GE(pid, 0);
        if (pid == 0) log_lines(p, ends[1]);
        children.push_back(pid);
    }
    ::close(ends[1]);
    const std::string log = read_all(ends[0]);
    ::close(ends[0]);
    for (pid_t pid : children) ::waitpid(pid, nullptr, 0);

    std::istringstream lines(log);
    std::string line;
    int count = 0;
    while (std::getline(lines, line)) {
        ASSERT_TRUE(is_whole(line)) << "line " << count + 1
                                    << " is not one process's whole line: " << line.substr(0, 300)
                                    << (line.size() > 300 ? "..." : "");
        ++count;
    }
    EXPECT_EQ(count, kProcesses * kLinesEach);
}

}  // namespace
}  // namespace ggml_remote::host
