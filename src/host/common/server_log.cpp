#include "host/common/server_log.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <ctime>

#include "protocol/printable.h"
#include "transport/socket.h"

namespace ggml_remote::host {

std::string whole_log_line(std::string_view line) {
    if (line.size() + 1 <= kMaxLogLine) {
        std::string whole(line);
        whole += '\n';
        return whole;
    }
    // The marker's room, for the largest count a line can have.
    constexpr size_t kMarkerRoom = sizeof("...(cut 18446744073709551615 bytes)\n") - 1;
    size_t kept = kMaxLogLine - kMarkerRoom;
    while (kept > 0 && (static_cast<unsigned char>(line[kept]) & 0xc0) == 0x80) --kept;  // not mid-character
    std::string whole(line.substr(0, kept));
    whole += "...(cut " + std::to_string(line.size() - kept) + " bytes)\n";
    return whole;
}

void write_log_line(int fd, std::string_view line) {
    const std::string whole = whole_log_line(line);
    (void)write_fully(fd, whole.data(), whole.size());  // on failure there is nowhere left to tell
}

void GgmlLogJoiner::add(ggml_log_level level, std::string_view text) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (level != GGML_LOG_LEVEL_CONT) {
        // A new message: what came before it was a line of its own.
        if (!pending_.empty()) emit(pending_);
        pending_.clear();
        level_ = level;
    }
    pending_.append(text);
    emit_complete_lines();
}

void GgmlLogJoiner::flush() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!pending_.empty()) emit(pending_);
    pending_.clear();
}

void GgmlLogJoiner::emit_complete_lines() {
    // A line ends where a message or a continuation ends with a newline. Newlines
    // inside one are the message's own (they may come from a guest's tensor name):
    // one_line escapes them, so that no message starts a line of its own.
    const bool ended = !pending_.empty() && pending_.back() == '\n';
    if (ended) pending_.pop_back();
    // A message that never ends its line must not grow without bound either.
    if (ended || pending_.size() >= kMaxLogLine) {
        emit(pending_);
        pending_.clear();
    }
}

void GgmlLogJoiner::emit(std::string_view line) {
    if (shown_(level_)) write_log_line(fd_, one_line(line));
}

namespace {

const char *level_word(LogLevel level) {
    switch (level) {
        case LogLevel::error:
            return "ERROR";
        case LogLevel::warning:
            return "WARN";
        case LogLevel::info:
            break;
    }
    return "INFO";
}

}  // namespace

std::string format_log_line(const std::string &text, LogLevel level, bool for_journal, std::time_t now) {
    // Guest strings are escaped where they enter a message (printable()); this is
    // the guard behind that, so that no entry can ever start a line of its own.
    const std::string body = "ggml-remote-server: " + one_line(text);
    if (for_journal) return "<" + std::to_string(static_cast<int>(level)) + ">" + body;
    char stamp[40];
    std::tm local{};
    localtime_r(&now, &local);
    std::strftime(stamp, sizeof(stamp), "%Y-%m-%d %H:%M:%S %z", &local);
    return std::string(stamp) + " " + level_word(level) + " " + body;
}

bool stderr_is_journal() {
    static const bool journal = [] {
        const char *stream = std::getenv("JOURNAL_STREAM");
        if (stream == nullptr) return false;
        // "DEVICE:INODE", both decimal.
        char *end = nullptr;
        errno = 0;
        const unsigned long long device = std::strtoull(stream, &end, 10);
        if (errno != 0 || end == stream || *end != ':') return false;
        const char *inode_text = end + 1;
        const unsigned long long inode = std::strtoull(inode_text, &end, 10);
        if (errno != 0 || end == inode_text || *end != '\0') return false;
        struct stat info{};
        return ::fstat(STDERR_FILENO, &info) == 0 && static_cast<unsigned long long>(info.st_dev) == device &&
               static_cast<unsigned long long>(info.st_ino) == inode;
    }();
    return journal;
}

void log_line(const std::string &text, LogLevel level) {
    // One write per line: other processes' lines never land inside it (server_log.h).
    write_log_line(STDERR_FILENO, format_log_line(text, level, stderr_is_journal(), std::time(nullptr)));
}

}  // namespace ggml_remote::host
