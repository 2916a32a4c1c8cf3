// Channels a listener component serves on a thread each (the weight store's owner,
// the peer broker): their threads are joined once they ended, not at shutdown only.
#pragma once

#include <list>
#include <memory>
#include <mutex>

namespace ggml_remote::host {

// Takes the channels whose thread set `ended` out of `channels` (under `mutex`) and
// joins their threads. Channel: an atomic<bool> `ended` and a std::thread `thread`.
template <typename Channel>
void join_ended_channels(std::mutex &mutex, std::list<std::unique_ptr<Channel>> &channels) {
    std::list<std::unique_ptr<Channel>> ended;
    {
        std::lock_guard<std::mutex> lock(mutex);
        for (auto it = channels.begin(); it != channels.end();) {
            auto next = std::next(it);
            if ((*it)->ended.load()) ended.splice(ended.end(), channels, it);
            it = next;
        }
    }
    for (auto &channel : ended) channel->thread.join();
}

}  // namespace ggml_remote::host
