#include "guest/tensor_parallel.h"

#include <sys/random.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "guest/backend.h"
#include "guest/buffer.h"
#include "guest/device.h"
#include "guest/log.h"
#include "transport/peer_exchange.h"

namespace ggml_remote::guest {

using namespace protocol;

namespace {

// A slot holds one server's partial of one step: n_embd x n_ubatch F32 values,
// 8 MiB for a 4096-wide model at llama.cpp's default batch of 512. The file is
// sparse: only the pages a step writes take memory.
constexpr uint64_t kSlotBytes = 16ull << 20;
// How long a server waits for the others at a step: a peer still computing a
// large batch's sub-graph may be seconds behind. A lost server is told sooner
// (tensor_parallel_member_failed).
constexpr uint32_t kPeerWaitMs = 30000;

struct Member {
    ggml_backend_t backend = nullptr;
    RemoteDevice *device = nullptr;
    uint64_t comm = 0;  // the server's handle of the group
    uint64_t reconnections = 0;
};

struct Group {
    std::vector<Member> members;
    bool over_links = false;  // the servers are on other machines: TCP between them, no file
    UniqueFd file;
    PeerExchange watch;             // our mapping of the file: to mark a lost server gone
    bool usable = true;             // false once a member failed: ggml does the steps
    std::string failure_to_report;  // for the group's next compute (tensor_parallel_compute_refused)
};

// The live groups, for tensor_parallel_member_failed, and the counts, under one lock.
std::mutex g_groups_mutex;
std::vector<Group *> g_groups;
TensorParallelCounts g_counts;

void mark_lost_locked(Group *group, size_t rank, const std::string &why) {
    // Over links, a peer sees the lost server's connection close instead.
    if (!group->over_links) group->watch.mark_gone(static_cast<uint32_t>(rank));
    if (group->usable) group->failure_to_report = why;
    group->usable = false;
}

// How the servers of `members` can sum: through a memory file when every one is
// on a unix socket here, over links when every one is on TCP; false when neither.
bool choose_route(const std::vector<Member> &members, bool *over_links) {
    const auto all = [&](bool (RemoteSession::*granted)() const) {
        return std::all_of(members.begin(), members.end(),
                           [&](const Member &member) { return (member.device->session().*granted)(); });
    };
    if (all(&RemoteSession::peer_exchange)) {
        *over_links = false;
        return true;
    }
    if (all(&RemoteSession::peer_links)) {
        *over_links = true;
        return true;
    }
    log(GGML_LOG_LEVEL_INFO,
        "tensor parallelism: the servers are neither all on unix sockets here nor all on TCP with peer "
        "links; partial results go through this process");
    return false;
}

// The members, if every backend is ours, on a server of its own.
bool gather_members(ggml_backend_t *backends, size_t n_backends, std::vector<Member> *members) {
    for (size_t i = 0; i < n_backends; ++i) {
        Member member;
        member.backend = backends[i];
        member.device = remote_device_of(backends[i]);
        if (member.device == nullptr) return false;
        RemoteSession &session = member.device->session();
        for (const Member &other : *members) {
            if (&other.device->session() == &session) return false;  // one worker would wait for itself
        }
        member.reconnections = session.reconnections();
        members->push_back(member);
    }
    return true;
}

void leave(Group *group) {
    for (Member &member : group->members) {
        if (member.comm != 0) (void)member.device->session().post<CommLeave>({member.comm});
    }
}

// The join of `rank` in `place`: CommJoin's and CommJoinLinks' requests have the
// same fields.
template <typename Join>
typename Join::Request join_request(size_t rank, const PeerExchange::Place &place) {
    typename Join::Request request{};
    request.rank = static_cast<uint32_t>(rank);
    request.ranks = place.ranks;
    request.slot_bytes = place.slot_bytes;
    request.wait_ms = kPeerWaitMs;
    std::memcpy(request.token, place.token.data(), sizeof(request.token));
    return request;
}

// Each server joins over links, told the endpoints of the lower ranks, which it
// dials (through its listener); the token is the links' key.
Status join_links(Group *group, const PeerExchange::Place &place) {
    std::string endpoints;
    for (size_t rank = 0; rank < group->members.size(); ++rank) {
        Member &member = group->members[rank];
        CommJoinLinks::Reply reply{};
        Status status = member.device->session()
                            .call<CommJoinLinks>(join_request<CommJoinLinks>(rank, place))
                            .tail(ByteView(endpoints.data(), endpoints.size()))
                            .reply(&reply)
                            .run();
        if (!status) return error(status.code(), member.device->name() + ": comm_join_links: " + status.message());
        member.comm = reply.comm;
        endpoints += member.device->session().endpoint();
        endpoints.push_back('\0');
    }
    return Status::success();
}

Status join(Group *group) {
    PeerExchange::Place place;
    place.ranks = static_cast<uint32_t>(group->members.size());
    place.slot_bytes = kSlotBytes;
    if (::getrandom(place.token.data(), place.token.size(), 0) != static_cast<ssize_t>(place.token.size())) {
        return error(Code::error, "no random token for the group");
    }
    if (group->over_links) return join_links(group, place);
    if (Status s = PeerExchange::create_area(place, &group->file); !s) return s;
    if (Status s = PeerExchange::watch(group->file.get(), place, &group->watch); !s) return s;
    for (size_t rank = 0; rank < group->members.size(); ++rank) {
        Member &member = group->members[rank];
        CommJoin::Reply reply{};
        Status status = member.device->session()
                            .call<CommJoin>(join_request<CommJoin>(rank, place))
                            .send_fd(group->file.get())
                            .reply(&reply)
                            .run();
        if (!status) return error(status.code(), member.device->name() + ": comm_join: " + status.message());
        member.comm = reply.comm;
    }
    return Status::success();
}

// Whether every member's connection is the one it joined on; marks the others gone.
bool members_alive_locked(Group *group) {
    for (size_t rank = 0; rank < group->members.size(); ++rank) {
        Member &member = group->members[rank];
        if (member.device->session().reconnections() != member.reconnections) {
            mark_lost_locked(group, rank, member.device->name() + " was connected again, outside the group");
        }
    }
    return group->usable;
}

// Whether the step can go through the servers: F32 tensors of one size, in a
// buffer of each member's own session, computed, fitting a slot.
bool step_fits(const Group &group, ggml_tensor **tensors) {
    const size_t bytes = ggml_nbytes(tensors[0]);
    if (bytes == 0 || bytes > kSlotBytes) return false;
    for (size_t rank = 0; rank < group.members.size(); ++rank) {
        const ggml_tensor *tensor = tensors[rank];
        if (tensor->type != GGML_TYPE_F32 || !ggml_is_contiguous(tensor) || ggml_nbytes(tensor) != bytes) return false;
        // A node ggml left out (its slice of the split is empty) holds no partial.
        if ((tensor->flags & GGML_TENSOR_FLAG_COMPUTE) == 0) return false;
        const RemoteBuffer *owner = remote_buffer_of(tensor);
        if (owner == nullptr || &owner->device->session() != &group.members[rank].device->session()) return false;
    }
    return true;
}

// One one-way command to each server; false when the step is ggml's to do.
bool all_reduce_locked(Group *group, ggml_tensor **tensors) {
    if (!members_alive_locked(group) || !step_fits(*group, tensors)) return false;
    const size_t bytes = ggml_nbytes(tensors[0]);
    for (size_t rank = 0; rank < group->members.size(); ++rank) {
        Member &member = group->members[rank];
        RemoteBuffer *owner = remote_buffer_of(tensors[rank]);
        const BufferRange range = owner->range(tensors[rank], 0, bytes);
        owner->note_write(range.offset, range.size, nullptr);
        Status status = member.device->session().post_now<CommAllReduce>({member.comm, range});
        if (!status) {
            // The servers before it wait for it at this step: they fail it at once.
            mark_lost_locked(group, rank, member.device->name() + ": " + status.message());
            log(GGML_LOG_LEVEL_ERROR, "%s: tensor-parallel all-reduce failed: %s", member.device->name().c_str(),
                status.message().c_str());
            return false;
        }
    }
    return true;
}

}  // namespace

void *tensor_parallel_init(ggml_backend_t *backends, size_t n_backends) {
    if (n_backends < 2 || n_backends > PeerExchange::kMaxRanks) return nullptr;
    auto group = std::make_unique<Group>();
    if (!gather_members(backends, n_backends, &group->members)) return nullptr;
    if (!choose_route(group->members, &group->over_links)) return nullptr;
    if (Status status = join(group.get()); !status) {
        log(GGML_LOG_LEVEL_WARN, "tensor parallelism: %s; partial results go through this process",
            status.message().c_str());
        leave(group.get());
        return nullptr;
    }
    for (const Member &member : group->members) remote_backend_set_grouped(member.backend, true);
    std::lock_guard<std::mutex> lock(g_groups_mutex);
    g_groups.push_back(group.get());
    ++g_counts.groups;
    return group.release();
}

void tensor_parallel_free(void *opaque) {
    std::unique_ptr<Group> group(static_cast<Group *>(opaque));
    if (group == nullptr) return;
    {
        std::lock_guard<std::mutex> lock(g_groups_mutex);
        g_groups.erase(std::remove(g_groups.begin(), g_groups.end(), group.get()), g_groups.end());
    }
    for (const Member &member : group->members) remote_backend_set_grouped(member.backend, false);
    leave(group.get());
}

bool tensor_parallel_allreduce(void *opaque, ggml_tensor **tensors) {
    auto *group = static_cast<Group *>(opaque);
    std::lock_guard<std::mutex> lock(g_groups_mutex);
    const bool done = all_reduce_locked(group, tensors);
    ++(done ? g_counts.by_servers : g_counts.left_to_ggml);
    return done;
}

TensorParallelCounts tensor_parallel_counts() {
    std::lock_guard<std::mutex> lock(g_groups_mutex);
    return g_counts;
}

void tensor_parallel_member_failed(const RemoteDevice *device, const Status &why) {
    std::lock_guard<std::mutex> lock(g_groups_mutex);
    for (Group *group : g_groups) {
        for (size_t rank = 0; rank < group->members.size(); ++rank) {
            if (group->members[rank].device == device) {
                mark_lost_locked(group, rank, device->name() + ": " + why.message());
            }
        }
    }
}

bool tensor_parallel_compute_refused(const RemoteDevice *device, std::string *why) {
    std::lock_guard<std::mutex> lock(g_groups_mutex);
    for (Group *group : g_groups) {
        if (group->failure_to_report.empty()) continue;
        for (const Member &member : group->members) {
            if (member.device != device) continue;
            *why = std::exchange(group->failure_to_report, std::string());
            return true;
        }
    }
    return false;
}

}  // namespace ggml_remote::guest
