#include "transport/tls_key.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string_view>

#include "transport/unique_fd.h"

namespace ggml_remote {

namespace {

// A key file is a few lines; anything this large is not one.
constexpr size_t kMaxKeyFileSize = 1 << 20;

int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

std::string_view trim(std::string_view text) {
    const char *blanks = " \t\r";
    const size_t first = text.find_first_not_of(blanks);
    if (first == std::string_view::npos) return {};
    return text.substr(first, text.find_last_not_of(blanks) - first + 1);
}

Status bad_line(size_t number, const std::string &why) {
    return error(Code::bad_request, "line " + std::to_string(number) + ": " + why);
}

}  // namespace

// The text is only looked at, never copied, and each key is decoded into a buffer of
// its final size: no copy of a key is left behind in freed memory.
Status parse_psk_text(const std::string &text, std::vector<PreSharedKey> *keys) {
    std::vector<PreSharedKey> parsed;
    const std::string_view all(text);
    size_t start = 0, number = 0;
    while (start < all.size()) {
        size_t end = all.find('\n', start);
        if (end == std::string_view::npos) end = all.size();
        const std::string_view line = trim(all.substr(start, end - start));
        start = end + 1;
        ++number;
        if (line.empty() || line[0] == '#') continue;

        PreSharedKey entry;
        std::string_view hex = line;
        const size_t colon = line.rfind(':');
        if (colon != std::string_view::npos) {
            entry.identity = std::string(trim(line.substr(0, colon)));
            hex = trim(line.substr(colon + 1));
            if (entry.identity.empty()) return bad_line(number, "empty identity before ':'");
        }
        if (hex.empty()) return bad_line(number, "no key (expected identity:hexkey or a hex key)");
        if (hex.size() % 2 != 0) return bad_line(number, "the key has an odd number of hex digits");
        entry.key.reserve(hex.size() / 2);
        for (size_t i = 0; i < hex.size(); i += 2) {
            const int high = hex_digit(hex[i]), low = hex_digit(hex[i + 1]);
            if (high < 0 || low < 0) return bad_line(number, "the key is not hexadecimal");
            entry.key.push_back(static_cast<uint8_t>(high << 4 | low));
        }
        if (entry.key.size() < kMinPskBytes) {
            return bad_line(number, "the key has " + std::to_string(entry.key.size()) + " bytes; at least " +
                                        std::to_string(kMinPskBytes) +
                                        " are needed (psktool -u NAME -p FILE makes a 32-byte key)");
        }
        for (const PreSharedKey &other : parsed) {
            if (other.identity == entry.identity) {
                return bad_line(number, entry.identity.empty() ? "a second bare key"
                                                               : "a second key for identity '" + entry.identity + "'");
            }
        }
        parsed.push_back(std::move(entry));
    }
    if (parsed.empty()) return error(Code::bad_request, "no key in it (expected identity:hexkey or a hex key)");
    *keys = std::move(parsed);
    return Status::success();
}

Status read_psk_fd(int fd, const std::string &name, std::vector<PreSharedKey> *keys) {
    std::string text;
    char chunk[4096];
    for (off_t offset = 0;;) {
        // pread: other processes may read the same open file (a listener's key copy).
        const ssize_t got = ::pread(fd, chunk, sizeof(chunk), offset);
        if (got < 0) {
            if (errno == EINTR) continue;
            return error(Code::error, "key file " + name + ": " + std::strerror(errno));
        }
        if (got == 0) break;
        offset += got;
        text.append(chunk, static_cast<size_t>(got));
        if (text.size() > kMaxKeyFileSize) return error(Code::error, "key file " + name + ": too large for a key file");
    }
    Status status = parse_psk_text(text, keys);
    // The text held the key: leave no copy of it in freed memory.
    ::explicit_bzero(text.data(), text.size());
    ::explicit_bzero(chunk, sizeof(chunk));
    if (!status) return error(status.code(), "key file " + name + ": " + status.message());
    return Status::success();
}

Status read_psk_file(const std::string &path, std::vector<PreSharedKey> *keys) {
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd.valid()) return error(Code::error, "key file " + path + ": " + std::strerror(errno));
    return read_psk_fd(fd.get(), path, keys);
}

bool psk_file_readable_by_others(const std::string &path) {
    struct stat st{};
    return ::stat(path.c_str(), &st) == 0 && (st.st_mode & S_IROTH) != 0;
}

}  // namespace ggml_remote
