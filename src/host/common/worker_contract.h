// The contract between the listener and a session worker, in one place: what a
// worker is started with, the bytes they exchange on the admission socket, and the
// reply that turns a guest away. Everything else a worker knows it reads from the
// serving flags the listener hands on (serving_options.h).
//
// The listener is the trusted side: a worker reads its launch from its own command
// line, but whatever a worker writes back (an admission request, its status board
// slot) the listener treats as coming from a process a guest may have taken over.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "protocol/status.h"
#include "protocol/wire.h"
#include "transport/psk_binder.h"

namespace ggml_remote::host {

// What a worker needs from the listener: its connection and session, where it
// reports its figures, and (TLS) its end of the admission pair. The descriptors are
// inherited across the exec; every other descriptor of the listener is closed.
struct WorkerLaunch {
    int client_fd = -1;
    int session_id = 0;
    std::string peer;
    int status_fd = -1;     // the status board, or -1
    int status_slot = -1;   // its slot there, or -1 (unlisted)
    int admission_fd = -1;  // -1: authenticated at accept
    int store_fd = -1;      // its channel to the weight store's owner (store_owner.h), or -1
    int peer_fd = -1;       // its channel to the peer broker (peer_channel.h), or -1
};

// The worker's command-line arguments for `launch` (after the serving flags).
std::vector<std::string> worker_launch_arguments(const WorkerLaunch &launch);

// Whether `flag` is one of worker_launch_arguments' flags (each takes one value).
bool is_worker_launch_flag(const std::string &flag);
// Sets the field of `launch` that `flag` names from `value`.
Status read_worker_launch_flag(const std::string &flag, const std::string &value, WorkerLaunch *launch);

// The bytes of the admission request and its answers (admission.h).
constexpr char kAdmissionRequest = 'A';
constexpr char kAdmissionGranted = 'Y';
constexpr char kAdmissionFull = 'N';
constexpr char kAdmissionPeerFull = 'P';

// A TLS worker's one question before its handshake ends, on the admission socket:
// the key of the identity its guest names, with the guest's proof that it holds
// that key (psk_binder.h). A worker holds no key before it asks, and gets the one
// key alone. With the key comes the worker's channel to the weight store for that
// identity's tenant (SCM_RIGHTS; none without a store): the listener fixes the
// tenant, and a worker has no store to ask before it.
constexpr uint32_t kKeyRequestKind = 0x3159454b;  // "KEY1"
struct KeyRequest {
    uint32_t kind = kKeyRequestKind;
    uint32_t unused = 0;
    BinderProof proof;
};
constexpr size_t kMaxKeyReplyBytes = 512;
struct KeyReply {
    int32_t code = 0;  // protocol Code: 0, the key follows; not_found, bad_request: no key
    uint32_t key_size = 0;
    uint8_t key[kMaxKeyReplyBytes] = {};
    char message[200] = {};
};

// A guest turned away is told why in the form of a handshake reply: this header,
// then `reason_size` bytes of the reason. The listener writes it before any worker
// exists; a worker writes it when its session may not start.
protocol::FrameHeader refusal_header(Code code, size_t reason_size);

// The device probe (listener/device_probe.h): a worker started with --list-devices
// answers on its stdout with one line per device it would serve, or one error line.
struct ProbedDevice {
    std::string name;
    std::string description;
    uint64_t total_bytes = 0;
    uint64_t free_bytes = 0;
};

std::string device_probe_line(const ProbedDevice &device);
std::string device_probe_error_line(const std::string &message);

// Reads the probe's output; its error line, or one it cannot read, is an error.
Status parse_device_probe(const std::string &output, std::vector<ProbedDevice> *devices);

}  // namespace ggml_remote::host
