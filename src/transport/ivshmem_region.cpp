#include "transport/ivshmem_region.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <vector>

#include "transport/regular_file.h"
#include "transport/spin_policy.h"

namespace ggml_remote {

static_assert(sizeof(RegionControl) <= kRegionControlBytes, "the control block fits its page");
static_assert(std::atomic<uint64_t>::is_always_lock_free, "region counters must be lock-free across a VM");

namespace {

// QEMU's ivshmem PCI ids, and the BAR that holds the shared memory.
constexpr const char *kIvshmemVendor = "0x1af4";
constexpr const char *kIvshmemDevice = "0x1110";
constexpr const char *kPciDevices = "/sys/bus/pci/devices/";

uint64_t align_up(uint64_t value, uint64_t alignment) { return (value + alignment - 1) / alignment * alignment; }

bool is_power_of_two(uint64_t value) { return value != 0 && (value & (value - 1)) == 0; }

std::string first_line(const std::string &path) {
    std::ifstream file(path);
    std::string line;
    std::getline(file, line);
    return line;
}

// The first ivshmem device's sysfs name ("0000:00:04.0"), or empty.
std::string find_ivshmem_device() {
    DIR *dir = ::opendir(kPciDevices);
    if (dir == nullptr) return "";
    std::vector<std::string> found;
    while (const dirent *entry = ::readdir(dir)) {
        const std::string name = entry->d_name;
        if (name[0] == '.') continue;
        const std::string base = std::string(kPciDevices) + name;
        if (first_line(base + "/vendor") == kIvshmemVendor && first_line(base + "/device") == kIvshmemDevice) {
            found.push_back(name);
        }
    }
    ::closedir(dir);
    if (found.empty()) return "";
    std::sort(found.begin(), found.end());
    return found.front();
}

bool is_shut_down(int socket) {
    if (socket < 0) return false;
    pollfd watch{socket, POLLRDHUP, 0};
    return ::poll(&watch, 1, 0) > 0 && (watch.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

void pause_ms(int ms) {
    timespec pause{ms / 1000, (ms % 1000) * 1000000L};
    ::nanosleep(&pause, nullptr);
}

}  // namespace

Status layout_for(uint64_t size, RegionLayout *layout) {
    if (size < kRegionMinBytes || !is_power_of_two(size)) {
        return error(Code::bad_request, "an ivshmem region's size must be a power of two of at least " +
                                            std::to_string(kRegionMinBytes >> 20) + " MiB, not " +
                                            std::to_string(size) + " bytes");
    }
    RegionLayout result;
    result.region_size = size;
    result.ring_offset = kRegionControlBytes;
    result.ring_capacity = kRingCapacity;
    result.heap_offset = align_up(result.ring_offset + kRingHeaderBytes + 2 * kRingCapacity, kRegionHeapAlignment);
    result.heap_size = size - result.heap_offset;
    *layout = result;
    return Status::success();
}

Status check_layout(const RegionLayout &layout, uint64_t mapped) {
    RegionLayout expected;
    Status status = layout_for(layout.region_size, &expected);
    if (!status) return status;
    if (std::memcmp(&expected, &layout, sizeof(layout)) != 0) {
        return error(Code::error, "the region's layout is not one this release makes (a newer server?)");
    }
    if (layout.region_size > mapped) {
        return error(Code::error, "the region says it holds " + std::to_string(layout.region_size) +
                                      " bytes, but only " + std::to_string(mapped) + " are mapped");
    }
    return Status::success();
}

bool HeartbeatWatch::silent(uint64_t value, int silence_ms) {
    const uint64_t now = SpinPolicy::now_ns();
    if (!started_ || value != last_value_) {
        started_ = true;
        last_value_ = value;
        changed_ns_ = now;
        return false;
    }
    return now - changed_ns_ >= static_cast<uint64_t>(silence_ms) * 1000000ull;
}

Status serve_region_rings(int fd, int ended_socket, std::unique_ptr<RingChannel> *ring,
                          std::shared_ptr<const Mapping> *region, RegionLayout *layout) {
    struct stat info{};
    if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
        return error(Code::error, "the ivshmem region is not a regular file");
    }
    Status status = layout_for(static_cast<uint64_t>(info.st_size), layout);
    if (!status) return status;
    auto mapping = std::make_shared<Mapping>();
    status = Mapping::map(fd, 0, static_cast<size_t>(layout->region_size), true, mapping.get());
    if (!status) return status;
    auto *control = static_cast<RegionControl *>(mapping->data());
    // The guest's two signs of life, watched from this side only.
    auto watch = std::make_shared<HeartbeatWatch>();
    auto guest_gone = [control, watch, ended_socket] {
        return control->guest_closed.load(std::memory_order_acquire) != 0 ||
               watch->silent(control->guest_heartbeat.load(std::memory_order_relaxed), kRegionSilenceMs) ||
               is_shut_down(ended_socket);
    };
    *ring = RingChannel::in_region(RingChannel::Side::host, mapping, layout->ring_offset, layout->ring_capacity,
                                   guest_gone);
    *region = std::move(mapping);
    return Status::success();
}

namespace {

// The regions of this process still open. Applications rarely destroy their ggml
// backends, so sessions live until the process exits: this ends them then (or when
// the plugin is unloaded), saying so to the server at once instead of leaving it
// 3 s of silence, and stops their heartbeat threads before their code goes away.
class OpenRegions {
  public:
    ~OpenRegions() {
        std::lock_guard<std::mutex> lock(mutex_);
        for (GuestRegion *region : open_) region->close();
    }
    void add(GuestRegion *region) {
        std::lock_guard<std::mutex> lock(mutex_);
        open_.push_back(region);
    }
    void remove(GuestRegion *region) {
        std::lock_guard<std::mutex> lock(mutex_);
        open_.erase(std::remove(open_.begin(), open_.end(), region), open_.end());
    }

  private:
    std::mutex mutex_;
    std::vector<GuestRegion *> open_;
};

OpenRegions &open_regions() {
    static OpenRegions regions;
    return regions;
}

}  // namespace

GuestRegion::~GuestRegion() {
    open_regions().remove(this);
    close();
}

void GuestRegion::close() {
    std::lock_guard<std::mutex> lock(closing_);
    if (closed_) return;
    closed_ = true;
    stopping_ = true;
    if (heartbeat_.joinable()) heartbeat_.join();
    if (mapping_ != nullptr && generation_ != 0) control()->guest_closed.store(generation_, std::memory_order_release);
}

Status GuestRegion::map(const Endpoint &endpoint) {
    std::string path = endpoint.path;
    if (path.empty()) {
        const std::string device = endpoint.pci_address.empty() ? find_ivshmem_device() : endpoint.pci_address;
        if (device.empty()) {
            return error(Code::disconnected, "no ivshmem PCI device (1af4:1110) in " + std::string(kPciDevices) +
                                                 " (does the VM have -device ivshmem-plain?)");
        }
        path = std::string(kPciDevices) + device + "/resource2";
    }
    name_ = endpoint.to_string();
    // O_NONBLOCK: a FIFO in the region's place must not hang the guest's open.
    fd_.reset(::open(path.c_str(), O_RDWR | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
    if (!fd_.valid()) {
        return error(Code::disconnected, "open " + path + ": " + std::strerror(errno) +
                                             (errno == EACCES ? " (the guest needs read-write access to it)" : ""));
    }
    struct stat info{};
    if (::fstat(fd_.get(), &info) == 0 && !S_ISREG(info.st_mode)) {
        return error(Code::disconnected, path + ": not a regular file (" + file_kind(info.st_mode) + ")");
    }
    if (::fstat(fd_.get(), &info) != 0 || info.st_size < static_cast<off_t>(kRegionControlBytes)) {
        return error(Code::disconnected, path + " is too small to be an ivshmem region");
    }
    auto mapping = std::make_shared<Mapping>();
    Status status = Mapping::map(fd_.get(), 0, static_cast<size_t>(info.st_size), true, mapping.get());
    if (!status) return error(status.code(), "map " + path + ": " + status.message());
    mapping_ = std::move(mapping);
    const RegionControl *control = this->control();
    if (control->magic != kRegionMagic || control->version != kRegionVersion) {
        // All ones is what a PCI BAR reads while the device's memory decoding is off.
        const bool disabled = endpoint.path.empty() && control->magic == 0xffffffffu;
        return error(Code::disconnected, name_ +
                                             " holds no ggml-remote region (is the server started with --listen "
                                             "ivshmem:PATH,size=...?" +
                                             (disabled ? " The device reads all ones: enable it with echo 1 > " +
                                                             path.substr(0, path.rfind('/')) + "/enable)"
                                                       : ")"));
    }
    std::memcpy(&layout_, &control->layout, sizeof(layout_));
    status = check_layout(layout_, static_cast<uint64_t>(info.st_size));
    return status ? status : error(status.code(), name_ + ": " + status.message());
}

// Waits for the region to be idle, claims its generation, and waits for the
// server to serve it.
Status GuestRegion::claim(int timeout_ms) {
    RegionControl *control = this->control();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    auto late = [&] { return std::chrono::steady_clock::now() >= deadline; };
    while (control->state.load(std::memory_order_acquire) != kRegionIdle) {
        if (late()) {
            return error(Code::limit_exceeded, name_ +
                                                   ": the region is busy with another session, or no server "
                                                   "serves it (a vanished guest's session ends after " +
                                                   std::to_string(kRegionSilenceMs) + " ms)");
        }
        pause_ms(5);
    }
    const uint64_t generation = control->generation.load(std::memory_order_acquire);
    control->guest_heartbeat.fetch_add(1, std::memory_order_relaxed);
    uint64_t unclaimed = 0;
    if (!control->guest_claim.compare_exchange_strong(unclaimed, generation)) {
        return error(Code::limit_exceeded, name_ + ": another process of this machine claimed the region first");
    }
    while (control->state.load(std::memory_order_acquire) != kRegionServing ||
           control->generation.load(std::memory_order_acquire) != generation) {
        if (late()) return error(Code::disconnected, name_ + ": the server did not start the session in time");
        control->guest_heartbeat.fetch_add(1, std::memory_order_relaxed);
        pause_ms(1);
    }
    generation_ = generation;
    open_regions().add(this);
    heartbeat_ = std::thread([this] {
        while (!stopping_) {
            this->control()->guest_heartbeat.fetch_add(1, std::memory_order_relaxed);
            pause_ms(kRegionHeartbeatMs);
        }
    });
    return Status::success();
}

Status GuestRegion::open(const Endpoint &endpoint, int timeout_ms, std::shared_ptr<GuestRegion> *out) {
    std::shared_ptr<GuestRegion> region(new GuestRegion());
    Status status = region->map(endpoint);
    if (status) status = region->claim(timeout_ms);
    if (status) *out = std::move(region);
    return status;
}

bool GuestRegion::server_gone() {
    const RegionControl *control = this->control();
    return control->state.load(std::memory_order_acquire) != kRegionServing ||
           control->generation.load(std::memory_order_acquire) != generation_ ||
           server_watch_.silent(control->host_heartbeat.load(std::memory_order_relaxed), kRegionSilenceMs);
}

std::unique_ptr<RingChannel> GuestRegion::rings(const std::shared_ptr<GuestRegion> &region) {
    return RingChannel::in_region(RingChannel::Side::guest, region->mapping_, region->layout_.ring_offset,
                                  region->layout_.ring_capacity, [region] { return region->server_gone(); });
}

UniqueFd GuestRegion::duplicate_fd() const { return UniqueFd(::fcntl(fd_.get(), F_DUPFD_CLOEXEC, 0)); }

}  // namespace ggml_remote
