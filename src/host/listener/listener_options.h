// ListenerOptions: the listener's own settings, beside the serving options it
// hands on to every worker (serving_options.h). No worker reads these.
#pragma once

#include <string>
#include <vector>

#include "host/common/serving_options.h"
#include "host/common/store_layout.h"
#include "host/common/worker_contract.h"
#include "host/listener/start_budget.h"
#include "transport/endpoint.h"

namespace ggml_remote::host {

struct ListenerOptions : ServingOptions {
    std::vector<std::string> listen;  // endpoints
    // --tensor-peer: the servers this one may dial for its guests' tensor-parallel
    // groups across machines (peer_broker.h), tcp:// or tls://, checked when read.
    std::vector<Endpoint> tensor_peers;
    // --max-sessions-per-peer; 0: the default, a quarter of max_sessions (peer_limits.h).
    int max_sessions_per_peer = 0;
    // Connections that have not authenticated yet (TLS guests in their handshake);
    // they never hold one of max_sessions (see admission.h).
    int max_unauthenticated = 16;
    // --max-starts-per-peer, --max-starts: worker programs started a second (start_budget.h).
    StartLimits starts;
    // --metrics: where the listener answers Prometheus scrapes (metrics_endpoint.h); empty: nowhere.
    std::string metrics;
    // --metrics-per-session: /metrics also lists each live session's own series.
    bool metrics_per_session = false;
    // The devices served, as the device probe found them at start (their memory
    // figures for /metrics).
    std::vector<ProbedDevice> devices;
    // --keep-sessions: SIGTERM and SIGINT stop only the listener; live sessions go on
    // in their workers until their guests leave (a service manager's restart).
    bool keep_sessions = false;
    // --weight-store DIR and its limits: the store's owner runs in the services
    // process (host/services/services.h); workers reach entries only through it.
    WeightStoreOptions weight_store;
    // ggml-remote-services (find_helper_program); empty: none is started, and
    // workers get no store, library or broker.
    std::string services_program;
};

}  // namespace ggml_remote::host
