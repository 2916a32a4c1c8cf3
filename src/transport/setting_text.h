// The text of a setting (an environment variable's value) into a value, for the
// guest's and the server's options; an error names the setting and says what
// would have been right.
#pragma once

#include <cstdint>

#include "protocol/status.h"

namespace ggml_remote {

// A switch: unset or empty keeps `fallback`, "0" turns it off, anything else on.
bool switch_setting(const char *text, bool fallback);

// A whole number from `min` to `max`: unset or empty leaves `*value` as it is;
// anything else that is not such a number is an error and leaves it too.
Status number_setting(const char *name, const char *text, uint64_t min, uint64_t max, uint64_t *value);

}  // namespace ggml_remote
