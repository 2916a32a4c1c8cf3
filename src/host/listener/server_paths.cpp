#include "host/listener/server_paths.h"

#include <unistd.h>

#include <climits>
#include <cstdlib>

#include "host/worker/jail/landlock.h"
#include "transport/endpoint.h"

namespace ggml_remote::host {

namespace {

std::string absolute(const std::string &path) {
    if (!path.empty() && path[0] == '/') return path;
    char cwd[PATH_MAX];
    if (::getcwd(cwd, sizeof(cwd)) == nullptr) return "/" + path;
    return std::string(cwd) + "/" + path;
}

// Appends the components of `rest` (which does not exist: no links in it) to the
// resolved `base`, folding "." and "..".
std::string append_components(std::string base, const std::vector<std::string> &rest) {
    for (const std::string &part : rest) {
        if (part.empty() || part == ".") continue;
        if (part == "..") {
            const size_t slash = base.find_last_of('/');
            base = slash == 0 || slash == std::string::npos ? "/" : base.substr(0, slash);
            continue;
        }
        base += (base == "/" ? "" : "/") + part;
    }
    return base;
}

// "SOURCE PATH", and "(RESOLVED)" after it where links or relative parts made them differ.
std::string shown(const NamedPath &named, const std::string &resolved) {
    const std::string text = named.source + " " + named.path;
    return resolved == named.path ? text : text + " (" + resolved + ")";
}

// How `inner` relates to `outer`, both resolved, or null when they are apart.
const char *relation(const std::string &inner, const std::string &outer) {
    if (inner == outer) return "is the same directory as";
    if (path_within(inner, outer)) return "lies inside";
    if (path_within(outer, inner)) return "contains";
    return nullptr;
}

struct Resolved {
    const NamedPath *named;
    std::string path;
};

std::vector<Resolved> resolve_all(const std::vector<NamedPath> &paths) {
    std::vector<Resolved> resolved;
    for (const NamedPath &named : paths) {
        if (!named.path.empty()) resolved.push_back({&named, resolved_path(named.path)});
    }
    return resolved;
}

Status refusal(const std::string &what, const std::string &why) {
    return error(Code::bad_request, "refusing to start: " + what + ": " + why);
}

Status check_writable_apart(const std::vector<Resolved> &writable) {
    for (size_t i = 0; i < writable.size(); ++i) {
        for (size_t j = i + 1; j < writable.size(); ++j) {
            const char *how = relation(writable[j].path, writable[i].path);
            if (how == nullptr) continue;
            return refusal(shown(*writable[j].named, writable[j].path) + " " + how + " " +
                               shown(*writable[i].named, writable[i].path),
                           "session workers would get the one's write access in the other, so a guest that took "
                           "over its worker could change what other tenants' sessions read or run; give each a "
                           "directory of its own, apart from the others");
        }
    }
    return Status::success();
}

}  // namespace

std::string resolved_path(const std::string &path) {
    std::string head = absolute(path);
    std::vector<std::string> missing;  // innermost last
    char resolved[PATH_MAX];
    while (::realpath(head.c_str(), resolved) == nullptr) {
        const size_t slash = head.find_last_of('/');
        if (head == "/" || slash == std::string::npos) return append_components("/", {head});
        missing.insert(missing.begin(), head.substr(slash + 1));
        head = slash == 0 ? "/" : head.substr(0, slash);
    }
    return append_components(resolved, missing);
}

bool path_within(const std::string &inner, const std::string &outer) {
    if (inner == outer || outer == "/") return true;
    return inner.size() > outer.size() && inner.compare(0, outer.size(), outer) == 0 && inner[outer.size()] == '/';
}

Status check_path_overlaps(const std::vector<NamedPath> &writable_paths, const std::vector<NamedPath> &trusted_paths,
                           const std::vector<NamedPath> &code_paths) {
    const std::vector<Resolved> writable = resolve_all(writable_paths);
    if (Status s = check_writable_apart(writable); !s) return s;
    if (writable.empty()) return Status::success();
    const std::vector<Resolved> code_trees = resolve_all(code_paths), trusted_files = resolve_all(trusted_paths);
    for (const Resolved &directory : writable) {
        for (const Resolved &code : code_trees) {
            const char *how = relation(directory.path, code.path);
            if (how == nullptr) continue;
            return refusal(shown(*directory.named, directory.path) + " " + how + " " + shown(*code.named, code.path),
                           "session workers may write the one and load code from the other, so a guest that took "
                           "over its worker could plant code for other sessions or the server; choose a directory "
                           "apart from them");
        }
        for (const Resolved &trusted : trusted_files) {
            if (!path_within(trusted.path, directory.path)) continue;
            return refusal(
                shown(*trusted.named, trusted.path) + " lies inside " + shown(*directory.named, directory.path),
                "every session worker may write there, so a guest that took over its worker could read, "
                "replace or remove it; move it out");
        }
    }
    return Status::success();
}

Status check_server_paths(const ListenerOptions &options) {
    std::vector<NamedPath> writable = {{"--weight-store", options.weight_store.directory},
                                       {"--shader-cache", options.shader_cache},
                                       {"GGML_REMOTE_RECORD_DIR", options.record_dir}};
    // --models too: a worker that could plant a file there would serve it to every tenant.
    std::vector<NamedPath> trusted = {{"--tls-psk", options.tls_psk_file}, {"--models", options.models}};
    std::vector<std::string> endpoints = options.listen;
    if (!options.metrics.empty()) endpoints.push_back(options.metrics);
    for (const std::string &text : endpoints) {
        Endpoint endpoint;
        if (!parse_endpoint(text, &endpoint).ok() || endpoint.path.empty()) continue;
        const bool metrics = &text == &endpoints.back() && !options.metrics.empty();
        trusted.push_back({std::string(endpoint.is_ivshmem() ? "the region file of " : "the socket of ") +
                               (metrics ? "--metrics" : "--listen"),
                           endpoint.path});
    }
    // What the workers' sandbox lets them read: libraries, backends, drivers, their
    // configuration. Without the record directory (its policy would make it now).
    const FilesystemPolicy policy = worker_filesystem_policy({options.backend_path, ""});
    std::vector<NamedPath> code;
    for (const std::vector<std::string> *paths : {&policy.read_only, &policy.devices}) {
        for (const std::string &path : *paths) code.push_back({"the path workers load from", path});
    }
    return check_path_overlaps(writable, trusted, code);
}

}  // namespace ggml_remote::host
