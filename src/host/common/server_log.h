// The server's log: one line per entry, each written whole.
//
// The listener and every worker write to the same stderr (a file, a pipe, the
// journal's socket). A line written in pieces, by stdio or by ggml's logger (which
// sends a line as a message and its continuations, GGML_LOG_LEVEL_CONT), can have
// another process's line land in the middle of it. So each line is put together
// first and goes out in one write(2), cut to PIPE_BUF bytes where it is longer:
// pipes keep writes of that size whole, and O_APPEND files and the journal keep
// every single write whole. See docs/SECURITY.md ("Logs").
#pragma once

#include <ggml.h>

#include <cstddef>
#include <ctime>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

namespace ggml_remote::host {

// The longest line written whole, newline included; longer ones are cut.
constexpr size_t kMaxLogLine = 4096;  // PIPE_BUF on Linux

// `line` (without its newline) cut to fit kMaxLogLine with its newline, at a
// character's start, with a marker saying how much went; then the newline.
std::string whole_log_line(std::string_view line);

// Writes whole_log_line(line) to `fd` with one write(2) (again only for what a
// signal or a full disk left unwritten).
void write_log_line(int fd, std::string_view line);

// Joins ggml's log messages into lines: a message, then its continuations, until
// one ends with a newline (newlines inside are escaped by one_line: a message is
// never more than one line). Lines of a level `shown` lets through go to `fd`, one
// write each. Safe to call from several threads.
class GgmlLogJoiner {
  public:
    using Filter = bool (*)(ggml_log_level level);
    GgmlLogJoiner(int fd, Filter shown) : fd_(fd), shown_(shown) {}

    void add(ggml_log_level level, std::string_view text);
    // Writes a line still without its newline (at exit, or before another process's turn).
    void flush();

  private:
    // Writes pending_ once it ends its line (or is too long to wait for the end).
    void emit_complete_lines();
    void emit(std::string_view line);

    const int fd_;
    const Filter shown_;
    std::mutex mutex_;
    std::string pending_;
    ggml_log_level level_ = GGML_LOG_LEVEL_INFO;  // of the line in pending_
};

// How much a line matters: the journal's priorities (sd-daemon.h) and a word for
// other readers.
enum class LogLevel { error = 3, warning = 4, info = 6 };

// --log-format: lines for people (text), or one JSON object a line for collectors.
enum class LogFormat { text, json };

// What a line concerns, for the JSON format's "session" and "peer" fields: one
// session (its id) and its peer, or nothing.
struct LogSubject {
    std::optional<int> session;
    std::string peer;
};

// The format of this process's lines (text until set), read by every line after.
void set_log_format(LogFormat format);
// What every line of this process concerns where its caller names nothing: a
// worker serves one session, and sets it once.
void set_log_subject(const LogSubject &subject);

// The line in the JSON format: {"time":"2026-12-06T04:00:00Z","level":"info",
// "message":TEXT} with "session" and "peer" where `subject` names them, after the
// journal's "<N>" where `for_journal`. TEXT is cut, at a character's start, so
// that the line fits kMaxLogLine with its newline.
std::string format_json_log_line(const std::string &text, LogLevel level, const LogSubject &subject, bool for_journal,
                                 std::time_t now);

// The line as it is written: "<time> <zone> <LEVEL> ggml-remote-server: <text>", or
// for the journal "<N>ggml-remote-server: <text>" (N the priority; the journal
// stamps lines itself). `text` is made one line.
std::string format_log_line(const std::string &text, LogLevel level, bool for_journal, std::time_t now);
// Whether stderr is the journal: JOURNAL_STREAM names its device and inode.
bool stderr_is_journal();

// Server log line on stderr, in one write, in this process's format; `about` names
// the session it concerns (default: the process's subject).
void log_line(const std::string &text, LogLevel level = LogLevel::info, const LogSubject &about = {});
inline void log_warning(const std::string &text, const LogSubject &about = {}) {
    log_line(text, LogLevel::warning, about);
}
inline void log_error(const std::string &text, const LogSubject &about = {}) { log_line(text, LogLevel::error, about); }

}  // namespace ggml_remote::host
