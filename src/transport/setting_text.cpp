#include "transport/setting_text.h"

#include <cerrno>
#include <cstdlib>
#include <string>

namespace ggml_remote {

bool switch_setting(const char *text, bool fallback) {
    if (text == nullptr || *text == '\0') return fallback;
    return std::string(text) != "0";
}

Status number_setting(const char *name, const char *text, uint64_t min, uint64_t max, uint64_t *value) {
    if (text == nullptr || *text == '\0') return Status::success();
    char *end = nullptr;
    errno = 0;
    const unsigned long long number = std::strtoull(text, &end, 10);
    const bool digits_only = *text >= '0' && *text <= '9' && *end == '\0';
    if (!digits_only || errno == ERANGE || number < min || number > max) {
        return error(Code::bad_request, std::string(name) + "=" + text + " is not a number from " +
                                            std::to_string(min) + " to " + std::to_string(max) +
                                            "; the default is used");
    }
    *value = number;
    return Status::success();
}

}  // namespace ggml_remote
