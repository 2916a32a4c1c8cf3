// ivshmem regions without a VM: the layout, a guest's session through a region
// file (claim, frames both ways, its end noticed, the next session), and a
// hostile guest's writes to the region refused or confined to its own session.
#include "transport/ivshmem_region.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <future>
#include <string>

#include "host/listener/region_port.h"
#include "transport/connection.h"

namespace ggml_remote {
namespace {

using host::RegionPort;
using protocol::ByteView;
using protocol::FrameHeader;
using ::testing::HasSubstr;

constexpr uint64_t kSize = 8u << 20;

TEST(RegionLayout, PutsControlRingsAndAnAlignedHeapInOrder) {
    RegionLayout layout;
    ASSERT_TRUE(layout_for(64u << 20, &layout).ok());
    EXPECT_EQ(layout.ring_offset, kRegionControlBytes);
    EXPECT_GE(layout.heap_offset, layout.ring_offset + kRingHeaderBytes + 2 * layout.ring_capacity);
    EXPECT_EQ(layout.heap_offset % kRegionHeapAlignment, 0u);
    EXPECT_EQ(layout.heap_offset + layout.heap_size, 64u << 20);
    EXPECT_TRUE(check_layout(layout, 64u << 20).ok());
}

TEST(RegionLayout, RefusesSizesQemuCannotMapOrTooSmall) {
    RegionLayout layout;
    EXPECT_FALSE(layout_for(48u << 20, &layout).ok());
    EXPECT_FALSE(layout_for(4u << 20, &layout).ok());
    EXPECT_FALSE(layout_for(0, &layout).ok());
}

TEST(RegionLayout, GuestRefusesALayoutThisReleaseDoesNotMake) {
    RegionLayout layout;
    ASSERT_TRUE(layout_for(kSize, &layout).ok());
    RegionLayout moved = layout;
    moved.heap_offset -= 4096;
    EXPECT_FALSE(check_layout(moved, kSize).ok());
    EXPECT_THAT(check_layout(layout, kSize / 2).message(), HasSubstr("mapped"));
}

// A server's port on a fresh region file, and the guest endpoint that names it.
struct RegionFixture : ::testing::Test {
    void SetUp() override {
        char pattern[] = "/tmp/ggml-remote-region.XXXXXX";
        const int fd = ::mkstemp(pattern);
        ASSERT_GE(fd, 0);
        ::close(fd);
        path = pattern;
        ::unlink(path.c_str());  // the port creates it
        ASSERT_TRUE(parse_endpoint("ivshmem:" + path + ",size=8M", &server).ok());
        ASSERT_TRUE(parse_endpoint("ivshmem:file:" + path, &guest).ok());
        ASSERT_TRUE(RegionPort::open(server, &port).ok());
    }
    void TearDown() override { ::unlink(path.c_str()); }

    // Opens a guest's session while this thread plays the listener.
    Status open_guest(std::shared_ptr<GuestRegion> *region, pid_t worker = 4242) {
        auto opened = std::async(std::launch::async, [&] { return GuestRegion::open(guest, 2000, region); });
        for (int i = 0; i < 400 && opened.wait_for(std::chrono::milliseconds(5)) != std::future_status::ready; ++i) {
            if (port.poll() == RegionPort::Event::claimed) port.serving(worker);
        }
        return opened.get();
    }
    // The worker's stream and the guest's, over the region's rings.
    void connect(const std::shared_ptr<GuestRegion> &region, FramedStream *host, FramedStream *guest_stream) {
        std::unique_ptr<RingChannel> rings;
        std::shared_ptr<const Mapping> mapping;
        RegionLayout layout;
        ASSERT_TRUE(serve_region_rings(port.fd(), -1, &rings, &mapping, &layout).ok());
        *host = FramedStream(UniqueFd(::dup(port.fd())), "guest");
        host->attach_ring(std::move(rings));
        *guest_stream = FramedStream(region->duplicate_fd(), "host");
        guest_stream->attach_ring(GuestRegion::rings(region));
    }
    RegionControl *forge_control() {
        void *at = ::mmap(nullptr, kSize, PROT_READ | PROT_WRITE, MAP_SHARED, port.fd(), 0);
        EXPECT_NE(at, MAP_FAILED);
        forged = at;
        return static_cast<RegionControl *>(at);
    }
    ~RegionFixture() override {
        if (forged != nullptr) ::munmap(forged, kSize);
    }

    std::string path;
    Endpoint server, guest;
    RegionPort port;
    void *forged = nullptr;
};

Status send_text(FramedStream &stream, const std::string &text) {
    FrameHeader header;
    header.command = 3;
    return stream.send(header, {ByteView(text.data(), text.size())});
}

std::string receive_text(FramedStream &stream, Status *status) {
    FrameHeader header;
    *status = stream.receive_header(&header, 16u << 20);
    if (!*status) return "";
    std::string text(header.payload_size, '\0');
    *status = stream.receive(text.data(), text.size());
    return text;
}

TEST_F(RegionFixture, AGuestSessionCarriesFramesBothWaysAndItsEndIsNoticed) {
    std::shared_ptr<GuestRegion> region;
    ASSERT_TRUE(open_guest(&region).ok());
    FramedStream host, guest_stream;
    connect(region, &host, &guest_stream);
    region.reset();  // the stream's rings keep it
    ASSERT_TRUE(send_text(guest_stream, "hello from the VM").ok());
    Status status;
    EXPECT_EQ(receive_text(host, &status), "hello from the VM");
    ASSERT_TRUE(status.ok()) << status.message();
    const std::string big(3u << 20, 'x');  // three times the ring
    auto sent = std::async(std::launch::async, [&] { return send_text(host, big); });
    EXPECT_TRUE(receive_text(guest_stream, &status) == big) << status.message();
    EXPECT_TRUE(sent.get().ok());
    guest_stream = FramedStream();  // the guest's session ends
    receive_text(host, &status);
    EXPECT_EQ(status.code(), Code::disconnected) << status.message();
}

TEST_F(RegionFixture, OneSessionAtATimeThenTheNextAfterTheWorkerEnds) {
    std::shared_ptr<GuestRegion> first, second;
    ASSERT_TRUE(open_guest(&first).ok());
    Status busy = GuestRegion::open(guest, 100, &second);
    EXPECT_EQ(busy.code(), Code::limit_exceeded);
    EXPECT_THAT(busy.message(), HasSubstr("busy"));
    EXPECT_FALSE(port.ended(999));  // not its worker
    EXPECT_TRUE(port.ended(4242));
    EXPECT_TRUE(first->server_gone());  // the region moved on to a new generation
    ASSERT_TRUE(open_guest(&second, 4343).ok());
}

TEST_F(RegionFixture, AGuestThatStopsBeatingIsGone) {
    std::shared_ptr<GuestRegion> region;
    ASSERT_TRUE(open_guest(&region).ok());
    FramedStream host, guest_stream;
    connect(region, &host, &guest_stream);
    RegionControl *control = forge_control();
    // A VM that froze or vanished without a word: its heartbeat stops, its claim stays.
    region.reset();
    guest_stream = FramedStream();  // beats no more, but says it closed: undo that
    control->guest_closed.store(0);
    const auto start = std::chrono::steady_clock::now();
    Status status;
    receive_text(host, &status);
    const auto waited = std::chrono::steady_clock::now() - start;
    EXPECT_EQ(status.code(), Code::disconnected);
    EXPECT_GE(waited, std::chrono::milliseconds(kRegionSilenceMs - 200));
    EXPECT_LT(waited, std::chrono::milliseconds(kRegionSilenceMs + 1000));
}

TEST_F(RegionFixture, ImpossibleCountsFromTheGuestAreRefused) {
    std::shared_ptr<GuestRegion> region;
    ASSERT_TRUE(open_guest(&region).ok());
    FramedStream host, guest_stream;
    connect(region, &host, &guest_stream);
    auto *rings = reinterpret_cast<RingChannel::RegionHeader *>(
        static_cast<uint8_t *>(static_cast<void *>(forge_control())) + kRegionControlBytes);
    rings->rings[0].written.store(kRingCapacity + 1);  // more than the ring holds
    Status status;
    receive_text(host, &status);
    EXPECT_EQ(status.code(), Code::bad_request);
    EXPECT_THAT(status.message(), HasSubstr("impossible"));
    rings->rings[1].read.store(~0ull);  // read what was never written
    EXPECT_EQ(send_text(host, "reply").code(), Code::bad_request);
}

TEST_F(RegionFixture, GarbageInTheControlPageIsNoClaimAndIsRepaired) {
    RegionControl *control = forge_control();
    std::memset(static_cast<void *>(control), 0xff, kRegionControlBytes);
    std::shared_ptr<GuestRegion> region;
    EXPECT_THAT(GuestRegion::open(guest, 100, &region).message(), HasSubstr("no ggml-remote region"));
    for (int i = 0; i < 3; ++i) EXPECT_EQ(port.poll(), RegionPort::Event::none);
    EXPECT_EQ(control->magic, kRegionMagic);  // the host's fields are published again
    ASSERT_TRUE(open_guest(&region).ok());
}

TEST_F(RegionFixture, AGuestRefusesAFileThatIsNoRegion) {
    const std::string other = path + ".plain";
    const int fd = ::open(other.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::ftruncate(fd, kSize), 0);
    ::close(fd);
    Endpoint endpoint;
    ASSERT_TRUE(parse_endpoint("ivshmem:file:" + other, &endpoint).ok());
    std::shared_ptr<GuestRegion> region;
    Status status = GuestRegion::open(endpoint, 100, &region);
    ::unlink(other.c_str());
    EXPECT_THAT(status.message(), HasSubstr("no ggml-remote region"));
    ASSERT_TRUE(parse_endpoint("ivshmem:file:" + path + ".missing", &endpoint).ok());
    EXPECT_EQ(GuestRegion::open(endpoint, 100, &region).code(), Code::disconnected);
}

TEST_F(RegionFixture, AServerRefusesARegionFileOfAnotherSize) {
    Endpoint other;
    ASSERT_TRUE(parse_endpoint("ivshmem:" + path + ",size=16M,reuse", &other).ok());
    RegionPort second;
    Status status = RegionPort::open(other, &second);
    EXPECT_THAT(status.message(), HasSubstr("exists with"));
}

// The file the listener creates is its own: mode 0600, and no existing file is
// taken over unless the endpoint says reuse, and then only one of this user's.
TEST_F(RegionFixture, TheServerCreatesItsFileAloneAndTakesOverOnlyItsOwn) {
    struct stat info{};
    ASSERT_EQ(::stat(path.c_str(), &info), 0);
    EXPECT_EQ(info.st_mode & 07777, 0600u);
    EXPECT_EQ(info.st_uid, ::geteuid());
    RegionPort second;
    EXPECT_THAT(RegionPort::open(server, &second).message(), HasSubstr("exists"));
    port = RegionPort();  // the listener stopped; its file stays
    Endpoint reuse;
    ASSERT_TRUE(parse_endpoint("ivshmem:" + path + ",size=8M,reuse", &reuse).ok());
    ASSERT_TRUE(RegionPort::open(reuse, &second).ok());
    second = RegionPort();
    ASSERT_EQ(::chmod(path.c_str(), 0644), 0);
    EXPECT_THAT(RegionPort::open(reuse, &second).message(), HasSubstr("mode 0644"));
    ASSERT_EQ(::chmod(path.c_str(), 0600), 0);
    const std::string link = path + ".link";
    ASSERT_EQ(::link(path.c_str(), link.c_str()), 0);
    EXPECT_THAT(RegionPort::open(reuse, &second).message(), HasSubstr("2 links"));
    ::unlink(link.c_str());
    ASSERT_EQ(::symlink(path.c_str(), link.c_str()), 0);
    Endpoint through_link;
    ASSERT_TRUE(parse_endpoint("ivshmem:" + link + ",size=8M,reuse", &through_link).ok());
    EXPECT_FALSE(RegionPort::open(through_link, &second).ok());
    ::unlink(link.c_str());
    if (::geteuid() == 0) {  // a file of another user's is refused, reuse or not
        ASSERT_EQ(::chown(path.c_str(), 65534, 65534), 0);
        EXPECT_THAT(RegionPort::open(reuse, &second).message(), HasSubstr("belongs to uid 65534"));
    }
}

TEST(RegionOptions, ReuseAndGroupGoWithAServersRegion) {
    Endpoint endpoint;
    ASSERT_TRUE(parse_endpoint("ivshmem:/dev/shm/vm1,size=8M,reuse,group=kvm", &endpoint).ok());
    EXPECT_TRUE(endpoint.reuse);
    EXPECT_EQ(endpoint.group, "kvm");
    EXPECT_EQ(endpoint.size, 8u << 20);
    EXPECT_FALSE(parse_endpoint("ivshmem:file:/dev/shm/vm1,reuse", &endpoint).ok());
    EXPECT_FALSE(parse_endpoint("ivshmem:/dev/shm/vm1,size=8M,sharing", &endpoint).ok());
}

// A file truncated under the listener: no fault (it maps nothing); an idle region
// is sized again and serves; a region in use reports it once, for its worker's end.
TEST_F(RegionFixture, AShrunkFileEndsOnlyItsSessionAndTheRegionServesAgain) {
    ASSERT_EQ(::truncate(path.c_str(), 0), 0);
    EXPECT_EQ(port.poll(), RegionPort::Event::repaired);
    EXPECT_EQ(port.file_size(), static_cast<long long>(kSize));
    std::shared_ptr<GuestRegion> region;
    ASSERT_TRUE(open_guest(&region).ok());
    ASSERT_EQ(::truncate(path.c_str(), 4096), 0);
    EXPECT_EQ(port.poll(), RegionPort::Event::resized);
    EXPECT_EQ(port.poll(), RegionPort::Event::none);  // once
    EXPECT_EQ(port.worker(), 4242);
    EXPECT_TRUE(port.ended(4242));
    EXPECT_EQ(port.file_size(), static_cast<long long>(kSize));
    region.reset();
    std::shared_ptr<GuestRegion> next;
    ASSERT_TRUE(open_guest(&next, 4343).ok());
}

}  // namespace
}  // namespace ggml_remote
