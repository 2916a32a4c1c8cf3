// KeySnapshot: the listener's checked copy of the --tls-psk file, in a sealed
// memory file. No worker reads it: a TLS worker asks for the one key its guest
// proves it holds (key_for). The file is read at
// start-up and again on SIGHUP; a file that does not parse keeps the copy before
// it, so a typo never locks every new guest out.
#pragma once

#include <string>
#include <vector>

#include "protocol/status.h"
#include "transport/psk_binder.h"
#include "transport/unique_fd.h"

namespace ggml_remote::host {

class KeySnapshot {
  public:
    // Reads and checks `path`; on success the copy is replaced and *key_count set.
    // On failure the previous copy (or none) stays.
    Status load(const std::string &path, size_t *key_count);
    // The sealed copy (read-only for everyone), or -1 before the first load succeeded.
    int fd() const { return fd_.get(); }
    // The key of `proof`'s identity, when the proof shows that the guest holds it
    // (psk_binder.h): what a TLS worker gets, and no other key. The keys are read
    // from the copy for each question and wiped after it.
    Status key_for(const BinderProof &proof, std::vector<uint8_t> *key) const;

  private:
    UniqueFd fd_;
};

}  // namespace ggml_remote::host
