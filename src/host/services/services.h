// Services: what session workers talk to besides their guest, in a process of its
// own (ggml-remote-services), started and supervised by the listener:
//   - the weight store's owner (store_owner.h), with the model library (model_library.h);
//   - the peer broker (peer_broker.h), which dials --tensor-peer servers for workers.
//
// A worker a guest took over turns on these first, so they run apart from the
// listener, the monitor that holds the keys and the listening sockets: a bug in
// their message handling reaches a sandboxed process with the store's directory,
// the models (read only) and TCP connects to the --tensor-peer ports, and nothing
// else. The listener asks for each new worker's channels on the services channel
// (host/common/services_channel.h); the services process never sees a key, a
// guest's connection or a guest's identity.
#pragma once

#include <memory>

#include "host/common/services_channel.h"
#include "host/services/peer_broker.h"
#include "host/services/store_owner.h"
#include "host/worker/jail/landlock.h"

namespace ggml_remote::host {

class Services {
  public:
    explicit Services(const ServicesOptions &options);

    // Opens the store and the library's directory; on this thread (before the sandbox).
    void open();
    // Starts what runs on threads of its own (the library's indexer): after the sandbox.
    void start();
    // The channel `request` asks for, in *channel, or why there is none.
    Status answer(const services_channel::Request &request, UniqueFd *channel);

  private:
    ServicesOptions options_;
    StoreOwner store_;
    ModelLibrary *library_ = nullptr;  // owned by store_
    PeerBroker broker_;
};

// What the services process may open: the store (read and write), the models
// (read only), the libraries a name lookup loads, and TCP connects to the ports of
// --tensor-peer; not the key file, not the guests' files.
FilesystemPolicy services_filesystem_policy(const ServicesOptions &options);

// The services process: opens, enters its sandbox, says it is ready on
// `channel_fd`, then answers the listener there until the listener closes it, and
// exits.
[[noreturn]] void run_services(int channel_fd, const ServicesOptions &options);

}  // namespace ggml_remote::host
