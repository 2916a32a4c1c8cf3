#include "host/common/config_file.h"

#include <fcntl.h>

#include "transport/regular_file.h"

namespace ggml_remote::host {

namespace {

constexpr std::string_view kBlanks = " \t\r";

std::string_view trimmed(std::string_view text) {
    const size_t first = text.find_first_not_of(kBlanks);
    if (first == std::string_view::npos) return {};
    return text.substr(first, text.find_last_not_of(kBlanks) - first + 1);
}

// A long flag's name: lower-case letters, digits and inner dashes.
bool is_flag_name(std::string_view name) {
    if (name.empty() || name.front() == '-' || name.back() == '-') return false;
    for (const char c : name) {
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return false;
    }
    return true;
}

// The argument one setting line stands for, or the reason it is none.
Status argument_of_line(std::string_view line, std::string *argument) {
    const size_t equals = line.find('=');
    const std::string_view name = trimmed(line.substr(0, equals));
    if (!is_flag_name(name)) {
        const bool dashed = !name.empty() && name.front() == '-';
        return error(Code::bad_request, "expected `name = value` or `name`, with a long flag's name" +
                                            std::string(dashed ? " without its dashes" : "") + ", got '" +
                                            std::string(trimmed(line)) + "'");
    }
    if (name == "config") return error(Code::bad_request, "config cannot be set inside a configuration file");
    *argument = "--" + std::string(name);
    if (equals == std::string_view::npos) return Status::success();
    const std::string_view value = trimmed(line.substr(equals + 1));
    if (value.empty()) return error(Code::bad_request, std::string(name) + ": no value after '='");
    *argument += "=" + std::string(value);
    return Status::success();
}

}  // namespace

Status parse_config_text(std::string_view text, const std::string &path, std::vector<ConfigArgument> *arguments) {
    size_t line_number = 0;
    while (!text.empty()) {
        const size_t end = text.find('\n');
        const std::string_view line = trimmed(text.substr(0, end));
        text = end == std::string_view::npos ? std::string_view() : text.substr(end + 1);
        ++line_number;
        if (line.empty() || line.front() == '#') continue;
        const std::string origin = path + ":" + std::to_string(line_number);
        if (line.find('\0') != std::string_view::npos) return error(Code::bad_request, origin + ": a NUL byte");
        ConfigArgument setting{"", origin};
        if (Status status = argument_of_line(line, &setting.argument); !status) {
            return error(Code::bad_request, origin + ": " + status.message());
        }
        arguments->push_back(std::move(setting));
    }
    return Status::success();
}

Status read_config_file(const std::string &path, std::vector<ConfigArgument> *arguments) {
    // The operator's path: a link is followed, a FIFO or device refused unread.
    RegularFileRules rules;
    rules.max_bytes = kMaxConfigFileBytes;
    rules.follow_link = true;
    std::string text;
    if (Status status = read_regular_file(AT_FDCWD, path, rules, &text); !status) {
        return error(Code::error, "cannot read " + status.message());
    }
    return parse_config_text(text, path, arguments);
}

}  // namespace ggml_remote::host
