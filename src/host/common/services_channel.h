// The services channel: how the listener asks the services process
// (host/services/services.h) for a new worker's channels to the weight store's
// owner and to the peer broker. One SOCK_SEQPACKET socket pair, made when the
// listener starts the services process; one fixed-size message each way per
// request, the channel's worker end passed back with SCM_RIGHTS.
//
//   ready                         the services process opened what it serves (its
//                                 first message, unasked)
//   store  tenant directory   ->  a channel to the store's owner for that tenant
//   peer                      ->  a channel to the peer broker
//
// The listener names a tenant by its directory's name (a digest of the tenant: see
// store_tenant_directory), never by the text a guest chose: the services process
// holds no key and sees no guest's identity.
//
// Here too: the services process's command line, which the listener writes and the
// services program reads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "host/common/server_log.h"
#include "host/common/store_layout.h"
#include "protocol/status.h"
#include "transport/endpoint.h"

namespace ggml_remote::host::services_channel {

enum class Kind : uint32_t { ready = 1, store = 2, peer = 3 };

constexpr size_t kMaxTenantDirectory = 48;

struct Request {
    uint32_t kind = 0;
    uint32_t unused = 0;
    char tenant_directory[kMaxTenantDirectory] = {};  // store only, NUL-terminated
};

struct Reply {
    uint32_t kind = 0;  // the request's, or ready
    int32_t code = 0;   // protocol Code; success: a channel follows (not for ready)
    char message[200] = {};
};

// Code::not_found: that service does not run here (no store, no --tensor-peer);
// the worker gets no channel, and nobody needs telling.
constexpr Code kNotServed = Code::not_found;

}  // namespace ggml_remote::host::services_channel

namespace ggml_remote::host {

// The name of `tenant`'s directory in the store: "shared" for "", else "t-" and 24
// hex digits of the tenant's digest (a name that says nothing of the tenant).
std::string store_tenant_directory(const std::string &tenant);
// Whether `name` is one that store_tenant_directory makes.
bool is_store_tenant_directory(const std::string &name);

// What the services process serves, from the listener's options.
struct ServicesOptions {
    WeightStoreOptions weight_store;     // directory empty: no store
    std::string models;                  // --models, or empty
    std::vector<Endpoint> tensor_peers;  // --tensor-peer (the broker serves links that come in without)
    LogFormat log_format = LogFormat::text;
    bool verbose = false;
};

// The services program's arguments for `options` (after its path).
std::vector<std::string> services_arguments(const ServicesOptions &options);
// The reverse; an error names the argument it could not read.
Status read_services_arguments(const std::vector<std::string> &arguments, ServicesOptions *options);

// The descriptor the services process reads its channel from.
constexpr int kServicesChannelFd = 3;

}  // namespace ggml_remote::host
