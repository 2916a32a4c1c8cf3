#include "guest/tls_credentials.h"

#include <vector>

#include "guest/log.h"

namespace ggml_remote::guest {

namespace {

// A key file every user can read is worth a warning, as the server gives for its own.
Status read_key_file(const std::string &path, std::vector<PreSharedKey> *keys) {
    Status status = read_psk_file(path, keys);
    if (status && psk_file_readable_by_others(path)) {
        log(GGML_LOG_LEVEL_WARN, "every user of this machine can read the key file %s (chmod o-r it)", path.c_str());
    }
    return status;
}

std::string identities_of(const std::vector<PreSharedKey> &keys) {
    std::string names;
    for (const PreSharedKey &key : keys) {
        names += (names.empty() ? "'" : ", '") + (key.identity.empty() ? kDefaultPskIdentity : key.identity) + "'";
    }
    return names;
}

// The key of `identity` among `keys` (a bare key takes that identity); with no
// identity, the one key there is. `source` names where the keys came from.
Status choose_psk(std::vector<PreSharedKey> *keys, const std::string &identity, const std::string &source,
                  PreSharedKey *key) {
    if (identity.empty()) {
        if (keys->size() != 1) {
            return error(Code::bad_request, source + ": " + std::to_string(keys->size()) +
                                                " keys; a guest presents one (its own identity:hexkey line, or "
                                                "psk-identity=NAME to pick one)");
        }
        *key = std::move(keys->front());
        return Status::success();
    }
    for (PreSharedKey &entry : *keys) {
        if (entry.identity == identity) {
            *key = std::move(entry);
            return Status::success();
        }
    }
    if (keys->size() == 1 && keys->front().identity.empty()) {
        *key = std::move(keys->front());
        key->identity = identity;
        return Status::success();
    }
    return error(Code::bad_request,
                 source + ": no key for identity '" + identity + "' (it has " + identities_of(*keys) + ")");
}

}  // namespace

Status tls_key_from_options(const GuestOptions &options, PreSharedKey *key) {
    const std::string &file = options.tls_psk_file;
    const std::string &text = options.tls_psk;
    const bool have_file = !file.empty();
    const bool have_text = !text.empty();
    if (have_file && have_text) {
        return error(Code::bad_request, "both GGML_REMOTE_TLS_PSK_FILE and GGML_REMOTE_TLS_PSK are set; set one");
    }
    if (!have_file && !have_text) {
        return error(Code::bad_request,
                     "no pre-shared key for TLS: set GGML_REMOTE_TLS_PSK_FILE=/path/to/keyfile (a line of the "
                     "server's --tls-psk file, as psktool -u NAME -p FILE writes it) or GGML_REMOTE_TLS_PSK=hexkey, "
                     "or give the server its own: tls://host:port?psk-file=/path/to/keyfile");
    }
    const std::string source = have_file ? "GGML_REMOTE_TLS_PSK_FILE" : "GGML_REMOTE_TLS_PSK";
    std::vector<PreSharedKey> keys;
    Status status = have_file ? read_key_file(file, &keys) : parse_psk_text(text, &keys);
    if (!status) return error(status.code(), source + ": " + status.message());
    return choose_psk(&keys, "", source, key);
}

Status tls_key_for(const Endpoint &endpoint, const GuestOptions &options, PreSharedKey *key) {
    if (endpoint.psk_file.empty()) return tls_key_from_options(options, key);
    const std::string source = "psk-file=" + endpoint.psk_file;
    std::vector<PreSharedKey> keys;
    Status status = read_key_file(endpoint.psk_file, &keys);
    if (!status) return error(status.code(), "psk-file: " + status.message());
    return choose_psk(&keys, endpoint.psk_identity, source, key);
}

}  // namespace ggml_remote::guest
