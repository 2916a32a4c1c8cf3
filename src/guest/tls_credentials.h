// The guest's pre-shared keys for tls:// endpoints: an endpoint's own key file
// ("tls://host:port?psk-file=/path[&psk-identity=NAME]"), or else the global key from
// its options: GGML_REMOTE_TLS_PSK_FILE (a key file, as psktool writes it) or
// GGML_REMOTE_TLS_PSK (the key itself: "hexkey" or "identity:hexkey").
#pragma once

#include "guest/guest_options.h"
#include "protocol/status.h"
#include "transport/endpoint.h"
#include "transport/tls_key.h"

namespace ggml_remote::guest {

// The one global key to present; the error says which variable to set and how.
Status tls_key_from_options(const GuestOptions &options, PreSharedKey *key);

// The key to present to `endpoint`: its psk-file= when it has one, else the global key.
Status tls_key_for(const Endpoint &endpoint, const GuestOptions &options, PreSharedKey *key);

}  // namespace ggml_remote::guest
