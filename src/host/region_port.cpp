#include "host/region_port.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>

namespace ggml_remote::host {

namespace {

// A generation that a restarted server does not repeat: a guest still holding the
// old one sees the region change under it.
uint64_t first_generation() {
    timespec now{};
    ::clock_gettime(CLOCK_REALTIME, &now);
    return ((static_cast<uint64_t>(now.tv_sec) << 20) ^ static_cast<uint64_t>(now.tv_nsec >> 10)) | 1;
}

// Gives the pages of [offset, end) back (they read as zeros); zeroes them where
// the file system cannot.
void wipe(int fd, uint8_t *base, uint64_t offset, uint64_t end) {
    if (end <= offset) return;
    if (::fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(offset),
                    static_cast<off_t>(end - offset)) == 0) {
        return;
    }
    std::memset(base + offset, 0, end - offset);
}

}  // namespace

RegionPort::~RegionPort() { close(); }

Status RegionPort::open(const Endpoint &endpoint, RegionPort *port) {
    const std::string name = endpoint.to_string();
    if (endpoint.path.empty() || endpoint.size == 0) {
        return error(Code::bad_request, "--listen " + name + ": a server's ivshmem region needs a file and a size, "
                                        "e.g. ivshmem:/dev/shm/vm1,size=64M");
    }
    RegionPort result;
    Status status = layout_for(endpoint.size, &result.layout_);
    if (!status) return error(status.code(), "--listen " + name + ": " + status.message());
    result.file_.reset(::open(endpoint.path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
    struct stat info {};
    if (!result.file_.valid() || ::fstat(result.file_.get(), &info) != 0) {
        return error(Code::error, "open " + endpoint.path + ": " + std::strerror(errno));
    }
    if (!S_ISREG(info.st_mode)) return error(Code::bad_request, endpoint.path + " is not a regular file");
    const auto size = static_cast<off_t>(endpoint.size);
    if (info.st_size != 0 && info.st_size != size) {
        return error(Code::bad_request, endpoint.path + " exists with " + std::to_string(info.st_size) +
                                            " bytes, not " + std::to_string(endpoint.size) +
                                            " (remove it, or give its size)");
    }
    if (info.st_size == 0 && ::ftruncate(result.file_.get(), size) != 0) {
        return error(Code::error, "ftruncate " + endpoint.path + ": " + std::strerror(errno));
    }
    status = Mapping::map(result.file_.get(), 0, static_cast<size_t>(endpoint.size), true, &result.mapping_);
    if (!status) return error(status.code(), "map " + endpoint.path + ": " + status.message());
    result.name_ = name;
    new (result.mapping_.data()) RegionControl{};
    result.generation_ = first_generation();
    result.make_idle();
    *port = std::move(result);
    return Status::success();
}

void RegionPort::publish() {
    RegionControl *control = this->control();
    control->magic = kRegionMagic;
    control->version = kRegionVersion;
    control->layout = layout_;
    control->generation.store(generation_, std::memory_order_relaxed);
    control->state.store(state_, std::memory_order_release);
}

void RegionPort::make_idle() {
    RegionControl *control = this->control();
    state_ = kRegionClosed;
    publish();
    wipe(file_.get(), static_cast<uint8_t *>(mapping_.data()), kRegionControlBytes, layout_.region_size);
    control->guest_closed.store(0, std::memory_order_relaxed);
    control->guest_claim.store(0, std::memory_order_relaxed);
    state_ = kRegionIdle;
    publish();
    claimed_ = false;
    worker_ = -1;
}

bool RegionPort::poll() {
    if (!mapping_.data()) return false;
    publish();  // whatever the guest wrote over it
    RegionControl *control = this->control();
    control->host_heartbeat.fetch_add(1, std::memory_order_relaxed);
    if (claimed_ || worker_ >= 0) return false;
    uint64_t claim = control->guest_claim.load(std::memory_order_acquire);
    if (claim != generation_) {
        // Not a claim of this generation (garbage, or one a guest made before a
        // restart): cleared, so that a later honest claim can be made.
        if (claim != 0) control->guest_claim.compare_exchange_strong(claim, 0);
        return false;
    }
    // Whatever the guest wrote into guest_closed before its claim is no end of
    // the session about to start.
    control->guest_closed.store(0, std::memory_order_release);
    claimed_ = true;
    return true;
}

void RegionPort::serving(pid_t pid) {
    worker_ = pid;
    // The rings were zeroed when the region went idle; the guest may write to them
    // from now on.
    state_ = kRegionServing;
    publish();
}

bool RegionPort::ended(pid_t pid) {
    if (!claimed_ || (pid != worker_ && pid >= 0)) return false;
    ++generation_;
    make_idle();
    return true;
}

void RegionPort::close() {
    if (mapping_.data() == nullptr) return;
    state_ = kRegionClosed;
    publish();
}

}  // namespace ggml_remote::host
