// The guest's pre-shared key for tls:// endpoints, from its options:
// GGML_REMOTE_TLS_PSK_FILE (a key file, as psktool writes it) or GGML_REMOTE_TLS_PSK
// (the key itself: "hexkey" or "identity:hexkey").
#pragma once

#include "guest/guest_options.h"
#include "protocol/status.h"
#include "transport/tls_key.h"

namespace ggml_remote::guest {

// The one key to present; the error says which variable to set and how.
Status tls_key_from_options(const GuestOptions &options, PreSharedKey *key);

}  // namespace ggml_remote::guest
