// Pre-shared keys for TLS over TCP, in the file format gnutls' psktool writes:
// one "identity:hexkey" per line (`psktool -u guest -p keyfile`), or a file that
// holds just the hex key.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "protocol/status.h"

namespace ggml_remote {

// Keys shorter than this are refused: a guessable key is no authentication.
constexpr size_t kMinPskBytes = 16;
// The identity a guest presents when its key has none (a file with just the hex key).
constexpr const char *kDefaultPskIdentity = "ggml-remote";

// Zeroes its key bytes whenever it lets them go (destroyed or assigned over), so that
// no error path leaves a key behind in freed memory.
struct PreSharedKey {
    std::string identity;  // empty: a bare key; a server accepts it under any identity
    std::vector<uint8_t> key;

    PreSharedKey() = default;
    PreSharedKey(std::string identity_, std::vector<uint8_t> key_)
        : identity(std::move(identity_)), key(std::move(key_)) {}
    PreSharedKey(const PreSharedKey &) = default;
    PreSharedKey(PreSharedKey &&) noexcept = default;
    PreSharedKey &operator=(const PreSharedKey &other);
    PreSharedKey &operator=(PreSharedKey &&other) noexcept;
    ~PreSharedKey() { wipe(); }

    void wipe();  // zeroes the key bytes (the size stays)
};

// Parses key text: lines "identity:hexkey" or one bare "hexkey"; blank lines and
// lines starting with '#' are skipped. Errors name the line, never the key.
Status parse_psk_text(const std::string &text, std::vector<PreSharedKey> *keys);

// Reads and parses a key file: a regular file of at most 1 MiB; errors name the file.
Status read_psk_file(const std::string &path, std::vector<PreSharedKey> *keys);
// The same from an open file, read from its start; errors name it `name`.
Status read_psk_fd(int fd, const std::string &name, std::vector<PreSharedKey> *keys);

// Whether every user of the machine can read a key file (worth a warning).
bool psk_file_readable_by_others(const std::string &path);

}  // namespace ggml_remote
