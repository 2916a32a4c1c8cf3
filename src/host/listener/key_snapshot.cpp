#include "host/listener/key_snapshot.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "transport/regular_file.h"
#include "transport/socket.h"
#include "transport/tls_key.h"

namespace ggml_remote::host {

namespace {

constexpr size_t kMaxKeyCopy = 1 << 20;

// The bytes of `fd` from its start, at most kMaxKeyCopy.
Status read_all(int fd, std::string *text) {
    char chunk[4096];
    for (off_t offset = 0;;) {
        const ssize_t got = ::pread(fd, chunk, sizeof(chunk), offset);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) return error(Code::error, std::strerror(errno));
        if (got == 0) break;
        offset += got;
        text->append(chunk, static_cast<size_t>(got));
        if (text->size() > kMaxKeyCopy) return error(Code::error, "too large for a key file");
    }
    ::explicit_bzero(chunk, sizeof(chunk));
    return Status::success();
}

// A sealed memory file holding `text`.
Status sealed_copy(const std::string &text, UniqueFd *out) {
    UniqueFd fd(::memfd_create("ggml-remote-keys", MFD_CLOEXEC | MFD_ALLOW_SEALING));
    if (!fd.valid()) return error(Code::error, std::string("memfd_create: ") + std::strerror(errno));
    if (!write_fully(fd.get(), text.data(), text.size())) {
        return error(Code::error, std::string("write: ") + std::strerror(errno));
    }
    if (::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL) != 0) {
        return error(Code::error, std::string("sealing the key copy: ") + std::strerror(errno));
    }
    *out = std::move(fd);
    return Status::success();
}

}  // namespace

Status KeySnapshot::load(const std::string &path, size_t *key_count) {
    // The operator's path (a link is followed: a mounted secret is one); a FIFO
    // or a device in its place is refused unread.
    RegularFileRules rules;
    rules.max_bytes = kMaxKeyCopy;
    rules.follow_link = true;
    UniqueFd file;
    if (Status opened = open_regular_file(AT_FDCWD, path, rules, &file); !opened) {
        return error(Code::error, "key file " + opened.message());
    }
    std::string text;
    Status status = read_all(file.get(), &text);
    if (!status) status = error(Code::error, "key file " + path + ": " + status.message());
    UniqueFd copy;
    if (status) status = sealed_copy(text, &copy);
    ::explicit_bzero(text.data(), text.size());
    // The copy is checked as the workers will read it.
    std::vector<PreSharedKey> keys;
    if (status) status = read_psk_fd(copy.get(), path, &keys);
    for (PreSharedKey &key : keys) ::explicit_bzero(key.key.data(), key.key.size());
    if (!status) return status;
    fd_ = std::move(copy);
    *key_count = keys.size();
    return Status::success();
}

Status KeySnapshot::key_for(const BinderProof &proof, std::vector<uint8_t> *key) const {
    if (!fd_.valid()) return error(Code::error, "no keys");
    std::vector<PreSharedKey> keys;
    Status status = read_psk_fd(fd_.get(), "the key copy", &keys);
    if (status) status = key_for_proof(keys, proof, key);
    for (PreSharedKey &entry : keys) ::explicit_bzero(entry.key.data(), entry.key.size());
    return status;
}

}  // namespace ggml_remote::host
