#include "protocol/printable.h"

namespace ggml_remote {

namespace {

constexpr char kHexDigits[] = "0123456789abcdef";

void append_hex(unsigned char byte, std::string *out) {
    out->push_back(kHexDigits[byte >> 4]);
    out->push_back(kHexDigits[byte & 0xf]);
}

void append_hex_escape(unsigned char byte, std::string *out) {
    out->append("\\x");
    append_hex(byte, out);
}

bool is_control(unsigned char byte) { return byte < 0x20 || byte == 0x7f; }

// Printable ASCII but the backslash, which would make "\x0a" ambiguous.
bool shown_as_is(unsigned char byte) { return byte >= 0x20 && byte < 0x7f && byte != '\\'; }

// The length of the well-formed UTF-8 sequence (RFC 3629: no overlong form, no
// surrogate, nothing above U+10FFFF) of more than one byte at `text[at]`; 0 if none.
size_t utf8_sequence_length(std::string_view text, size_t at) {
    const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[at + i]); };
    const unsigned char lead = byte(0);
    size_t length = 0;
    unsigned char low = 0x80, high = 0xbf;  // the range of the second byte
    if (lead >= 0xc2 && lead <= 0xdf) {
        length = 2;
    } else if (lead >= 0xe0 && lead <= 0xef) {
        length = 3;
        if (lead == 0xe0) low = 0xa0;   // overlong
        if (lead == 0xed) high = 0x9f;  // surrogates
    } else if (lead >= 0xf0 && lead <= 0xf4) {
        length = 4;
        if (lead == 0xf0) low = 0x90;   // overlong
        if (lead == 0xf4) high = 0x8f;  // above U+10FFFF
    } else {
        return 0;
    }
    if (text.size() - at < length || byte(1) < low || byte(1) > high) return 0;
    for (size_t i = 2; i < length; ++i) {
        if ((byte(i) & 0xc0) != 0x80) return 0;
    }
    return length;
}

void append_json_escape(unsigned char byte, std::string *out) {
    static constexpr char kDigits[] = "0123456789abcdef";
    switch (byte) {
        case '"':
            out->append("\\\"");
            return;
        case '\\':
            out->append("\\\\");
            return;
        case '\n':
            out->append("\\n");
            return;
        case '\t':
            out->append("\\t");
            return;
        default:
            out->append("\\u00");
            out->push_back(kDigits[byte >> 4]);
            out->push_back(kDigits[byte & 0xf]);
    }
}

}  // namespace

std::string json_string(std::string_view text) {
    std::string out = "\"";
    out.reserve(text.size() + 2);
    for (size_t i = 0; i < text.size();) {
        const auto byte = static_cast<unsigned char>(text[i]);
        if (byte < 0x80) {
            if (is_control(byte) || byte == '"' || byte == '\\') {
                append_json_escape(byte, &out);
            } else {
                out.push_back(static_cast<char>(byte));
            }
            ++i;
        } else if (const size_t length = utf8_sequence_length(text, i); length != 0) {
            out.append(text.substr(i, length));
            i += length;
        } else {
            append_json_escape(byte, &out);
            ++i;
        }
    }
    return out + "\"";
}

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

std::string hex_bytes(const uint8_t *data, size_t size) {
    std::string text;
    text.reserve(size * 2);
    for (size_t i = 0; i < size; ++i) append_hex(data[i], &text);
    return text;
}

}  // namespace ggml_remote
