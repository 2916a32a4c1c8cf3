#include "transport/psk_binder.h"

#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>

#include <algorithm>
#include <cstring>

namespace ggml_remote {

namespace {

// A ClientHello's body, read front to back; every read is bounds-checked.
class Reader {
  public:
    Reader(const uint8_t *data, size_t size) : data_(data), size_(size) {}
    bool skip(size_t n) {
        if (size_ - at_ < n) return false;
        at_ += n;
        return true;
    }
    bool number(size_t bytes, size_t *value) {
        if (size_ - at_ < bytes) return false;
        *value = 0;
        for (size_t i = 0; i < bytes; ++i) *value = (*value << 8) | data_[at_++];
        return true;
    }
    // A vector with a `length_bytes` length prefix: its start and size.
    bool vector(size_t length_bytes, size_t *start, size_t *length) {
        if (!number(length_bytes, length)) return false;
        *start = at_;
        return skip(*length);
    }
    size_t at() const { return at_; }

  private:
    const uint8_t *data_;
    size_t size_;
    size_t at_ = 0;
};

constexpr size_t kPreSharedKeyExtension = 41;

// Where the pre_shared_key extension's data starts and ends (the last extension).
Status find_psk_extension(const uint8_t *body, size_t size, size_t *start, size_t *length) {
    Reader hello(body, size);
    size_t ignored_start = 0, ignored = 0, extensions_start = 0, extensions_size = 0;
    const bool parsed = hello.skip(2 + 32) && hello.vector(1, &ignored_start, &ignored) &&
                        hello.vector(2, &ignored_start, &ignored) && hello.vector(1, &ignored_start, &ignored) &&
                        hello.vector(2, &extensions_start, &extensions_size);
    if (!parsed) return error(Code::bad_request, "TLS: a ClientHello that does not parse");
    Reader extensions(body + extensions_start, extensions_size);
    while (extensions.at() < extensions_size) {
        size_t type = 0, data_start = 0, data_size = 0;
        if (!extensions.number(2, &type) || !extensions.vector(2, &data_start, &data_size)) break;
        if (type != kPreSharedKeyExtension) continue;
        if (extensions.at() != extensions_size) break;  // it must be the last
        *start = extensions_start + data_start;
        *length = data_size;
        return Status::success();
    }
    return error(Code::bad_request, "TLS: a ClientHello without a pre-shared key, or with it misplaced");
}

// Fills the proof's binder for `identity` and returns where the binders start in
// the body (what the transcript hash covers ends there).
Status find_binder(const uint8_t *body, size_t psk_start, size_t psk_size, const std::string &identity,
                   BinderProof *proof, size_t *binders_at) {
    Reader psk(body + psk_start, psk_size);
    size_t identities_start = 0, identities_size = 0;
    if (!psk.vector(2, &identities_start, &identities_size)) return error(Code::bad_request, "TLS: no identities");
    *binders_at = psk_start + psk.at();
    Reader identities(body + psk_start + identities_start, identities_size);
    size_t index = 0, wanted = SIZE_MAX;
    for (; identities.at() < identities_size; ++index) {
        size_t start = 0, size = 0;
        if (!identities.vector(2, &start, &size) || !identities.skip(4)) {
            return error(Code::bad_request, "TLS: identities that do not parse");
        }
        const char *name = reinterpret_cast<const char *>(body + psk_start + identities_start + start);
        if (wanted == SIZE_MAX && identity == std::string(name, size)) wanted = index;
    }
    if (wanted == SIZE_MAX) return error(Code::bad_request, "TLS: the ClientHello offers no such identity");
    size_t binders_start = 0, binders_size = 0;
    if (!psk.vector(2, &binders_start, &binders_size)) return error(Code::bad_request, "TLS: no binders");
    Reader binders(body + psk_start + binders_start, binders_size);
    for (size_t i = 0; binders.at() < binders_size; ++i) {
        size_t start = 0, size = 0;
        if (!binders.vector(1, &start, &size)) break;
        if (i != wanted) continue;
        if (size != 32 && size != 48) return error(Code::bad_request, "TLS: a binder of an unknown hash");
        proof->hash_bytes = static_cast<uint32_t>(size);
        std::memcpy(proof->binder, body + psk_start + binders_start + start, size);
        return Status::success();
    }
    return error(Code::bad_request, "TLS: fewer binders than identities");
}

gnutls_digest_algorithm_t digest_for(uint32_t hash_bytes) {
    return hash_bytes == 48 ? GNUTLS_DIG_SHA384 : GNUTLS_DIG_SHA256;
}
gnutls_mac_algorithm_t mac_for(uint32_t hash_bytes) { return hash_bytes == 48 ? GNUTLS_MAC_SHA384 : GNUTLS_MAC_SHA256; }

// HKDF-Expand-Label(secret, label, context, length) of RFC 8446, 7.1.
bool expand_label(gnutls_mac_algorithm_t mac, const std::vector<uint8_t> &secret, const std::string &label,
                  const std::vector<uint8_t> &context, size_t length, std::vector<uint8_t> *out) {
    const std::string full = "tls13 " + label;
    std::vector<uint8_t> info = {static_cast<uint8_t>(length >> 8), static_cast<uint8_t>(length),
                                 static_cast<uint8_t>(full.size())};
    info.insert(info.end(), full.begin(), full.end());
    info.push_back(static_cast<uint8_t>(context.size()));
    info.insert(info.end(), context.begin(), context.end());
    const gnutls_datum_t key{const_cast<uint8_t *>(secret.data()), static_cast<unsigned>(secret.size())};
    const gnutls_datum_t info_datum{info.data(), static_cast<unsigned>(info.size())};
    out->assign(length, 0);
    return gnutls_hkdf_expand(mac, &key, &info_datum, out->data(), length) == 0;
}

}  // namespace

std::string BinderProof::identity_text() const {
    return std::string(identity, std::min<size_t>(identity_size, sizeof(identity)));
}

Status binder_proof_from_client_hello(const uint8_t *body, size_t size, const std::string &identity,
                                      BinderProof *proof) {
    if (identity.size() > kMaxProofIdentityBytes) return error(Code::bad_request, "TLS: the identity is too long");
    size_t psk_start = 0, psk_size = 0, binders_at = 0;
    if (Status s = find_psk_extension(body, size, &psk_start, &psk_size); !s) return s;
    if (Status s = find_binder(body, psk_start, psk_size, identity, proof, &binders_at); !s) return s;
    // The transcript covers the message's header too, which names the whole body's length.
    std::vector<uint8_t> truncated = {1, static_cast<uint8_t>(size >> 16), static_cast<uint8_t>(size >> 8),
                                      static_cast<uint8_t>(size)};
    truncated.insert(truncated.end(), body, body + binders_at);
    if (gnutls_hash_fast(digest_for(proof->hash_bytes), truncated.data(), truncated.size(), proof->transcript_hash) !=
        0) {
        return error(Code::error, "TLS: cannot hash the ClientHello");
    }
    proof->identity_size = static_cast<uint32_t>(identity.size());
    std::memcpy(proof->identity, identity.data(), identity.size());
    return Status::success();
}

bool binder_matches(const std::vector<uint8_t> &key, const BinderProof &proof) {
    if ((proof.hash_bytes != 32 && proof.hash_bytes != 48) || key.empty()) return false;
    const size_t length = proof.hash_bytes;
    const gnutls_mac_algorithm_t mac = mac_for(proof.hash_bytes);
    std::vector<uint8_t> zeros(length, 0), early(length, 0), empty_hash(length, 0), binder_key, finished;
    const gnutls_datum_t ikm{const_cast<uint8_t *>(key.data()), static_cast<unsigned>(key.size())};
    const gnutls_datum_t salt{zeros.data(), static_cast<unsigned>(zeros.size())};
    uint8_t expected[kMaxBinderBytes] = {};
    const bool computed =
        gnutls_hkdf_extract(mac, &ikm, &salt, early.data()) == 0 &&
        gnutls_hash_fast(digest_for(proof.hash_bytes), nullptr, 0, empty_hash.data()) == 0 &&
        expand_label(mac, early, "ext binder", empty_hash, length, &binder_key) &&
        expand_label(mac, binder_key, "finished", {}, length, &finished) &&
        gnutls_hmac_fast(mac, finished.data(), finished.size(), proof.transcript_hash, length, expected) == 0;
    uint8_t difference = computed ? 0 : 1;
    for (size_t i = 0; i < length; ++i) difference |= static_cast<uint8_t>(expected[i] ^ proof.binder[i]);
    for (std::vector<uint8_t> *secret : {&early, &binder_key, &finished}) {
        ::explicit_bzero(secret->data(), secret->size());
    }
    return difference == 0;
}

const PreSharedKey *find_psk(const std::vector<PreSharedKey> &keys, const std::string &identity) {
    const PreSharedKey *bare = nullptr;
    for (const PreSharedKey &entry : keys) {
        if (entry.identity == identity) return &entry;
        if (entry.identity.empty() && bare == nullptr) bare = &entry;
    }
    return bare;
}

Status key_for_proof(const std::vector<PreSharedKey> &keys, const BinderProof &proof, std::vector<uint8_t> *key) {
    if (proof.identity_size > kMaxProofIdentityBytes) return error(Code::bad_request, "TLS: the identity is too long");
    const PreSharedKey *found = find_psk(keys, proof.identity_text());
    if (found == nullptr) return error(Code::not_found, "TLS: no key for that identity");
    if (!binder_matches(found->key, proof)) return error(Code::bad_request, "the binder does not match the key");
    *key = found->key;
    return Status::success();
}

}  // namespace ggml_remote
