// The serving flags: the part of the server's command line that the listener hands
// on to every worker it starts, read by both processes with this one parser. A
// malformed flag ends the program with a message (exit status 2): the listener's
// before it serves anyone; a worker's never, as its flags come from the listener.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "host/common/serving_options.h"

namespace ggml_remote::host {

// Prints "ggml-remote-server: MESSAGE (see --help)" and exits with status 2; while
// a FlagOrigin lives, MESSAGE is preceded by where the flag was written.
[[noreturn]] void fail_command_line(const std::string &message);

// Names the place of the flags read while it lives ("FILE:LINE" of a configuration
// file, config_file.h) in fail_command_line's message. One at a time.
class FlagOrigin {
  public:
    explicit FlagOrigin(const std::string &where);
    ~FlagOrigin();
    FlagOrigin(const FlagOrigin &) = delete;
    FlagOrigin &operator=(const FlagOrigin &) = delete;
};

// "8G" and the like: bytes, with an optional K, M, G or T suffix.
uint64_t parse_size(const std::string &flag, const std::string &text);
// A whole number of at least `min` (and at most 2^30).
int parse_int(const std::string &flag, const std::string &text, int min);
// `path` made absolute against the working directory.
std::string absolute_path(const std::string &flag, const std::string &path);

// The command line, walked flag by flag; a flag's value is the argument after it,
// or, GNU style, what follows `=` in `--flag=value`.
class CommandLineCursor {
  public:
    CommandLineCursor(int argc, char **argv) : argc_(argc), argv_(argv) {}

    // Moves to the next flag; false past the last. A `--flag=value` whose flag took
    // no value (`--insecure=yes`) fails here, when the cursor moves past it.
    bool next();
    // The flag, without an `=value` it came with.
    std::string flag() const;
    // The flag's value: after its `=`, else the next argument (fails without one).
    std::string value();
    int int_value(int min) { return parse_int(flag(), value(), min); }
    uint64_t size_value() { return parse_size(flag(), value()); }
    // The flag and the value it took, as given: what the workers are passed.
    void append_given(std::vector<std::string> *command) const;

  private:
    // The `=value` of `--flag=value` at first_, if any: npos otherwise.
    size_t inline_value_at() const;

    int argc_;
    char **argv_;
    int first_ = 0, last_ = 0;
    bool inline_value_taken_ = false;
};

// Reads one serving flag at `args` into `options`; false when it is not one.
bool parse_serving_flag(CommandLineCursor &args, ServingOptions *options);

}  // namespace ggml_remote::host
