#include "host/common/services_channel.h"

#include <cstdlib>

#include "protocol/content_digest.h"

namespace ggml_remote::host {

namespace {

constexpr size_t kTenantDigestDigits = 24;

bool read_count(const std::string &text, uint64_t *value) {
    if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos || text.size() > 19) return false;
    *value = std::strtoull(text.c_str(), nullptr, 10);
    return true;
}

Status bad_argument(const std::string &flag, const std::string &value) {
    return error(Code::bad_request, "services: cannot read " + flag + " '" + value + "'");
}

Status read_value_flag(const std::string &flag, const std::string &value, ServicesOptions *options) {
    uint64_t count = 0;
    if (flag == "--weight-store") {
        options->weight_store.directory = value;
    } else if (flag == "--weight-store-size") {
        if (!read_count(value, &options->weight_store.max_bytes)) return bad_argument(flag, value);
    } else if (flag == "--lru-resolution-s") {
        if (!read_count(value, &count) || count > 86400) return bad_argument(flag, value);
        options->weight_store.lru_resolution_s = static_cast<int>(count);
    } else if (flag == "--models") {
        options->models = value;
    } else if (flag == "--tensor-peer") {
        Endpoint peer;
        if (!parse_endpoint(value, &peer)) return bad_argument(flag, value);
        options->tensor_peers.push_back(peer);
    } else if (flag == "--log-format") {
        if (value != "text" && value != "json") return bad_argument(flag, value);
        options->log_format = value == "json" ? LogFormat::json : LogFormat::text;
    } else {
        return error(Code::bad_request, "services: unknown argument " + flag);
    }
    return Status::success();
}

}  // namespace

std::string store_tenant_directory(const std::string &tenant) {
    if (tenant.empty()) return "shared";
    const protocol::ContentDigest digest = protocol::content_digest(tenant.data(), tenant.size());
    return "t-" + digest.hex().substr(0, kTenantDigestDigits);
}

bool is_store_tenant_directory(const std::string &name) {
    if (name == "shared") return true;
    return name.size() == 2 + kTenantDigestDigits && name.rfind("t-", 0) == 0 &&
           name.find_first_not_of("0123456789abcdef", 2) == std::string::npos;
}

std::vector<std::string> services_arguments(const ServicesOptions &options) {
    std::vector<std::string> args;
    const WeightStoreOptions &store = options.weight_store;
    if (!store.directory.empty()) {
        args.insert(args.end(),
                    {"--weight-store", store.directory, "--weight-store-size", std::to_string(store.max_bytes),
                     "--lru-resolution-s", std::to_string(store.lru_resolution_s)});
        if (store.shared_across_tenants) args.push_back("--weight-store-shared");
        if (store.verify_on_use) args.push_back("--weight-store-verify");
    }
    if (!options.models.empty()) args.insert(args.end(), {"--models", options.models});
    for (const Endpoint &peer : options.tensor_peers) args.insert(args.end(), {"--tensor-peer", peer.to_string()});
    args.insert(args.end(), {"--log-format", options.log_format == LogFormat::json ? "json" : "text"});
    if (options.verbose) args.push_back("--verbose");
    return args;
}

Status read_services_arguments(const std::vector<std::string> &arguments, ServicesOptions *options) {
    for (size_t i = 0; i < arguments.size(); ++i) {
        const std::string &flag = arguments[i];
        if (flag == "--weight-store-shared") {
            options->weight_store.shared_across_tenants = true;
        } else if (flag == "--weight-store-verify") {
            options->weight_store.verify_on_use = true;
        } else if (flag == "--verbose") {
            options->verbose = true;
        } else if (i + 1 < arguments.size()) {
            Status status = read_value_flag(flag, arguments[++i], options);
            if (!status) return status;
        } else {
            return error(Code::bad_request, "services: " + flag + " needs a value");
        }
    }
    return Status::success();
}

}  // namespace ggml_remote::host
