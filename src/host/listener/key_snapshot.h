// KeySnapshot: the listener's checked copy of the --tls-psk file, in a sealed
// memory file that each TLS worker reads its keys from. The file is read at
// start-up and again on SIGHUP; a file that does not parse keeps the copy before
// it, so a typo never locks every new guest out.
#pragma once

#include <string>

#include "protocol/status.h"
#include "transport/unique_fd.h"

namespace ggml_remote::host {

class KeySnapshot {
  public:
    // Reads and checks `path`; on success the copy is replaced and *key_count set.
    // On failure the previous copy (or none) stays.
    Status load(const std::string &path, size_t *key_count);
    // The sealed copy (read-only for everyone: no worker can change the next one's
    // keys), or -1 before the first load succeeded.
    int fd() const { return fd_.get(); }

  private:
    UniqueFd fd_;
};

}  // namespace ggml_remote::host
