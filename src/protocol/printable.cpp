#include "protocol/printable.h"

namespace ggml_remote {

namespace {

void append_hex_escape(unsigned char byte, std::string *out) {
    static constexpr char kDigits[] = "0123456789abcdef";
    out->append("\\x");
    out->push_back(kDigits[byte >> 4]);
    out->push_back(kDigits[byte & 0xf]);
}

bool is_control(unsigned char byte) { return byte < 0x20 || byte == 0x7f; }

// Printable ASCII but the backslash, which would make "\x0a" ambiguous.
bool shown_as_is(unsigned char byte) { return byte >= 0x20 && byte < 0x7f && byte != '\\'; }

}  // namespace

std::string printable(std::string_view text, size_t max_bytes) {
    const size_t shown = text.size() < max_bytes ? text.size() : max_bytes;
    std::string out;
    out.reserve(shown);
    for (size_t i = 0; i < shown; ++i) {
        const auto byte = static_cast<unsigned char>(text[i]);
        if (shown_as_is(byte)) {
            out.push_back(static_cast<char>(byte));
        } else {
            append_hex_escape(byte, &out);
        }
    }
    if (shown < text.size()) out += "...(+" + std::to_string(text.size() - shown) + " bytes)";
    return out;
}

std::string one_line(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    for (const char c : text) {
        const auto byte = static_cast<unsigned char>(c);
        if (is_control(byte)) {
            append_hex_escape(byte, &out);
        } else {
            out.push_back(c);
        }
    }
    return out;
}

}  // namespace ggml_remote
