// The guest drains an application's asynchronous log queue at exit (llama.cpp's
// libllama-common leaves it undrained): this binary plays libllama-common, with
// the two functions the plugin looks up exported (application_log_symbols.list).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <string>
#include <vector>

#include "guest/log.h"

// A stand-in for libllama-common's queue: lines wait until common_log_pause.
struct common_log {
    std::vector<std::string> lines;
};

common_log *common_log_main() {
    static common_log queue;
    return &queue;
}

void common_log_pause(common_log *queue) {
    for (const std::string &line : queue->lines) std::fputs(line.c_str(), stderr);
    queue->lines.clear();
}

namespace ggml_remote::guest {
namespace {

void queue_line(ggml_log_level, const char *text, void *) { common_log_main()->lines.emplace_back(text); }

TEST(ApplicationLog, AQueuedLineReachesStderrAtExit) {
    EXPECT_EXIT(
        {
            ggml_log_set(queue_line, nullptr);
            log(GGML_LOG_LEVEL_ERROR, "no device from %s", "tcp://a.example:50053");
            std::exit(0);
        },
        testing::ExitedWithCode(0), "ggml-remote: no device from tcp://a.example:50053");
}

TEST(ApplicationLog, FindsTheQueueOfTheProcess) {
    const ApplicationLogQueue queue = find_application_log_queue();
    ASSERT_NE(queue.main_queue, nullptr);
    ASSERT_NE(queue.drain, nullptr);
    EXPECT_EQ(queue.main_queue(), common_log_main());
}

TEST(ApplicationLog, WithoutAQueueThereIsNothingToDrain) {
    EXPECT_FALSE(drain_application_log(ApplicationLogQueue{}, std::chrono::milliseconds(10)));
}

std::atomic<common_log *> g_drained{nullptr};
// Never destroyed: the drain thread may outlast the test.
auto *g_release = new std::promise<void>();
auto *g_released = new std::shared_future<void>(g_release->get_future().share());
common_log g_marker_queue;

common_log *marker_queue() { return &g_marker_queue; }
void record_drain(common_log *queue) { g_drained = queue; }
void block_until_released(common_log *) { g_released->wait(); }

TEST(ApplicationLog, DrainsTheProcessQueue) {
    ApplicationLogQueue queue{marker_queue, record_drain};
    EXPECT_TRUE(drain_application_log(queue, std::chrono::seconds(30)));
    EXPECT_EQ(g_drained.load(), &g_marker_queue);
}

TEST(ApplicationLog, ADrainThatBlocksHoldsTheExitUpOnlyForTheLimit) {
    ApplicationLogQueue queue{marker_queue, block_until_released};
    EXPECT_FALSE(drain_application_log(queue, std::chrono::milliseconds(50)));
    g_release->set_value();
}

}  // namespace
}  // namespace ggml_remote::guest
