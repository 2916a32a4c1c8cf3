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

namespace {

// This process's settings (set_log_format, set_log_subject), set at its start.
LogFormat g_format = LogFormat::text;
LogSubject &process_subject() {
    static LogSubject subject;
    return subject;
}

LogLevel level_of(ggml_log_level level) {
    switch (level) {
        case GGML_LOG_LEVEL_ERROR:
            return LogLevel::error;
        case GGML_LOG_LEVEL_WARN:
            return LogLevel::warning;
        default:
            return LogLevel::info;
    }
}

// A level's names: the text format's word and the JSON format's value.
struct LevelNames {
    const char *word;
    const char *json;
};
LevelNames level_names(LogLevel level) {
    switch (level) {
        case LogLevel::error:
            return {"ERROR", "error"};
        case LogLevel::warning:
            return {"WARN", "warning"};
        case LogLevel::info:
            break;
    }
    return {"INFO", "info"};
}

// The JSON object of one line, its message as given.
std::string json_object(std::string_view message, LogLevel level, const LogSubject &subject, std::time_t now) {
    char stamp[32];
    std::tm utc{};
    gmtime_r(&now, &utc);
    std::strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%SZ", &utc);
    std::string object = std::string("{\"time\":\"") + stamp + "\",\"level\":\"" + level_names(level).json +
                         "\",\"message\":" + json_string(message);
    if (subject.session) object += ",\"session\":" + std::to_string(*subject.session);
    if (!subject.peer.empty()) object += ",\"peer\":" + json_string(subject.peer);
    return object + "}";
}

}  // namespace

void set_log_format(LogFormat format) { g_format = format; }
void set_log_subject(const LogSubject &subject) { process_subject() = subject; }

std::string format_json_log_line(const std::string &text, LogLevel level, const LogSubject &subject, bool for_journal,
                                 std::time_t now) {
    const std::string prefix = for_journal ? "<" + std::to_string(static_cast<int>(level)) + ">" : "";
    std::string line = prefix + json_object(text, level, subject, now);
    // Escapes make a message longer: cut it by what is over (and the marker) until it fits.
    size_t kept = text.size();
    while (line.size() + 1 > kMaxLogLine && kept > 0) {
        const size_t over = line.size() + 1 - kMaxLogLine + sizeof("...(cut 18446744073709551615 bytes)");
        kept = over < kept ? kept - over : 0;
        while (kept > 0 && (static_cast<unsigned char>(text[kept]) & 0xc0) == 0x80) --kept;  // not mid-character
        const std::string cut = text.substr(0, kept) + "...(cut " + std::to_string(text.size() - kept) + " bytes)";
        line = prefix + json_object(cut, level, subject, now);
    }
    return line;
}

void GgmlLogJoiner::emit(std::string_view line) {
    if (!shown_(level_)) return;
    if (g_format == LogFormat::json) {
        write_log_line(fd_, format_json_log_line(std::string(line), level_of(level_), process_subject(),
                                                 stderr_is_journal(), std::time(nullptr)));
    } else {
        write_log_line(fd_, one_line(line));
    }
}

std::string format_log_line(const std::string &text, LogLevel level, bool for_journal, std::time_t now) {
    // Guest strings are escaped where they enter a message (printable()); this is
    // the guard behind that, so that no entry can ever start a line of its own.
    const std::string body = "ggml-remote-server: " + one_line(text);
    if (for_journal) return "<" + std::to_string(static_cast<int>(level)) + ">" + body;
    char stamp[40];
    std::tm local{};
    localtime_r(&now, &local);
    std::strftime(stamp, sizeof(stamp), "%Y-%m-%d %H:%M:%S %z", &local);
    return std::string(stamp) + " " + level_names(level).word + " " + body;
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

void log_line(const std::string &text, LogLevel level, const LogSubject &about) {
    // One write per line: other processes' lines never land inside it (server_log.h).
    const bool journal = stderr_is_journal();
    const std::time_t now = std::time(nullptr);
    if (g_format == LogFormat::json) {
        const LogSubject &subject = about.session || !about.peer.empty() ? about : process_subject();
        write_log_line(STDERR_FILENO, format_json_log_line(text, level, subject, journal, now));
    } else {
        write_log_line(STDERR_FILENO, format_log_line(text, level, journal, now));
    }
}

}  // namespace ggml_remote::host
