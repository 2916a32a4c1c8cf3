#include "guest/session/reconnector.h"

#include <algorithm>
#include <thread>

#include "guest/log.h"

namespace ggml_remote::guest {

using namespace protocol;

namespace {

std::string lost_summary(const RestoreReport &report) {
    if (report.intact()) return "nothing lost";
    std::string text = report.scratch_lost ? "the graph being computed must be run again by the application" : "";
    if (!report.lost.empty()) {
        if (!text.empty()) text += "; ";
        text += "contents lost (now zeros; the next compute that reads one fails, naming it):";
        for (const std::string &name : report.lost) text += " " + name;
    }
    return text;
}

}  // namespace

void Reconnector::add(Restorable *object) { restorables_.push_back(object); }

void Reconnector::remove(Restorable *object) {
    restorables_.erase(std::remove(restorables_.begin(), restorables_.end(), object), restorables_.end());
}

Status Reconnector::refuse_if_lost(CallPipeline &pipeline, SessionTerms *terms) {
    if (!pipeline.broken()) return Status::success();
    recover(pipeline, terms);
    if (pipeline.broken()) return error(Code::disconnected, "no connection to " + endpoint_);
    return error(Code::disconnected,
                 "the connection to " + endpoint_ +
                     " was made again, but this call, which named the old one's objects, was not sent");
}

Status Reconnector::reconnect_once(CallPipeline &pipeline, SessionTerms *terms, int timeout_ms) {
    FramedStream stream;
    Status status = connector_(&stream, timeout_ms);
    if (!status) return status;
    pipeline.begin(std::move(stream));
    const uint32_t devices = terms->device_count;
    status = handshake(pipeline.stream(), endpoint_, options_, ask_, terms);
    if (status && terms->device_count != devices) {
        status = error(Code::error, "the server now has " + std::to_string(terms->device_count) + " devices, not " +
                                        std::to_string(devices));
    }
    if (!status) {
        pipeline.drop_connection();
        return status;
    }
    pipeline.reapply_compute_threads();
    return Status::success();
}

void Reconnector::restore_objects(CallPipeline &pipeline, RestoreReport *report) {
    // No object joins or leaves meanwhile: add() and remove() run under the
    // session's lock, held here, and a restore calls only through the pipeline.
    for (Restorable *object : restorables_) {
        if (pipeline.broken()) break;
        object->restore(pipeline, report);
    }
}

Status Reconnector::attempt_series(CallPipeline &pipeline, SessionTerms *terms,
                                   std::chrono::steady_clock::time_point deadline, int *attempts) {
    using namespace std::chrono;
    Status last;
    for (int delay_ms = 10;; delay_ms = std::min(delay_ms * 2, options_.reconnect_max_delay_ms)) {
        ++*attempts;
        const auto left_ms = duration_cast<milliseconds>(deadline - steady_clock::now()).count();
        last = reconnect_once(pipeline, terms, static_cast<int>(std::max<long long>(left_ms, 1)));
        if (last || steady_clock::now() + milliseconds(delay_ms) >= deadline) break;
        std::this_thread::sleep_for(milliseconds(delay_ms));
    }
    return last;
}

void Reconnector::recover(CallPipeline &pipeline, SessionTerms *terms) {
    using namespace std::chrono;
    if (!pipeline.broken() || !reconnects()) return;
    const auto start = steady_clock::now();
    if (start < next_series_) return;
    int attempts = 0;
    const Status last = attempt_series(pipeline, terms, start + milliseconds(options_.connect_timeout_ms), &attempts);
    const auto connected = steady_clock::now();
    const long long took_ms = duration_cast<milliseconds>(connected - start).count();
    RestoreReport report;
    if (last) restore_objects(pipeline, &report);
    const long long restore_ms = duration_cast<milliseconds>(steady_clock::now() - connected).count();
    if (!last || pipeline.broken()) {
        next_series_ = steady_clock::now() + milliseconds(options_.reconnect_max_delay_ms);
        log(GGML_LOG_LEVEL_ERROR,
            "could not reconnect to %s: %d attempt(s) in %lld ms, the last: %s; calls fail "
            "until a later attempt succeeds",
            endpoint_.c_str(), attempts, took_ms,
            last ? "the connection was lost again while restoring" : last.message().c_str());
        return;
    }
    ++reconnections_;
    last_restore_intact_ = report.intact();
    log(GGML_LOG_LEVEL_WARN, "reconnected to %s after %d attempt(s) in %lld ms, restored %zu objects in %lld ms; %s",
        endpoint_.c_str(), attempts, took_ms, report.restored, restore_ms, lost_summary(report).c_str());
}

}  // namespace ggml_remote::guest
