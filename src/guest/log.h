// Guest logging through ggml's log callback, so applications keep control of output.
#pragma once

#include <ggml.h>

namespace ggml_remote::guest {

void log(ggml_log_level level, const char *format, ...) __attribute__((format(printf, 2, 3)));

}  // namespace ggml_remote::guest
