#include "host/common/serving_flags.h"

#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>

namespace ggml_remote::host {

namespace {

// Where the flags now read were written; empty: the command line.
std::string &flag_origin() {
    static std::string origin;
    return origin;
}

}  // namespace

[[noreturn]] void fail_command_line(const std::string &message) {
    const std::string where = flag_origin().empty() ? "" : flag_origin() + ": ";
    std::fprintf(stderr, "ggml-remote-server: %s%s (see --help)\n", where.c_str(), message.c_str());
    std::exit(2);
}

FlagOrigin::FlagOrigin(const std::string &where) { flag_origin() = where; }
FlagOrigin::~FlagOrigin() { flag_origin().clear(); }

uint64_t parse_size(const std::string &flag, const std::string &text) {
    char *end = nullptr;
    errno = 0;
    const unsigned long long value = std::strtoull(text.c_str(), &end, 10);
    if (text.empty() || end == text.c_str() || errno != 0 || text[0] == '-')
        fail_command_line(flag + ": not a size: " + text);
    uint64_t multiplier = 1;
    const std::string suffix = end;
    if (suffix == "K" || suffix == "k")
        multiplier = 1ull << 10;
    else if (suffix == "M" || suffix == "m")
        multiplier = 1ull << 20;
    else if (suffix == "G" || suffix == "g")
        multiplier = 1ull << 30;
    else if (suffix == "T" || suffix == "t")
        multiplier = 1ull << 40;
    else if (!suffix.empty())
        fail_command_line(flag + ": unknown size suffix '" + suffix + "' (use K, M, G or T)");
    uint64_t result = 0;
    if (__builtin_mul_overflow(static_cast<uint64_t>(value), multiplier, &result))
        fail_command_line(flag + ": too large: " + text);
    return result;
}

int parse_int(const std::string &flag, const std::string &text, int min) {
    char *end = nullptr;
    const long value = std::strtol(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0' || value < min || value > 1 << 30) {
        fail_command_line(flag + ": expected a whole number >= " + std::to_string(min) + ", got '" + text + "'");
    }
    return static_cast<int>(value);
}

// Workers get the path as the listener resolved it, for their sandbox's rules.
std::string absolute_path(const std::string &flag, const std::string &path) {
    if (path.empty()) fail_command_line(flag + " needs a directory");
    if (path[0] == '/') return path;
    char cwd[PATH_MAX];
    if (::getcwd(cwd, sizeof(cwd)) == nullptr) fail_command_line("cannot resolve " + path + ": no working directory");
    return std::string(cwd) + "/" + path;
}

size_t CommandLineCursor::inline_value_at() const {
    const std::string argument = argv_[first_];
    if (argument.rfind("--", 0) != 0) return std::string::npos;
    return argument.find('=');
}

bool CommandLineCursor::next() {
    if (first_ < argc_ && first_ > 0 && inline_value_at() != std::string::npos && !inline_value_taken_) {
        fail_command_line(flag() + " takes no value");
    }
    first_ = ++last_;
    inline_value_taken_ = false;
    return first_ < argc_;
}

std::string CommandLineCursor::flag() const {
    const std::string argument = argv_[first_];
    const size_t equals = inline_value_at();
    return equals == std::string::npos ? argument : argument.substr(0, equals);
}

std::string CommandLineCursor::value() {
    if (const size_t equals = inline_value_at(); equals != std::string::npos) {
        inline_value_taken_ = true;
        return std::string(argv_[first_]).substr(equals + 1);
    }
    if (last_ + 1 >= argc_) fail_command_line(flag() + " needs a value");
    return argv_[++last_];
}

void CommandLineCursor::append_given(std::vector<std::string> *command) const {
    command->insert(command->end(), argv_ + first_, argv_ + last_ + 1);
}

namespace {

LogFormat parse_log_format(CommandLineCursor &args) {
    const std::string format = args.value();
    if (format == "text") return LogFormat::text;
    if (format == "json") return LogFormat::json;
    fail_command_line("--log-format takes text or json, not '" + format + "'");
}

int parse_poll(CommandLineCursor &args) {
    const int poll = args.int_value(0);
    if (poll > 100) {
        fail_command_line("--poll takes 0 to 100");
    }
    return poll;
}

// Flags of each session's limits; false for a flag of another kind.
bool parse_session_limit(CommandLineCursor &args, SessionLimits *limits) {
    const std::string flag = args.flag();
    if (flag == "-t" || flag == "--threads") {
        limits->default_threads = args.int_value(1);
    } else if (flag == "--poll") {
        limits->cpu_poll = parse_poll(args);
    } else if (flag == "--cores") {
        limits->cores = args.int_value(1);
    } else if (flag == "--no-core-scheduling") {
        limits->schedule_cores = false;
    } else if (flag == "--memory-quota") {
        limits->memory_quota = args.size_value();
    } else if (flag == "--max-buffers") {
        limits->max_buffers = static_cast<uint32_t>(args.int_value(1));
    } else if (flag == "--max-backends") {
        limits->max_backends = static_cast<uint32_t>(args.int_value(1));
    } else if (flag == "--mapped-file-quota") {
        limits->mapped_file_quota = args.size_value();
        if (limits->mapped_file_quota == 0) fail_command_line("--mapped-file-quota must be at least one byte");
    } else if (flag == "--max-message-size") {
        limits->max_message_size = args.size_value();
    } else if (flag == "--handshake-timeout") {
        limits->handshake_timeout_s = args.int_value(0);
    } else if (flag == "--frame-timeout") {
        limits->frame_timeout_s = args.int_value(0);
    } else if (flag == "--idle-timeout") {
        limits->idle_timeout_s = args.int_value(0);
    } else if (flag == "--no-repack") {
        limits->repack_weights = false;
    } else {
        return false;
    }
    return true;
}

}  // namespace

// Flags of what is served, to whom and how; false for a flag of another kind.
bool parse_serving_flag(CommandLineCursor &args, ServingOptions *options) {
    const std::string flag = args.flag();
    if (flag == "--tls-psk") {
        options->tls_psk_file = args.value();
    } else if (flag == "-d" || flag == "--device") {
        options->devices.push_back(args.value());
    } else if (flag == "--max-sessions") {
        options->max_sessions = args.int_value(1);
    } else if (flag == "--worker-user") {
        options->worker_user = args.value();
    } else if (flag == "--no-sandbox") {
        options->sandbox = false;
    } else if (flag == "-v" || flag == "--verbose") {
        options->verbose = true;
    } else if (flag == "--log-format") {
        options->log_format = parse_log_format(args);
    } else if (flag == "--shader-cache") {
        options->shader_cache = absolute_path(flag, args.value());
    } else if (flag == "--models") {
        options->models = absolute_path(flag, args.value());
    } else {
        return parse_session_limit(args, &options->limits);
    }
    return true;
}

}  // namespace ggml_remote::host
