#include "transport/wait_options.h"

#include "transport/setting_text.h"

namespace ggml_remote {

Status parse_wait_options(const char *ring_spin_us, const char *spin_spare, const char *follow_worker,
                          WaitOptions *options) {
    constexpr uint64_t kMaxSpinUs = 100000;
    uint64_t spin_us = options->max_spin_ns / 1000;
    Status status = number_setting("GGML_REMOTE_RING_SPIN_US", ring_spin_us, 0, kMaxSpinUs, &spin_us);
    options->max_spin_ns = spin_us * 1000;
    options->spin_on_spare_cores = switch_setting(spin_spare, options->spin_on_spare_cores);
    options->follow_worker = switch_setting(follow_worker, options->follow_worker);
    return status;
}

}  // namespace ggml_remote
