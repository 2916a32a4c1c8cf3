#include "guest/log.h"

#include <cstdarg>
#include <cstdio>

namespace ggml_remote::guest {

void log(ggml_log_level level, const char *format, ...) {
    char text[2048];
    int prefix = std::snprintf(text, sizeof(text), "ggml-remote: ");
    va_list args;
    va_start(args, format);
    std::vsnprintf(text + prefix, sizeof(text) - prefix - 1, format, args);
    va_end(args);
    size_t length = 0;
    while (length < sizeof(text) - 2 && text[length] != '\0') ++length;
    text[length] = '\n';
    text[length + 1] = '\0';

    ggml_log_callback callback = nullptr;
    void *user_data = nullptr;
    ggml_log_get(&callback, &user_data);
    if (callback != nullptr) {
        callback(level, text, user_data);
    } else {
        std::fputs(text, stderr);
    }
}

}  // namespace ggml_remote::guest
