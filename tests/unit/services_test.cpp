// The services process (src/host/services/services.h) and the listener's side of it
// (src/host/listener/services_process.h): what the listener asks is answered with a
// channel of the kind asked for; tenants are named by their directory only; and a
// services process that lies, stalls or dies never holds up the listener.
#include "host/services/services.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "host/common/services_channel.h"
#include "host/listener/services_process.h"

namespace ggml_remote::host {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

struct TemporaryDirectory {
    std::string path;
    TemporaryDirectory() {
        char name[] = "/tmp/ggml-remote-services-test.XXXXXX";
        if (::mkdtemp(name) != nullptr) path = name;
    }
    ~TemporaryDirectory() {
        if (!path.empty()) (void)!std::system(("rm -rf '" + path + "'").c_str());
    }
};

services_channel::Request store_request(const std::string &directory) {
    services_channel::Request request;
    request.kind = static_cast<uint32_t>(services_channel::Kind::store);
    std::snprintf(request.tenant_directory, sizeof(request.tenant_directory), "%s", directory.c_str());
    return request;
}

TEST(ServicesChannel, ArgumentsReadBackAsTheyWereWritten) {
    ServicesOptions options;
    options.weight_store.directory = "/var/cache/store";
    options.weight_store.max_bytes = 12345;
    options.weight_store.shared_across_tenants = true;
    options.weight_store.lru_resolution_s = 7;
    options.models = "/srv/models";
    Endpoint peer;
    ASSERT_TRUE(parse_endpoint("tcp://10.0.0.2:5000", &peer).ok());
    options.tensor_peers = {peer};
    options.log_format = LogFormat::json;
    ServicesOptions read;
    ASSERT_TRUE(read_services_arguments(services_arguments(options), &read).ok());
    EXPECT_EQ(read.weight_store.directory, "/var/cache/store");
    EXPECT_EQ(read.weight_store.max_bytes, 12345u);
    EXPECT_TRUE(read.weight_store.shared_across_tenants);
    EXPECT_FALSE(read.weight_store.verify_on_use);
    EXPECT_EQ(read.weight_store.lru_resolution_s, 7);
    EXPECT_EQ(read.models, "/srv/models");
    ASSERT_EQ(read.tensor_peers.size(), 1u);
    EXPECT_EQ(read.tensor_peers[0].to_string(), "tcp://10.0.0.2:5000");
    EXPECT_EQ(read.log_format, LogFormat::json);
}

TEST(ServicesChannel, AnArgumentItCannotReadIsAnError) {
    ServicesOptions read;
    EXPECT_FALSE(read_services_arguments({"--weight-store-size", "-1"}, &read).ok());
    EXPECT_FALSE(read_services_arguments({"--tensor-peer", "nowhere"}, &read).ok());
    EXPECT_FALSE(read_services_arguments({"--models"}, &read).ok());
    EXPECT_FALSE(read_services_arguments({"--listen", "tcp://0.0.0.0:1"}, &read).ok());
}

// The listener names tenants as the store always named their directories, so a
// store written before the services process moved out is still found.
TEST(ServicesChannel, ATenantsDirectoryIsTheNameTheStoreAlwaysGaveIt) {
    for (const std::string &tenant :
         std::vector<std::string>{"", "unix uid 1000", "tls guest", std::string(70000, 'x')}) {
        const std::string name = store_tenant_directory(tenant);
        EXPECT_EQ(name, StoreOwner::tenant_directory_name(tenant));
        EXPECT_TRUE(is_store_tenant_directory(name)) << name;
    }
    for (const char *bad : {"", "..", "../t-0123456789abcdef01234567", "t-0123456789ABCDEF01234567",
                            "t-0123456789abcdef0123456", "t-0123456789abcdef012345678", "shared/x"}) {
        EXPECT_FALSE(is_store_tenant_directory(bad)) << bad;
    }
}

TEST(Services, AStoreChannelIsOnlyForATenantsDirectory) {
    TemporaryDirectory work;
    ServicesOptions options;
    options.weight_store.directory = work.path + "/store";
    Services services(options);
    services.open();
    UniqueFd channel;
    EXPECT_EQ(services.answer(store_request("../../etc"), &channel).code(), Code::bad_request);
    EXPECT_FALSE(channel.valid());
    services_channel::Request unterminated = store_request("");
    std::memset(unterminated.tenant_directory, 'a', sizeof(unterminated.tenant_directory));
    EXPECT_EQ(services.answer(unterminated, &channel).code(), Code::bad_request);
    ASSERT_TRUE(services.answer(store_request(store_tenant_directory("unix uid 7")), &channel).ok());
    EXPECT_TRUE(channel.valid());
}

TEST(Services, WithoutAStoreOrALibraryAStoreRequestIsNotServedButThePeerBrokerIs) {
    Services services(ServicesOptions{});
    services.open();
    UniqueFd channel;
    EXPECT_EQ(services.answer(store_request("shared"), &channel).code(), services_channel::kNotServed);
    services_channel::Request peer;
    peer.kind = static_cast<uint32_t>(services_channel::Kind::peer);
    ASSERT_TRUE(services.answer(peer, &channel).ok());
    EXPECT_TRUE(channel.valid());
    peer.kind = 99;
    EXPECT_EQ(services.answer(peer, &channel).code(), Code::bad_request);
}

// What the services process may open: the store and the models, not the server's
// other files (its key file lies beside them here).
TEST(Services, ItsSandboxLetsItReadTheStoreAndTheModelsOnly) {
    TemporaryDirectory work;
    ServicesOptions options;
    options.weight_store.directory = work.path + "/store";
    options.models = work.path + "/models";
    for (const std::string &path : {options.weight_store.directory, options.models}) ::mkdir(path.c_str(), 0700);
    const std::string key = work.path + "/keys.psk";
    (void)!std::system(("echo guest:00 > '" + key + "'").c_str());
    Endpoint peer;
    ASSERT_TRUE(parse_endpoint("tcp://127.0.0.1:5123", &peer).ok());
    options.tensor_peers = {peer};
    const FilesystemPolicy policy = services_filesystem_policy(options);
    EXPECT_TRUE(policy_lets_read(policy, options.models));
    EXPECT_TRUE(policy_lets_read(policy, options.weight_store.directory));
    EXPECT_FALSE(policy_lets_read(policy, key));
    EXPECT_FALSE(policy_lets_read(policy, "/etc/shadow"));
    EXPECT_FALSE(policy_lets_read(policy, "/proc/1/environ"));
    EXPECT_EQ(policy.connect_ports, std::vector<uint16_t>{5123});
}

// A stand-in for ggml-remote-services: python on the services channel (fd 3),
// saying it is ready and then answering as `answer` says.
ServicesProcess fake_services(const std::string &answer) {
    const std::string script =
        "import socket, struct, time\n"
        "s = socket.socket(fileno=3)\n"
        "def reply(kind, code=0, fds=()):\n"
        "    data = struct.pack('<Ii200s', kind, code, b'')\n"
        "    s.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack('i' * len(fds), *fds))] if fds "
        "else [])\n"
        "reply(1)\n"
        "while True:\n"
        "    request = s.recv(56)\n"
        "    if not request: break\n"
        "    kind = struct.unpack_from('<I', request)[0]\n" +
        answer;
    sigset_t mask;
    sigemptyset(&mask);
    return ServicesProcess("/usr/bin/python3", {"-c", script}, mask);
}

// Reaps `services`'s process (the listener does it with its workers).
void reap_within_10s(ServicesProcess *services) {
    const pid_t pid = services->pid();
    for (auto deadline = Clock::now() + 10s; Clock::now() < deadline; std::this_thread::sleep_for(10ms)) {
        int wait_status = 0;
        if (::waitpid(pid, &wait_status, WNOHANG) == pid) {
            services->stop();  // no new one
            EXPECT_TRUE(services->ended(pid, wait_status));
            return;
        }
    }
    ADD_FAILURE() << "the services process " << pid << " did not end";
}

TEST(ServicesProcess, AnAnswerWithoutItsChannelIsRefusedAndTheProcessKilled) {
    ServicesProcess services = fake_services("    reply(kind)\n");
    services.start(10s);
    ASSERT_GT(services.pid(), 0);
    EXPECT_FALSE(services.store_channel("unix uid 1").valid());
    reap_within_10s(&services);
}

TEST(ServicesProcess, AnAnswerOfAnotherKindIsRefused) {
    ServicesProcess services = fake_services("    r, w = socket.socketpair()\n    reply(kind + 1, 0, [r.fileno()])\n");
    services.start(10s);
    EXPECT_FALSE(services.peer_channel().valid());
    reap_within_10s(&services);
}

TEST(ServicesProcess, ASilentProcessCostsOneBoundedWaitAndIsKilled) {
    ServicesProcess services = fake_services("    time.sleep(3600)\n");
    services.start(10s);
    const auto asked = Clock::now();
    EXPECT_FALSE(services.store_channel("unix uid 1").valid());
    EXPECT_LT(Clock::now() - asked, 60s);  // the answer's deadline, not the sleep
    reap_within_10s(&services);
}

TEST(ServicesProcess, AnHonestProcessHandsOverTheChannelItMade) {
    ServicesProcess services = fake_services("    r, w = socket.socketpair()\n    reply(kind, 0, [r.fileno()])\n");
    services.start(10s);
    EXPECT_TRUE(services.store_channel("unix uid 1").valid());
    EXPECT_TRUE(services.peer_channel().valid());
    services.stop();  // it exits when its channel closes
    reap_within_10s(&services);
}

}  // namespace
}  // namespace ggml_remote::host
