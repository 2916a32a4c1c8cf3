// WaitOptions: how a side that waits for its peer behaves, as its process's
// options say (the guest's GuestOptions, the server's ServingOptions). Transport
// code never reads the environment: it is given these values.
#pragma once

#include <cstdint>

#include "protocol/status.h"

namespace ggml_remote {

struct WaitOptions {
    // The longest wait spun through before sleeping (GGML_REMOTE_RING_SPIN_US, in us).
    uint64_t max_spin_ns = 200000;
    // A wait behind a busy peer spins too where cores are spare (GGML_REMOTE_SPIN_SPARE).
    bool spin_on_spare_cores = true;
    // Guest on a shared ring: sleeps behind a compute on the worker's CPU
    // (GGML_REMOTE_FOLLOW_WORKER; see RingChannel::follow_worker).
    bool follow_worker = true;
};

// Reads the text of the variables above (null when unset) into `options`; each
// malformed value leaves its default and is named in the error.
Status parse_wait_options(const char *ring_spin_us, const char *spin_spare, const char *follow_worker,
                          WaitOptions *options);

}  // namespace ggml_remote
