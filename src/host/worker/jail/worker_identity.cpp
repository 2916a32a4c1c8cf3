#include "host/worker/jail/worker_identity.h"

#include <grp.h>
#include <pwd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace ggml_remote::host {

namespace {

Status failure(const std::string &what) { return error(Code::error, what + ": " + std::strerror(errno)); }

}  // namespace

Status find_worker_identity(const std::string &user, WorkerIdentity *identity) {
    passwd entry{};
    passwd *found = nullptr;
    std::vector<char> buffer(16384);
    int rc = ::getpwnam_r(user.c_str(), &entry, buffer.data(), buffer.size(), &found);
    if (found == nullptr) {
        char *end = nullptr;
        const unsigned long number = std::strtoul(user.c_str(), &end, 10);
        if (!user.empty() && *end == '\0')
            rc = ::getpwuid_r(static_cast<uid_t>(number), &entry, buffer.data(), buffer.size(), &found);
    }
    if (found == nullptr) {
        return error(Code::not_found,
                     "--worker-user: no user '" + user + "'" + (rc != 0 ? std::string(": ") + std::strerror(rc) : ""));
    }
    if (entry.pw_uid == 0)
        return error(Code::bad_request, "--worker-user: '" + user + "' is root; name an unprivileged user");
    identity->user = entry.pw_name;
    identity->uid = entry.pw_uid;
    identity->gid = entry.pw_gid;
    int count = 64;
    identity->groups.assign(static_cast<size_t>(count), 0);
    if (::getgrouplist(entry.pw_name, entry.pw_gid, identity->groups.data(), &count) < 0) {
        identity->groups.assign(static_cast<size_t>(count), 0);
        if (::getgrouplist(entry.pw_name, entry.pw_gid, identity->groups.data(), &count) < 0) count = 0;
    }
    identity->groups.resize(static_cast<size_t>(count));
    return Status::success();
}

Status become(const WorkerIdentity &identity) {
    if (::setgroups(identity.groups.size(), identity.groups.data()) != 0) return failure("setgroups");
    if (::setresgid(identity.gid, identity.gid, identity.gid) != 0) return failure("setresgid");
    if (::setresuid(identity.uid, identity.uid, identity.uid) != 0) return failure("setresuid");
    // Every ID changed, or the switch is not worth its name.
    uid_t real, effective, saved;
    if (::getresuid(&real, &effective, &saved) != 0 || real != identity.uid || effective != identity.uid ||
        saved != identity.uid) {
        return error(Code::error, "setresuid: the worker did not become " + identity.user);
    }
    if (::setresuid(0, 0, 0) == 0) return error(Code::error, "the worker could become root again");
    return Status::success();
}

}  // namespace ggml_remote::host
