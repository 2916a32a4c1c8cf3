#include "host/listener/region_port.h"

#include <fcntl.h>
#include <grp.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <vector>

namespace ggml_remote::host {

static_assert(std::is_standard_layout<RegionControl>::value, "the control page is written field by field");

namespace {

// A generation that a restarted server does not repeat: a guest still holding the
// old one sees the region change under it.
uint64_t first_generation() {
    timespec now{};
    ::clock_gettime(CLOCK_REALTIME, &now);
    return ((static_cast<uint64_t>(now.tv_sec) << 20) ^ static_cast<uint64_t>(now.tv_nsec >> 10)) | 1;
}

// Gives the bytes of [offset, end) back (they read as zeros); writes zeros where
// the file system cannot. Through the descriptor: the listener maps nothing.
void wipe(int fd, uint64_t offset, uint64_t end) {
    if (end <= offset) return;
    if (::fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(offset),
                    static_cast<off_t>(end - offset)) == 0) {
        return;
    }
    const std::vector<char> zeros(1u << 20, 0);
    for (uint64_t at = offset; at < end;) {
        const size_t chunk = static_cast<size_t>(std::min<uint64_t>(zeros.size(), end - at));
        const ssize_t written = ::pwrite(fd, zeros.data(), chunk, static_cast<off_t>(at));
        if (written <= 0) return;
        at += static_cast<uint64_t>(written);
    }
}

// The group named `name` (or its number), or an error.
Status group_id(const std::string &name, gid_t *gid) {
    char *end = nullptr;
    const unsigned long number = std::strtoul(name.c_str(), &end, 10);
    if (end != name.c_str() && *end == '\0') {
        *gid = static_cast<gid_t>(number);
        return Status::success();
    }
    group entry{}, *found = nullptr;
    std::vector<char> buffer(16384);
    if (::getgrnam_r(name.c_str(), &entry, buffer.data(), buffer.size(), &found) != 0 || found == nullptr) {
        return error(Code::bad_request, "group=" + name + ": no such group");
    }
    *gid = found->gr_gid;
    return Status::success();
}

// The mode a region file has: 0600, or 0660 for the endpoint's group.
mode_t region_mode(const Endpoint &endpoint) { return endpoint.group.empty() ? 0600 : 0660; }

// A file this server just created: its mode (whatever the umask), and its group.
Status give_file(const Endpoint &endpoint, int fd) {
    if (!endpoint.group.empty()) {
        gid_t gid = 0;
        Status status = group_id(endpoint.group, &gid);
        if (!status) return status;
        if (::fchown(fd, static_cast<uid_t>(-1), gid) != 0) {
            return error(Code::error, "group=" + endpoint.group + ": cannot give " + endpoint.path +
                                          " to that group: " + std::strerror(errno) +
                                          " (the server's user must be a member)");
        }
    }
    if (::fchmod(fd, region_mode(endpoint)) != 0) {
        return error(Code::error, "chmod " + endpoint.path + ": " + std::strerror(errno));
    }
    return Status::success();
}

// An existing file that `reuse` may take over: a regular file of this user's, one
// link, no access for other users (nor for the group but the endpoint's group=).
Status check_own_file(const Endpoint &endpoint, int fd) {
    struct stat info{};
    if (::fstat(fd, &info) != 0) return error(Code::error, "fstat " + endpoint.path + ": " + std::strerror(errno));
    const std::string path = endpoint.path;
    if (!S_ISREG(info.st_mode)) return error(Code::bad_request, path + " is not a regular file");
    if (info.st_uid != ::geteuid()) {
        return error(Code::bad_request, path + " belongs to uid " + std::to_string(info.st_uid) +
                                            ", not to the "
                                            "server's user: it is never served (that user would read every "
                                            "session); remove it");
    }
    if (info.st_nlink != 1) {
        return error(Code::bad_request, path + " has " + std::to_string(info.st_nlink) +
                                            " links: another name for it may be another user's way in; remove it");
    }
    gid_t gid = 0;
    const bool grouped = !endpoint.group.empty() && group_id(endpoint.group, &gid) && info.st_gid == gid;
    const mode_t allowed = grouped ? 0660 : 0600;
    if ((info.st_mode & 07777 & ~allowed) != 0) {
        char mode[8];
        std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(info.st_mode & 07777));
        return error(Code::bad_request, path + " has mode " + mode +
                                            ": others (or another group) may open it; "
                                            "the server takes over only mode 0600, or 0660 for its group=");
    }
    return Status::success();
}

// The region's file: created exclusively, or, with `reuse`, an existing one of ours.
Status open_region_file(const Endpoint &endpoint, UniqueFd *file) {
    const std::string &path = endpoint.path;
    file->reset(::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (file->valid()) {
        Status status = give_file(endpoint, file->get());
        if (!status) {
            ::unlink(path.c_str());
            file->reset();
        }
        return status;
    }
    if (errno != EEXIST) return error(Code::error, "create " + path + ": " + std::strerror(errno));
    if (!endpoint.reuse) {
        return error(Code::bad_request, path +
                                            " exists: the server serves only a region file it creates itself "
                                            "(another user may have made it first, to read every session). "
                                            "Remove it, or add ,reuse to take over a file of the server's user");
    }
    file->reset(::open(path.c_str(), O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
    if (!file->valid()) return error(Code::error, "open " + path + ": " + std::strerror(errno));
    return check_own_file(endpoint, file->get());
}

}  // namespace

RegionPort::~RegionPort() { close(); }

Status RegionPort::open(const Endpoint &endpoint, RegionPort *port) {
    const std::string name = endpoint.to_string();
    if (endpoint.path.empty() || endpoint.size == 0) {
        return error(Code::bad_request, "--listen " + name +
                                            ": a server's ivshmem region needs a file and a size, "
                                            "e.g. ivshmem:/dev/shm/vm1,size=64M");
    }
    RegionPort result;
    Status status = layout_for(endpoint.size, &result.layout_);
    if (!status) return error(status.code(), "--listen " + name + ": " + status.message());
    status = open_region_file(endpoint, &result.file_);
    if (!status) return error(status.code(), "--listen " + name + ": " + status.message());
    const long long size = result.file_size();
    if (size != 0 && size != static_cast<long long>(endpoint.size)) {
        return error(Code::bad_request, endpoint.path + " exists with " + std::to_string(size) + " bytes, not " +
                                            std::to_string(endpoint.size) + " (remove it, or give its size)");
    }
    if (size == 0 && ::ftruncate(result.file_.get(), static_cast<off_t>(endpoint.size)) != 0) {
        return error(Code::error, "ftruncate " + endpoint.path + ": " + std::strerror(errno));
    }
    result.name_ = name;
    result.generation_ = first_generation();
    result.make_idle();
    *port = std::move(result);
    return Status::success();
}

long long RegionPort::file_size() const {
    struct stat info{};
    return ::fstat(file_.get(), &info) == 0 ? static_cast<long long>(info.st_size) : -1;
}

// A write that the file's size has no say in: past its end it extends the file
// (the next poll sees a wrong size), it never faults.
void RegionPort::write_at(size_t offset, const void *data, size_t size) const {
    (void)!::pwrite(file_.get(), data, size, static_cast<off_t>(offset));
}

void RegionPort::publish() const {
    write_at(offsetof(RegionControl, magic), &kRegionMagic, sizeof(kRegionMagic));
    write_at(offsetof(RegionControl, version), &kRegionVersion, sizeof(kRegionVersion));
    write_at(offsetof(RegionControl, layout), &layout_, sizeof(layout_));
    // A guest reads the state, then the generation: each write is seen after the one before.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    write_at(offsetof(RegionControl, generation), &generation_, sizeof(generation_));
    std::atomic_thread_fence(std::memory_order_seq_cst);
    const uint32_t state = state_;
    write_at(offsetof(RegionControl, state), &state, sizeof(state));
}

void RegionPort::make_idle() {
    state_ = kRegionClosed;
    claimed_ = false;
    resized_ = false;
    worker_ = -1;
    odd_claim_ = 0;
    // A file that shrank (or grew) is given its size again: it is ours (open).
    if (!intact() && ::ftruncate(file_.get(), static_cast<off_t>(layout_.region_size)) != 0) return;
    publish();
    wipe(file_.get(), kRegionControlBytes, layout_.region_size);
    const uint64_t zero = 0;
    write_at(offsetof(RegionControl, guest_closed), &zero, sizeof(zero));
    write_at(offsetof(RegionControl, guest_claim), &zero, sizeof(zero));
    state_ = kRegionIdle;
    publish();
}

bool RegionPort::claim_made() {
    uint64_t claim = 0;
    if (::pread(file_.get(), &claim, sizeof(claim), offsetof(RegionControl, guest_claim)) != sizeof(claim)) {
        return false;
    }
    if (claim == generation_) {
        // Whatever the guest wrote into guest_closed before its claim is no end of
        // the session about to start.
        const uint64_t zero = 0;
        write_at(offsetof(RegionControl, guest_closed), &zero, sizeof(zero));
        claimed_ = true;
        odd_claim_ = 0;
        return true;
    }
    // Not a claim of this generation (garbage, or one a guest made before a
    // restart): cleared, so that a later honest claim can be made, once two polls
    // read the same value (a read that tore a guest's write in two does not repeat).
    if (claim != 0 && claim == odd_claim_) {
        const uint64_t zero = 0;
        write_at(offsetof(RegionControl, guest_claim), &zero, sizeof(zero));
        claim = 0;
    }
    odd_claim_ = claim;
    return false;
}

RegionPort::Event RegionPort::poll() {
    if (!file_.valid()) return Event::none;
    if (!intact()) {
        if (worker_ >= 0 || claimed_) {
            if (resized_) return Event::none;
            resized_ = true;
            return Event::resized;
        }
        ++generation_;
        make_idle();
        return intact() ? Event::repaired : Event::none;
    }
    publish();  // whatever the guest wrote over it
    ++heartbeat_;
    write_at(offsetof(RegionControl, host_heartbeat), &heartbeat_, sizeof(heartbeat_));
    if (claimed_ || worker_ >= 0) return Event::none;
    return claim_made() ? Event::claimed : Event::none;
}

void RegionPort::serving(pid_t pid) {
    worker_ = pid;
    // The rings were zeroed when the region went idle; the guest may write to them
    // from now on.
    state_ = kRegionServing;
    if (intact()) publish();
}

bool RegionPort::ended(pid_t pid) {
    if (!claimed_ || (pid != worker_ && pid >= 0)) return false;
    ++generation_;
    make_idle();
    return true;
}

void RegionPort::close() {
    if (!file_.valid()) return;
    state_ = kRegionClosed;
    if (intact()) publish();
}

}  // namespace ggml_remote::host
