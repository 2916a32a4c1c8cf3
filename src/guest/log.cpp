#include "guest/log.h"

#include <dlfcn.h>

#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>

namespace ggml_remote::guest {

namespace {

constexpr std::chrono::milliseconds kDrainAtExitLimit{1000};

void drain_at_exit() { drain_application_log(find_application_log_queue(), kDrainAtExitLimit); }

void drain_at_exit_once() {
    static std::once_flag once;
    std::call_once(once, [] { std::atexit(drain_at_exit); });
}

}  // namespace

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
        drain_at_exit_once();
    } else {
        std::fputs(text, stderr);
    }
}

ApplicationLogQueue find_application_log_queue() {
    // The C++ names of libllama-common's common_log_main() and common_log_pause(common_log *).
    void *main_queue = dlsym(RTLD_DEFAULT, "_Z15common_log_mainv");
    void *drain = dlsym(RTLD_DEFAULT, "_Z16common_log_pauseP10common_log");
    if (main_queue == nullptr || drain == nullptr) return {};
    ApplicationLogQueue queue;
    queue.main_queue = reinterpret_cast<common_log *(*)()>(main_queue);
    queue.drain = reinterpret_cast<void (*)(common_log *)>(drain);
    return queue;
}

bool drain_application_log(const ApplicationLogQueue &queue, std::chrono::milliseconds limit) {
    if (queue.main_queue == nullptr || queue.drain == nullptr) return false;
    struct Done {
        std::mutex mutex;
        std::condition_variable changed;
        bool done = false;
    };
    auto done = std::make_shared<Done>();
    // On a thread of its own, so that a drain that blocks holds up the exit by LIMIT only.
    try {
        std::thread([queue, done] {
            queue.drain(queue.main_queue());
            std::lock_guard<std::mutex> lock(done->mutex);
            done->done = true;
            done->changed.notify_all();
        }).detach();
    } catch (const std::system_error &) {
        return false;  // no thread to spare: the exit goes on as before
    }
    std::unique_lock<std::mutex> lock(done->mutex);
    return done->changed.wait_for(lock, limit, [&] { return done->done; });
}

}  // namespace ggml_remote::guest
