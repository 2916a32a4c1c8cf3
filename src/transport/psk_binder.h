// PskBinder: the proof that a TLS 1.3 client holds the pre-shared key of the
// identity it names (RFC 8446, 4.2.11: the binder, an HMAC over the ClientHello
// under a key derived from the PSK), in a form a process that never parses TLS can
// check. The worker, which reads a guest's ClientHello in its sandbox and holds no
// key, sends it; the listener, which holds the keys, computes the binder with its
// own key for that identity and gives that one key out only when the two agree.
// So a worker a guest took over before its handshake learns no key, and cannot
// name an identity whose key its guest does not hold.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "protocol/status.h"
#include "transport/tls_key.h"

namespace ggml_remote {

// TLS 1.3 allows an identity of up to 2^16 - 1 bytes; a bare key admits any of them.
constexpr size_t kMaxProofIdentityBytes = 65535;
constexpr size_t kMaxBinderBytes = 48;  // SHA-384's; SHA-256 gives 32

// Fixed-size, so that it crosses a socket as it is.
struct BinderProof {
    uint32_t hash_bytes = 0;                        // 32 (SHA-256) or 48 (SHA-384): the PSK's hash
    uint32_t identity_size = 0;                     // bytes of `identity`
    uint8_t transcript_hash[kMaxBinderBytes] = {};  // Hash(the ClientHello up to its binders)
    uint8_t binder[kMaxBinderBytes] = {};           // the binder the client sent for `identity`
    char identity[kMaxProofIdentityBytes] = {};

    std::string identity_text() const;
};

// The proof for `identity` in a ClientHello's body (the handshake message without
// its 4-byte header), as GnuTLS hands it over. An error for a ClientHello that
// offers no such identity, or that does not parse.
Status binder_proof_from_client_hello(const uint8_t *body, size_t size, const std::string &identity,
                                      BinderProof *proof);

// Whether `proof` is what a client holding `key` sends: the binder of an external
// PSK over its transcript hash, compared in constant time. False for a proof whose
// sizes are out of range.
bool binder_matches(const std::vector<uint8_t> &key, const BinderProof &proof);

// The key for `identity` in `keys`: its own entry, else the bare key (which a
// server takes under any identity); null when there is neither.
const PreSharedKey *find_psk(const std::vector<PreSharedKey> &keys, const std::string &identity);

// The key of `proof`'s identity when the proof shows that the client holds it:
// Code::not_found when `keys` has none for it, bad_request when the binder does not
// match.
Status key_for_proof(const std::vector<PreSharedKey> &keys, const BinderProof &proof, std::vector<uint8_t> *key);

}  // namespace ggml_remote
