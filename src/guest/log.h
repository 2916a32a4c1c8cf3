// Guest logging through ggml's log callback, so applications keep control of output.
#pragma once

#include <ggml.h>

#include <chrono>

struct common_log;  // libllama-common's log queue, never looked into

namespace ggml_remote::guest {

void log(ggml_log_level level, const char *format, ...) __attribute__((format(printf, 2, 3)));

// llama.cpp's tools log through libllama-common's queue, which a thread of theirs
// empties and which they leave undrained at exit on purpose (llama.cpp#22273): on
// a busy machine their last lines were lost, ours among them (why no device
// appeared, why a compute failed). Once this plugin has logged through a callback,
// the process drains that queue at exit.
struct ApplicationLogQueue {
    common_log *(*main_queue)() = nullptr;       // common_log_main()
    void (*drain)(common_log *queue) = nullptr;  // common_log_pause(): prints what is queued, then stops
};

// The queue's functions where the process has libllama-common; nulls elsewhere.
ApplicationLogQueue find_application_log_queue();

// Drains QUEUE, waiting at most LIMIT (a stderr nobody reads could block it for
// good). False when it had no queue or did not finish in time.
bool drain_application_log(const ApplicationLogQueue &queue, std::chrono::milliseconds limit);

}  // namespace ggml_remote::guest
