#include "guest/tls_credentials.h"

#include <vector>

namespace ggml_remote::guest {

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
                     "server's --tls-psk file, as psktool -u NAME -p FILE writes it) or GGML_REMOTE_TLS_PSK=hexkey");
    }
    const std::string source = have_file ? "GGML_REMOTE_TLS_PSK_FILE: " : "GGML_REMOTE_TLS_PSK: ";
    std::vector<PreSharedKey> keys;
    Status status = have_file ? read_psk_file(file, &keys) : parse_psk_text(text, &keys);
    if (!status) return error(status.code(), source + status.message());
    if (keys.size() != 1) {
        return error(Code::bad_request, source + std::to_string(keys.size()) +
                                            " keys; a guest presents one (its own identity:hexkey line)");
    }
    *key = std::move(keys.front());
    return Status::success();
}

}  // namespace ggml_remote::guest
