// The server's configuration file (--config FILE): the long flags without their
// dashes, one a line, `name = value` or a bare `name` for a switch. Each line
// becomes the argument `--name=value` (or `--name`), read by the same parsers as
// the command line; this unit only splits the file into those arguments.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "protocol/status.h"

namespace ggml_remote::host {

// One setting of the file: the flag it stands for and where it was written.
struct ConfigArgument {
    std::string argument;  // "--name=value" or "--name"
    std::string origin;    // "FILE:LINE", for error messages
};

// The largest file read: a configuration, not a data set.
constexpr size_t kMaxConfigFileBytes = 1 << 20;

// Splits `text` (the contents of `path`) into arguments. Blank lines and lines whose
// first non-blank character is `#` are skipped; spaces around name and value go.
// A line that is no setting, or sets `config`, is an error naming "path:line".
Status parse_config_text(std::string_view text, const std::string &path, std::vector<ConfigArgument> *arguments);

// Reads and splits the file at `path`; an unreadable file is an error naming it.
Status read_config_file(const std::string &path, std::vector<ConfigArgument> *arguments);

}  // namespace ggml_remote::host
