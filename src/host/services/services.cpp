#include "host/services/services.h"

#include <unistd.h>

#include <cstdio>
#include <utility>

#include "host/common/server_log.h"
#include "host/common/store_channel.h"
#include "host/worker/jail/sandbox.h"

namespace ggml_remote::host {

namespace {

using services_channel::Kind;
using services_channel::Reply;
using services_channel::Request;

// Files a name lookup (the broker's dials to --tensor-peer hosts) reads, and the
// libraries it loads; the time zone for the log's timestamps.
const char *const kLookupFiles[] = {"/etc/hosts",     "/etc/resolv.conf", "/etc/nsswitch.conf", "/etc/gai.conf",
                                    "/etc/host.conf", "/etc/localtime",   "/etc/ld.so.cache",   "/usr/share/zoneinfo"};
const char *const kLibraryDirectories[] = {"/usr/lib", "/usr/lib64", "/lib", "/lib64"};

Reply reply_for(Kind kind, const Status &status) {
    Reply reply;
    reply.kind = static_cast<uint32_t>(kind);
    reply.code = static_cast<int32_t>(status.code());
    std::snprintf(reply.message, sizeof(reply.message), "%s", status.message().c_str());
    return reply;
}

bool send_reply(int fd, const Reply &reply, const UniqueFd &channel) {
    const int passed = channel.get();
    return store_channel::send_message(fd, &reply, sizeof(reply), &passed, passed >= 0 ? 1 : 0);
}

}  // namespace

Services::Services(const ServicesOptions &options) : options_(options), broker_(options.tensor_peers) {}

void Services::open() {
    if (!options_.models.empty()) {
        auto library = std::make_unique<ModelLibrary>();
        if (Status status = library->open(options_.models); !status) {
            log_warning("no model library: " + status.message());
        } else {
            library_ = library.get();
            store_.use_library(std::move(library));
        }
    }
    if (options_.weight_store.directory.empty()) return;
    // The half-written entries of an earlier services process that is gone (one
    // still ending, after a hand-over, keeps its own).
    Status status = StoreOwner::prepare(options_.weight_store);
    if (status) status = store_.open(options_.weight_store);
    if (!status) log_warning("no weight store: " + status.message());
}

void Services::start() {
    if (library_ != nullptr) library_->start_indexing();
}

Status Services::answer(const Request &request, UniqueFd *channel) {
    switch (static_cast<Kind>(request.kind)) {
        case Kind::store: {
            if (!store_.serves_workers()) return error(services_channel::kNotServed, "no weight store");
            const size_t length = strnlen(request.tenant_directory, sizeof(request.tenant_directory));
            if (length == sizeof(request.tenant_directory)) return error(Code::bad_request, "tenant name too long");
            return store_.connect_tenant_directory(std::string(request.tenant_directory, length), channel);
        }
        case Kind::peer:
            return broker_.connect(channel);
        default:
            return error(Code::bad_request, "unknown services request " + std::to_string(request.kind));
    }
}

FilesystemPolicy services_filesystem_policy(const ServicesOptions &options) {
    FilesystemPolicy policy;
    policy.read_only.assign(std::begin(kLookupFiles), std::end(kLookupFiles));
    policy.read_only.insert(policy.read_only.end(), std::begin(kLibraryDirectories), std::end(kLibraryDirectories));
    if (!options.models.empty()) policy.read_only.push_back(options.models);
    if (!options.weight_store.directory.empty()) policy.read_write.push_back(options.weight_store.directory);
    for (const Endpoint &peer : options.tensor_peers) policy.connect_ports.push_back(static_cast<uint16_t>(peer.port));
    return policy;
}

[[noreturn]] void run_services(int channel_fd, const ServicesOptions &options) {
    Services services(options);
    services.open();
    // Before any thread starts: Landlock confines one thread at a time.
    SandboxReport report;
    const Status sandboxed = enter_sandbox(services_filesystem_policy(options), &report, services_policy());
    if (!sandboxed) {
        log_error("services: cannot enter the sandbox: " + sandboxed.message());
        ::_exit(1);
    }
    if (options.verbose) log_line("services process: " + describe_sandbox(report));
    services.start();
    if (!send_reply(channel_fd, reply_for(Kind::ready, Status::success()), UniqueFd())) ::_exit(1);
    for (;;) {
        Request request;
        if (!store_channel::receive_message(channel_fd, &request, sizeof(request), nullptr, 0, -1)) break;
        UniqueFd channel;
        const Status status = services.answer(request, &channel);
        if (!send_reply(channel_fd, reply_for(static_cast<Kind>(request.kind), status), channel)) break;
    }
    // The listener closed its end (it stopped, or handed over): so do we, at once.
    // No thread is waited for (a commit, the indexer): the workers' channels close
    // with the process, and the next services process removes what a commit left.
    ::_exit(0);
}

}  // namespace ggml_remote::host
