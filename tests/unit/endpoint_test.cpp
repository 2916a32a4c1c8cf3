// Endpoints: "unix:/path", "tcp://host:port", "vsock://CID:PORT" and the rest, one at a time or as a list.
#include "transport/endpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace ggml_remote {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

Endpoint parse_ok(const std::string &text) {
    Endpoint endpoint;
    Status status = parse_endpoint(text, &endpoint);
    EXPECT_TRUE(status.ok()) << text << ": " << status.message();
    return endpoint;
}

Status parse_error(const std::string &text) {
    Endpoint endpoint;
    return parse_endpoint(text, &endpoint);
}

TEST(Endpoint, UnixFormKeepsThePathVerbatim) {
    const Endpoint endpoint = parse_ok("unix:/run/ggml-remote/server.sock");
    EXPECT_EQ(endpoint.kind, Endpoint::Kind::unix_socket);
    EXPECT_EQ(endpoint.path, "/run/ggml-remote/server.sock");
    EXPECT_EQ(endpoint.host, "");
    EXPECT_EQ(endpoint.port, 0);
}

TEST(Endpoint, ShmFormIsAUnixSocketThatAsksForSharedMemory) {
    const Endpoint endpoint = parse_ok("shm:/run/ggml-remote/server.sock");
    EXPECT_EQ(endpoint.kind, Endpoint::Kind::shared_memory);
    EXPECT_EQ(endpoint.path, "/run/ggml-remote/server.sock");
    EXPECT_TRUE(endpoint.uses_unix_socket());
    EXPECT_TRUE(parse_ok("unix:/x.sock").uses_unix_socket());
    EXPECT_FALSE(parse_ok("tcp://h:1").uses_unix_socket());
}

TEST(Endpoint, EmptyShmPathIsRefused) {
    Status status = parse_error("shm:");
    EXPECT_EQ(status.code(), Code::bad_request);
    EXPECT_THAT(status.message(), HasSubstr("empty socket path"));
}

TEST(Endpoint, TcpFormSplitsHostAndPort) {
    const Endpoint endpoint = parse_ok("tcp://gpu-box.lan:50052");
    EXPECT_EQ(endpoint.kind, Endpoint::Kind::tcp);
    EXPECT_EQ(endpoint.host, "gpu-box.lan");
    EXPECT_EQ(endpoint.port, 50052);
    EXPECT_EQ(endpoint.path, "");
}

TEST(Endpoint, TlsFormIsTcpWithTls) {
    const Endpoint endpoint = parse_ok("tls://gpu-box.lan:50053");
    EXPECT_EQ(endpoint.kind, Endpoint::Kind::tls);
    EXPECT_EQ(endpoint.host, "gpu-box.lan");
    EXPECT_EQ(endpoint.port, 50053);
    EXPECT_TRUE(endpoint.uses_tls());
    EXPECT_FALSE(endpoint.uses_unix_socket());
    EXPECT_FALSE(parse_ok("tcp://gpu-box.lan:50053").uses_tls());
    EXPECT_EQ(parse_ok("tls://[::1]:9").to_string(), "tls://[::1]:9");
    EXPECT_TRUE(parse_ok("tls://127.0.0.1:9").is_loopback());
}

TEST(Endpoint, TlsKeyFileOptionGivesTheServerItsOwnKey) {
    const Endpoint endpoint = parse_ok("tls://gpu-box.lan:50053?psk-file=/etc/ggml-remote/gpu-box.psk");
    EXPECT_EQ(endpoint.kind, Endpoint::Kind::tls);
    EXPECT_EQ(endpoint.host, "gpu-box.lan");
    EXPECT_EQ(endpoint.port, 50053);
    EXPECT_EQ(endpoint.psk_file, "/etc/ggml-remote/gpu-box.psk");
    EXPECT_EQ(endpoint.psk_identity, "");
    // Logs and errors name the server, not where its key lies.
    EXPECT_EQ(endpoint.to_string(), "tls://gpu-box.lan:50053");
    EXPECT_EQ(parse_ok("tls://gpu-box.lan:50053").psk_file, "");
}

TEST(Endpoint, TlsKeyIdentityOptionPicksALineOfTheKeyFile) {
    const Endpoint endpoint = parse_ok("tls://[::1]:9?psk-file=/k.psk&psk-identity=guest-2");
    EXPECT_EQ(endpoint.host, "::1");
    EXPECT_EQ(endpoint.port, 9);
    EXPECT_EQ(endpoint.psk_file, "/k.psk");
    EXPECT_EQ(endpoint.psk_identity, "guest-2");
    EXPECT_EQ(parse_ok("tls://h:9?psk-identity=a&psk-file=/k.psk").psk_identity, "a");
}

TEST(Endpoint, UnknownTlsOptionIsRefusedNamingTheKnownOnes) {
    for (const char *text : {"tls://h:1?psk=/k", "tls://h:1?psk-file=/k&verify=no", "tls://h:1?", "tls://h:1?&"}) {
        Status status = parse_error(text);
        EXPECT_EQ(status.code(), Code::bad_request) << text;
        EXPECT_THAT(status.message(), AllOf(HasSubstr("unknown option"), HasSubstr("psk-file="))) << text;
    }
}

TEST(Endpoint, TlsOptionsAreRefusedOnOtherSchemes) {
    EXPECT_THAT(parse_error("tcp://h:1?psk-file=/k").message(), HasSubstr("go with tls:// only"));
    EXPECT_FALSE(parse_error("h:1?psk-file=/k").ok());
}

TEST(Endpoint, MalformedTlsOptionsAreRefusedWithTheReason) {
    EXPECT_THAT(parse_error("tls://h:1?psk-file=").message(), HasSubstr("psk-file= needs a value"));
    EXPECT_THAT(parse_error("tls://h:1?psk-file=/a&psk-file=/b").message(), HasSubstr("psk-file= given twice"));
    EXPECT_THAT(parse_error("tls://h:1?psk-file=keys/a.psk").message(), HasSubstr("absolute path"));
    EXPECT_THAT(parse_error("tls://h:1?psk-identity=guest").message(), HasSubstr("goes with psk-file="));
    EXPECT_THAT(parse_error("tls://h:1?psk-file=/a&psk-identity=a:b").message(), HasSubstr("visible characters"));
    EXPECT_THAT(parse_error("tls://h:1?psk-file=/a&psk-identity=" + std::string(256, 'x')).message(),
                HasSubstr("1 to 255"));
    EXPECT_THAT(parse_error("tls://h:x?psk-file=/a").message(), HasSubstr("port must be a number"));
}

TEST(Endpoint, ListGivesEachTlsServerItsOwnKey) {
    std::vector<Endpoint> endpoints;
    ASSERT_TRUE(parse_endpoint_list("tls://a:1?psk-file=/a.psk, tls://b:2?psk-file=/b.psk&psk-identity=g, tls://c:3",
                                    &endpoints)
                    .ok());
    ASSERT_EQ(endpoints.size(), 3u);
    EXPECT_EQ(endpoints[0].psk_file, "/a.psk");
    EXPECT_EQ(endpoints[1].psk_file, "/b.psk");
    EXPECT_EQ(endpoints[1].psk_identity, "g");
    EXPECT_EQ(endpoints[2].psk_file, "");
}

TEST(Endpoint, TcpPortZeroAndMaximumAreAccepted) {
    EXPECT_EQ(parse_ok("tcp://127.0.0.1:0").port, 0);
    EXPECT_EQ(parse_ok("tcp://127.0.0.1:65535").port, 65535);
}

TEST(Endpoint, BracketedIpv6HostLosesItsBrackets) {
    const Endpoint endpoint = parse_ok("tcp://[fe80::1:2]:8080");
    EXPECT_EQ(endpoint.kind, Endpoint::Kind::tcp);
    EXPECT_EQ(endpoint.host, "fe80::1:2");
    EXPECT_EQ(endpoint.port, 8080);
}

// llama.cpp users write --rpc 127.0.0.1:50052: the same text names a tcp server here.
TEST(Endpoint, ABareHostAndPortIsTcp) {
    const Endpoint v4 = parse_ok("127.0.0.1:50153");
    EXPECT_EQ(v4.kind, Endpoint::Kind::tcp);
    EXPECT_EQ(v4.host, "127.0.0.1");
    EXPECT_EQ(v4.port, 50153);
    EXPECT_EQ(v4.to_string(), "tcp://127.0.0.1:50153");
    const Endpoint named = parse_ok("gpu-box:50053");
    EXPECT_EQ(named.kind, Endpoint::Kind::tcp);
    EXPECT_EQ(named.host, "gpu-box");
    const Endpoint v6 = parse_ok("[::1]:50053");
    EXPECT_EQ(v6.kind, Endpoint::Kind::tcp);
    EXPECT_EQ(v6.host, "::1");
    for (const char *text : {"::1:50053", "host:", ":50053", "host:port", "host:99999", "a/b:1"}) {
        EXPECT_EQ(parse_error(text).code(), Code::bad_request) << text;
    }
}

TEST(Endpoint, UnknownSchemeIsRefusedNamingTheAcceptedForms) {
    for (const char *text : {"http://host:80", "udp://host:1", "/run/x.sock", "", "UNIX:/x", "tcp:/host:1", "shm"}) {
        Status status = parse_error(text);
        EXPECT_EQ(status.code(), Code::bad_request) << text;
        EXPECT_THAT(status.message(), HasSubstr("unix:/path/to.sock")) << text;
        EXPECT_THAT(status.message(), HasSubstr("tcp://host:port")) << text;
        EXPECT_THAT(status.message(), HasSubstr("tls://host:port")) << text;
    }
}

TEST(Endpoint, ErrorQuotesTheOffendingText) { EXPECT_THAT(parse_error("ftp://x").message(), HasSubstr("'ftp://x'")); }

TEST(Endpoint, EmptyUnixPathIsRefused) {
    Status status = parse_error("unix:");
    EXPECT_EQ(status.code(), Code::bad_request);
    EXPECT_THAT(status.message(), HasSubstr("empty socket path"));
    EXPECT_THAT(status.message(), HasSubstr("tcp://host:port"));
}

TEST(Endpoint, UnixPathLongerThanSunPathIsRefused) {
    Status status = parse_error("unix:/" + std::string(200, 'x'));
    EXPECT_EQ(status.code(), Code::bad_request);
    EXPECT_THAT(status.message(), HasSubstr("too long"));
}

TEST(Endpoint, BadTcpPortsAreRefused) {
    for (const char *text : {"tcp://host", "tcp://host:", "tcp://host:65536", "tcp://host:-1", "tcp://host:80x",
                             "tcp://host:http", "tcp://host:99999999999999999999999"}) {
        Status status = parse_error(text);
        EXPECT_EQ(status.code(), Code::bad_request) << text;
        EXPECT_THAT(status.message(), HasSubstr("unix:/path/to.sock")) << text;
        EXPECT_THAT(status.message(), HasSubstr("tcp://host:port")) << text;
        EXPECT_THAT(status.message(), HasSubstr("tls://host:port")) << text;
    }
}

TEST(Endpoint, EmptyTcpHostIsRefused) {
    EXPECT_EQ(parse_error("tcp://:80").code(), Code::bad_request);
    EXPECT_EQ(parse_error("tcp://[]:80").code(), Code::bad_request);
}

TEST(Endpoint, MalformedBracketedHostIsRefused) {
    for (const char *text : {"tcp://[::1", "tcp://[::1]", "tcp://[::1]80", "tcp://[::1]:"}) {
        EXPECT_EQ(parse_error(text).code(), Code::bad_request) << text;
    }
}

TEST(Endpoint, FailedParseLeavesTheOutputUntouched) {
    Endpoint endpoint;
    endpoint.path = "/keep";
    EXPECT_FALSE(parse_endpoint("tcp://host:nope", &endpoint).ok());
    EXPECT_EQ(endpoint.kind, Endpoint::Kind::unix_socket);
    EXPECT_EQ(endpoint.path, "/keep");
}

TEST(Endpoint, ToStringRoundTripsEveryForm) {
    for (const char *text : {"unix:/tmp/a.sock", "shm:/tmp/b.sock", "tcp://localhost:1", "tcp://10.1.2.3:65535",
                             "tcp://[::1]:50052", "tcp://[2001:db8::7]:9"}) {
        const Endpoint endpoint = parse_ok(text);
        EXPECT_EQ(endpoint.to_string(), text);
        const Endpoint again = parse_ok(endpoint.to_string());
        EXPECT_EQ(again.kind, endpoint.kind);
        EXPECT_EQ(again.path, endpoint.path);
        EXPECT_EQ(again.host, endpoint.host);
        EXPECT_EQ(again.port, endpoint.port);
    }
}

TEST(Endpoint, ToStringBracketsIpv6Hosts) {
    Endpoint endpoint;
    endpoint.kind = Endpoint::Kind::tcp;
    endpoint.host = "::1";
    endpoint.port = 7;
    EXPECT_EQ(endpoint.to_string(), "tcp://[::1]:7");
}

TEST(Endpoint, LoopbackMeansUnixSocketsAndLocalTcpHosts) {
    EXPECT_TRUE(parse_ok("unix:/tmp/x.sock").is_loopback());
    EXPECT_TRUE(parse_ok("shm:/tmp/x.sock").is_loopback());
    EXPECT_TRUE(parse_ok("tcp://localhost:1").is_loopback());
    EXPECT_TRUE(parse_ok("tcp://127.0.0.1:1").is_loopback());
    EXPECT_TRUE(parse_ok("tcp://127.8.9.10:1").is_loopback());
    EXPECT_TRUE(parse_ok("tcp://[::1]:1").is_loopback());
}

TEST(Endpoint, RemoteAndWildcardTcpHostsAreNotLoopback) {
    EXPECT_FALSE(parse_ok("tcp://10.0.0.1:1").is_loopback());
    EXPECT_FALSE(parse_ok("tcp://0.0.0.0:1").is_loopback());
    EXPECT_FALSE(parse_ok("tcp://[::]:1").is_loopback());
    EXPECT_FALSE(parse_ok("tcp://[fe80::1]:1").is_loopback());
    EXPECT_FALSE(parse_ok("tcp://gpu-box:1").is_loopback());
    EXPECT_FALSE(parse_ok("tcp://1270.0.0.1:1").is_loopback());
}

TEST(EndpointList, ParsesCommaSeparatedItemsInOrder) {
    std::vector<Endpoint> endpoints;
    ASSERT_TRUE(parse_endpoint_list("unix:/a.sock,tcp://h:1,tcp://[::1]:2", &endpoints).ok());
    ASSERT_EQ(endpoints.size(), 3u);
    EXPECT_EQ(endpoints[0].path, "/a.sock");
    EXPECT_EQ(endpoints[1].host, "h");
    EXPECT_EQ(endpoints[1].port, 1);
    EXPECT_EQ(endpoints[2].host, "::1");
    EXPECT_EQ(endpoints[2].port, 2);
}

TEST(EndpointList, TrimsSpacesAndSkipsEmptyItems) {
    std::vector<Endpoint> endpoints;
    ASSERT_TRUE(parse_endpoint_list(" , unix:/a.sock ,, ,  tcp://h:1  ,", &endpoints).ok());
    ASSERT_EQ(endpoints.size(), 2u);
    EXPECT_EQ(endpoints[0].to_string(), "unix:/a.sock");
    EXPECT_EQ(endpoints[1].to_string(), "tcp://h:1");
}

TEST(EndpointList, EmptyTextIsAnEmptyList) {
    std::vector<Endpoint> endpoints;
    EXPECT_TRUE(parse_endpoint_list("", &endpoints).ok());
    EXPECT_TRUE(parse_endpoint_list(",,  ,", &endpoints).ok());
    EXPECT_TRUE(endpoints.empty());
}

TEST(EndpointList, OneBadItemFailsTheListWithItsReason) {
    std::vector<Endpoint> endpoints;
    Status status = parse_endpoint_list("unix:/a.sock, tcp://h:notaport", &endpoints);
    EXPECT_EQ(status.code(), Code::bad_request);
    EXPECT_THAT(status.message(), HasSubstr("'tcp://h:notaport'"));
}

TEST(Endpoint, VsockFormTakesANumericCidAndPort) {
    const Endpoint endpoint = parse_ok("vsock://2:50052");
    EXPECT_EQ(endpoint.kind, Endpoint::Kind::vsock);
    EXPECT_TRUE(endpoint.is_vsock());
    EXPECT_EQ(endpoint.cid, 2u);
    EXPECT_EQ(endpoint.vsock_port, 50052u);
    EXPECT_FALSE(endpoint.uses_unix_socket());
    EXPECT_FALSE(endpoint.uses_tls());
}

TEST(Endpoint, VsockTakesTheWholeThirtyTwoBitRangeButTheWildcards) {
    const Endpoint endpoint = parse_ok("vsock://4294967294:4294967294");
    EXPECT_EQ(endpoint.cid, 4294967294u);
    EXPECT_EQ(endpoint.vsock_port, 4294967294u);
    EXPECT_EQ(parse_ok("vsock://0:0").cid, 0u);
    EXPECT_THAT(parse_error("vsock://4294967295:1").message(), HasSubstr("CID must be a number"));
    EXPECT_THAT(parse_error("vsock://2:4294967295").message(), HasSubstr("port must be a number"));
}

TEST(Endpoint, VsockAnyIsTheListeningWildcard) {
    const Endpoint endpoint = parse_ok("vsock://ANY:1024");
    EXPECT_EQ(endpoint.cid, Endpoint::kAnyCid);
    EXPECT_EQ(endpoint.vsock_port, 1024u);
    EXPECT_EQ(endpoint.to_string(), "vsock://ANY:1024");
}

TEST(Endpoint, VsockRefusesAnythingButDigits) {
    for (const char *text : {"vsock://", "vsock://2", "vsock://2:", "vsock://:5", "vsock://host:5", "vsock://any:5",
                             "vsock://-1:5", "vsock://+2:5", "vsock://2:-5", "vsock://2:+5", "vsock://0x2:5",
                             "vsock://2:0x10", "vsock:// 2:5", "vsock://2:5 ", "vsock://2:5:6", "vsock://[2]:5",
                             "vsock://2:99999999999", "vsock://18446744073709551618:5", "vsock:2:5"}) {
        Status status = parse_error(text);
        EXPECT_EQ(status.code(), Code::bad_request) << text;
        EXPECT_THAT(status.message(), HasSubstr(text)) << text;
    }
}

TEST(Endpoint, VsockErrorNamesTheForm) {
    EXPECT_THAT(parse_error("vsock://x:1").message(), HasSubstr("vsock://CID:PORT"));
}

TEST(Endpoint, VsockRoundTripsAndCountsAsLocal) {
    for (const char *text : {"vsock://2:1234", "vsock://3:0", "vsock://ANY:50052"}) {
        const Endpoint endpoint = parse_ok(text);
        EXPECT_EQ(endpoint.to_string(), text);
        // No network reaches a vsock port: only this host's VMs (docs/SECURITY.md).
        EXPECT_TRUE(endpoint.is_loopback()) << text;
    }
}

TEST(EndpointList, MixesVsockWithOtherForms) {
    std::vector<Endpoint> endpoints;
    ASSERT_TRUE(parse_endpoint_list("vsock://2:5000, tcp://h:1", &endpoints).ok());
    ASSERT_EQ(endpoints.size(), 2u);
    EXPECT_EQ(endpoints[0].kind, Endpoint::Kind::vsock);
    EXPECT_EQ(endpoints[0].vsock_port, 5000u);
    EXPECT_EQ(endpoints[1].kind, Endpoint::Kind::tcp);
}

TEST(Endpoint, IvshmemGuestFormsNameTheFirstDeviceAnAddressOrAFile) {
    const Endpoint first = parse_ok("ivshmem:");
    EXPECT_EQ(first.kind, Endpoint::Kind::ivshmem);
    EXPECT_EQ(first.path, "");
    EXPECT_EQ(first.pci_address, "");
    EXPECT_EQ(parse_ok("ivshmem:0000:00:04.0").pci_address, "0000:00:04.0");
    const Endpoint file = parse_ok("ivshmem:file:/dev/shm/vm1");
    EXPECT_EQ(file.path, "/dev/shm/vm1");
    EXPECT_EQ(file.to_string(), "ivshmem:file:/dev/shm/vm1");
    EXPECT_TRUE(file.is_loopback());
    EXPECT_FALSE(file.uses_unix_socket());
}

TEST(Endpoint, IvshmemServerFormTakesASize) {
    const Endpoint endpoint = parse_ok("ivshmem:/dev/shm/vm1,size=64M");
    EXPECT_EQ(endpoint.path, "/dev/shm/vm1");
    EXPECT_EQ(endpoint.size, 64ull << 20);
    EXPECT_EQ(parse_ok("ivshmem:/dev/shm/vm1,size=1G").size, 1ull << 30);
    EXPECT_EQ(parse_ok("ivshmem:/dev/shm/vm1,size=65536").size, 65536u);
    EXPECT_THAT(parse_error("ivshmem:/dev/shm/vm1,size=").message(), HasSubstr("size must be"));
    EXPECT_THAT(parse_error("ivshmem:/dev/shm/vm1,size=64Q").message(), HasSubstr("size must be"));
    EXPECT_THAT(parse_error("ivshmem:/dev/shm/vm1,size=-1").message(), HasSubstr("size must be"));
    EXPECT_THAT(parse_error("ivshmem:/dev/shm/vm1,size=99999999999G").message(), HasSubstr("size must be"));
    EXPECT_THAT(parse_error("ivshmem:relative,size=64M").message(), HasSubstr("absolute"));
    EXPECT_THAT(parse_error("ivshmem:0000:00:04.0,size=64M").message(), HasSubstr("goes with a file"));
}

}  // namespace
}  // namespace ggml_remote
