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

void PreSharedKey::wipe() {
    if (!key.empty()) ::explicit_bzero(key.data(), key.size());
}

PreSharedKey &PreSharedKey::operator=(const PreSharedKey &other) {
    if (this != &other) {
        wipe();
        identity = other.identity;
        key = other.key;
    }
    return *this;
}

PreSharedKey &PreSharedKey::operator=(PreSharedKey &&other) noexcept {
    if (this != &other) {
        wipe();
        identity = std::move(other.identity);
        key = std::move(other.key);
    }
    return *this;
}

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

namespace {

// Zeroes a buffer that held key text when it goes, whichever way the read ends.
class WipedText {
  public:
    explicit WipedText(size_t capacity) { text_.reserve(capacity); }
    ~WipedText() {
        text_.resize(text_.capacity());  // within the buffer: no move, and all of it is zeroed
        ::explicit_bzero(text_.data(), text_.size());
    }
    WipedText(const WipedText &) = delete;
    WipedText &operator=(const WipedText &) = delete;
    std::string &text() { return text_; }

  private:
    std::string text_;
};

}  // namespace

Status read_psk_fd(int fd, const std::string &name, std::vector<PreSharedKey> *keys) {
    struct stat st{};
    if (::fstat(fd, &st) != 0) return error(Code::error, "key file " + name + ": " + std::strerror(errno));
    if (!S_ISREG(st.st_mode)) return error(Code::error, "key file " + name + ": not a regular file");
    if (static_cast<uint64_t>(st.st_size) > kMaxKeyFileSize) {
        return error(Code::error, "key file " + name + ": too large for a key file");
    }
    // Room for the largest accepted file and one chunk more: the text never moves,
    // so no copy of it is left in memory given back.
    char chunk[4096];
    WipedText buffer(kMaxKeyFileSize + sizeof(chunk));
    std::string &text = buffer.text();
    Status status = Status::success();
    for (off_t offset = 0;;) {
        // pread: other processes may read the same open file (a listener's key copy).
        const ssize_t got = ::pread(fd, chunk, sizeof(chunk), offset);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) status = error(Code::error, "key file " + name + ": " + std::strerror(errno));
        if (got <= 0) break;
        offset += got;
        text.append(chunk, static_cast<size_t>(got));
        if (text.size() > kMaxKeyFileSize) {
            status = error(Code::error, "key file " + name + ": too large for a key file");
            break;
        }
    }
    ::explicit_bzero(chunk, sizeof(chunk));
    if (!status) return status;
    status = parse_psk_text(text, keys);
    if (!status) return error(status.code(), "key file " + name + ": " + status.message());
    return Status::success();
}

Status read_psk_file(const std::string &path, std::vector<PreSharedKey> *keys) {
    // O_NONBLOCK: a FIFO in the key file's place must not hang the open.
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
    if (!fd.valid()) return error(Code::error, "key file " + path + ": " + std::strerror(errno));
    return read_psk_fd(fd.get(), path, keys);
}

bool psk_file_readable_by_others(const std::string &path) {
    struct stat st{};
    return ::stat(path.c_str(), &st) == 0 && (st.st_mode & S_IROTH) != 0;
}

}  // namespace ggml_remote
