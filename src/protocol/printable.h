// Text from a peer made safe to log or show: a guest chooses tensor names, TLS
// identities and whatever else it sends, and a newline or a terminal escape in
// them must not forge a log line or rewrite an operator's screen.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ggml_remote {

// How many bytes of a guest's string a message shows by default: a whole tensor
// name (GGML_MAX_NAME), and enough of anything else to recognise it.
constexpr size_t kShownBytes = 64;

// `text` with every byte that is not printable ASCII, and every backslash, written
// as \xNN, so the result is one line that maps back to exactly one input. At most
// `max_bytes` bytes of `text` are shown; a longer text ends in "...(+N bytes)".
std::string printable(std::string_view text, size_t max_bytes = kShownBytes);

// `text` with its control bytes (below 0x20, and 0x7f) written as \xNN and
// everything else kept, UTF-8 included: the last guard of a log that promises one
// line per entry, for text that is the server's own or was made printable already.
std::string one_line(std::string_view text);

// `text` as a JSON string, its quotes included, that any JSON parser reads back and
// that holds no control byte: `"` and `\` escaped, control bytes (below 0x20, and
// 0x7f) as \n, \t or \u00XX; valid UTF-8 kept as it is, and each byte of an invalid
// sequence as \u00XX (raw text never holds such an escape, so none is ambiguous).
std::string json_string(std::string_view text);

// `size` bytes at `data` as lowercase hex digits, two a byte.
std::string hex_bytes(const uint8_t *data, size_t size);

}  // namespace ggml_remote
