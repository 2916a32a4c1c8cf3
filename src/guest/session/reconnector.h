// Reconnecting: a lost connection is made again (a series of attempts with
// back-off, bounded by the connect timeout), the handshake repeated, and the
// objects that named the old connection's host objects restored.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "guest/guest_options.h"
#include "guest/session/call_pipeline.h"
#include "guest/session/connector.h"
#include "guest/session/handshake.h"
#include "guest/session/restorable.h"

namespace ggml_remote::guest {

// Not locked: RemoteSession holds its lock around every use, restoring included,
// and objects restore through the pipeline itself (Restorable::restore).
class Reconnector {
  public:
    // `endpoint` names the server in messages; `ask` is asked again on every new connection.
    Reconnector(std::string endpoint, const GuestOptions &options, const HandshakeAsk &ask)
        : endpoint_(std::move(endpoint)), options_(options), ask_(ask) {}

    // How a lost connection is made again (GuestOptions::reconnect); none: it stays lost.
    void set_connector(Connector connector) { connector_ = std::move(connector); }
    bool reconnects() const { return connector_ && options_.reconnect; }
    // Objects made again, in the order added, on every new connection.
    void add(Restorable *object);
    void remove(Restorable *object);
    uint64_t reconnections() const { return reconnections_; }
    bool last_restore_intact() const { return last_restore_intact_; }

    // After a call: when the pipeline's connection is lost, makes it again and
    // restores the objects; `terms` are what the new handshake granted.
    void recover(CallPipeline &pipeline, SessionTerms *terms);
    // Before a call: when the connection is lost, tries to make it again, and
    // fails the call either way: its request may name the old connection's handles.
    Status refuse_if_lost(CallPipeline &pipeline, SessionTerms *terms);

  private:
    // Attempts, with back-off, until one connects or the deadline is near; the last one's status.
    Status attempt_series(CallPipeline &pipeline, SessionTerms *terms, std::chrono::steady_clock::time_point deadline,
                          int *attempts);
    Status reconnect_once(CallPipeline &pipeline, SessionTerms *terms, int timeout_ms);
    void restore_objects(CallPipeline &pipeline, RestoreReport *report);

    std::string endpoint_;
    GuestOptions options_;
    HandshakeAsk ask_;
    Connector connector_;
    std::vector<Restorable *> restorables_;
    uint64_t reconnections_ = 0;
    bool last_restore_intact_ = true;
    // After a failed series, none starts before this: calls fail at once meanwhile.
    std::chrono::steady_clock::time_point next_series_{};
};

}  // namespace ggml_remote::guest
