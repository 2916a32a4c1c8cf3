// Endpoints: where a server listens and a guest connects.
// Written "unix:/path/to.sock", "shm:/path/to.sock", "tcp://host:port" or
// "tls://host:port" (IPv6 hosts in brackets). shm: is a unix socket over which the
// guest also asks for shared-memory buffers; a server's unix socket serves both.
// tls: is TCP with TLS and a pre-shared key; a server started with --tls-psk speaks
// it on its tcp:// listeners. A guest may give one server a key of its own:
// "tls://host:port?psk-file=/path/to/keyfile[&psk-identity=NAME]".
// ivshmem: is a memory region shared with a virtual machine (ivshmem_region.h): a
// server listens on "ivshmem:/dev/shm/NAME,size=64M[,reuse][,group=NAME]" (a memory
// file it creates, see host/region_port.h); a
// guest writes "ivshmem:" (the VM's first ivshmem PCI device), "ivshmem:0000:00:04.0"
// (one device's PCI address) or "ivshmem:file:/dev/shm/NAME" (the file itself, on
// the host: tests without a VM).
// vsock: is an AF_VSOCK stream between a virtual machine and its host, written
// "vsock://CID:PORT" with numbers: a guest connects to CID 2 (the host); a server
// listens on "vsock://ANY:PORT" or on its own CID. Firecracker, Cloud Hypervisor
// and vhost-device-vsock instead hand a guest's connection to port P to the host's
// unix socket "PATH_P", which a server serves with unix:PATH_P (docs/MICROVMS.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "protocol/status.h"

namespace ggml_remote {

struct Endpoint {
    enum class Kind { unix_socket, shared_memory, tcp, tls, ivshmem, vsock };
    static constexpr uint32_t kAnyCid = 0xFFFFFFFFu;  // vsock://ANY: listen for every VM (VMADDR_CID_ANY)
    Kind kind = Kind::unix_socket;
    std::string path;          // unix, shared_memory
    std::string host;          // tcp, tls
    int port = 0;              // tcp, tls
    std::string pci_address;   // ivshmem guest: a PCI device; empty with neither it nor path: the first one
    uint64_t size = 0;         // ivshmem server: the region's bytes
    bool reuse = false;        // ivshmem server: may take over an existing file of its own (region_port.h)
    std::string group;         // ivshmem server: the group the region file is given (mode 0660), for QEMU
    std::string psk_file;      // tls guest: this server's key file (empty: the guest's global key)
    std::string psk_identity;  // tls guest, with psk_file: which identity of the file to present
    uint32_t cid = 0;          // vsock: the context id, or kAnyCid
    uint32_t vsock_port = 0;   // vsock: 32 bits, unlike a TCP port

    // The endpoint without its options: what logs and errors name (never a key file).
    std::string to_string() const;
    bool uses_unix_socket() const { return kind == Kind::unix_socket || kind == Kind::shared_memory; }
    bool uses_tls() const { return kind == Kind::tls; }
    // Reachable from this machine and its own VMs only, never from a network: unix
    // sockets, ivshmem, vsock and loopback TCP (docs/SECURITY.md).
    bool is_loopback() const;
    bool is_ivshmem() const { return kind == Kind::ivshmem; }
    bool is_vsock() const { return kind == Kind::vsock; }
};

// Parses one endpoint; the error names the accepted forms.
Status parse_endpoint(const std::string &text, Endpoint *endpoint);
// Parses a comma-separated list (GGML_REMOTE_SERVERS); empty items are skipped.
Status parse_endpoint_list(const std::string &text, std::vector<Endpoint> *endpoints);

}  // namespace ggml_remote
