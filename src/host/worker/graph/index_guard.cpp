#include "host/worker/graph/index_guard.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>

#include "host/worker/graph/op_validation.h"
#include "host/worker/graph/ops/checks.h"
#include "host/worker/graph/ops/op_table.h"
#include "protocol/tensor_codec.h"

namespace ggml_remote::host {

namespace {

// Ops whose result is only another look at their source (views): they write nothing.
bool writes_nothing(ggml_op op) {
    const ops::OpEntry *entry = ops::op_entry(op);
    return entry != nullptr && entry->writes_nothing;
}

// Whether ggml-cpu computes `node`: the guest's graph flags the nodes it wants
// computed, and the kernel of a node without the flag never runs (llama.cpp leaves
// a batch's unused branch unflagged, with ids such as -1 in it).
bool computed(const ggml_tensor *node) { return (node->flags & GGML_TENSOR_FLAG_COMPUTE) != 0; }

struct ByteRange {
    uintptr_t begin = 0, end = 0;
    bool overlaps(const ByteRange &other) const { return begin < other.end && other.begin < end; }
};

ByteRange bytes_of(const ggml_tensor *t) {
    uint64_t span = 0;
    if (t->data == nullptr) return {};
    if (!protocol::tensor_byte_span(t, &span)) span = UINT64_MAX / 2;  // validated before; never here
    const auto begin = reinterpret_cast<uintptr_t>(t->data);
    return {begin, begin + span};
}

// Whether `node`'s kernel writes any byte of `range`: its result, and the sources
// its op updates in place (op_validation.h).
bool writes_into(const ggml_tensor *node, const ByteRange &range) {
    if (writes_nothing(node->op) || !computed(node)) return false;
    if (bytes_of(node).overlaps(range)) return true;
    const uint32_t in_place = sources_written_in_place(node->op);
    for (int s = 0; s < GGML_MAX_SRC; ++s) {
        if (((in_place >> s) & 1u) != 0 && node->src[s] != nullptr && bytes_of(node->src[s]).overlaps(range)) {
            return true;
        }
    }
    return false;
}

// The last node before `index` that writes into `t`'s bytes, or -1.
int last_writer(ggml_cgraph *graph, int index, const ggml_tensor *t) {
    const ByteRange range = bytes_of(t);
    for (int j = index - 1; j >= 0; --j) {
        if (writes_into(ggml_graph_node(graph, j), range)) return j;
    }
    return -1;
}

// Copies the elements of `t` (in ne order, whatever its strides) into `out`, dense.
// Each element is read from `t` once, here; nothing reads `t` again.
void gather(const ggml_tensor *t, uint8_t *out) {
    const size_t size = ggml_type_size(t->type);
    const auto *base = static_cast<const uint8_t *>(t->data);
    for (int64_t i3 = 0; i3 < t->ne[3]; ++i3) {
        for (int64_t i2 = 0; i2 < t->ne[2]; ++i2) {
            for (int64_t i1 = 0; i1 < t->ne[1]; ++i1) {
                const uint8_t *row = base + i1 * t->nb[1] + i2 * t->nb[2] + i3 * t->nb[3];
                if (t->nb[0] == size) {
                    std::memcpy(out, row, size * t->ne[0]);
                    out += size * t->ne[0];
                    continue;
                }
                for (int64_t i0 = 0; i0 < t->ne[0]; ++i0, out += size) std::memcpy(out, row + i0 * t->nb[0], size);
            }
        }
    }
}

// The first element of the dense `bytes`, as Index values, outside [0, bound), or -1.
template <class Index>
int64_t first_out_of_range(const std::vector<uint8_t> &bytes, int64_t bound, int64_t *value) {
    const size_t n = bytes.size() / sizeof(Index);
    for (size_t k = 0; k < n; ++k) {
        Index v;
        std::memcpy(&v, bytes.data() + k * sizeof(v), sizeof(v));
        if (v < 0 || v >= bound) return *value = v, static_cast<int64_t>(k);
    }
    return -1;
}

// The same for the index types the kernels read: I32, else I64.
int64_t first_out_of_range(const std::vector<uint8_t> &bytes, ggml_type type, int64_t bound, int64_t *value) {
    return type == GGML_TYPE_I32 ? first_out_of_range<int32_t>(bytes, bound, value)
                                 : first_out_of_range<int64_t>(bytes, bound, value);
}

using ops::node_label;

// Refuses the sources that no copy or check could make safe for the kernel: what
// the op's row says (SSM_SCAN's sequence ids). Other indexes in a GPU backend's own
// memory are left to it: no guest writes that memory during a compute, and its
// kernels are its own.
Status refuse_unreadable(const ggml_tensor *node, const ggml_tensor *guest) {
    const ops::OpEntry *entry = ops::op_entry(node->op);
    if (entry == nullptr || entry->index.refuse == nullptr) return Status::success();
    return entry->index.refuse(node, guest);
}

Status check_range(const ggml_tensor *node, int source, ggml_type type, const std::vector<uint8_t> &bytes,
                   int64_t bound) {
    int64_t value = 0;
    const int64_t k = first_out_of_range(bytes, type, bound, &value);
    if (k < 0) return Status::success();
    return error(Code::bad_request, node_label(node) + "index " + std::to_string(value) + " (element " +
                                        std::to_string(k) + " of src[" + std::to_string(source) + "]) is not in [0, " +
                                        std::to_string(bound) + ")");
}

}  // namespace

Status check_data_indexes(ggml_cgraph *graph) {
    for (int i = 0; i < ggml_graph_n_nodes(graph); ++i) {
        const ggml_tensor *node = ggml_graph_node(graph, i);
        int source = 0;
        int64_t bound = 0;
        if (!computed(node) || !data_dependent_source(node, &source, &bound) || bound < 0) continue;
        const ggml_tensor *ids = node->src[source];
        if (Status s = refuse_unreadable(node, ids); !s) return s;
        if (ids->buffer == nullptr || !ggml_backend_buffer_is_host(ids->buffer)) continue;
        if (last_writer(graph, i, ids) >= 0) {
            return error(Code::bad_request, node_label(node) + "its indexes are written by the graph itself");
        }
        std::vector<uint8_t> bytes(ggml_nelements(ids) * ggml_type_size(ids->type));
        if (!bytes.empty()) gather(ids, bytes.data());
        if (Status s = check_range(node, source, ids->type, bytes, bound); !s) return s;
    }
    return Status::success();
}

bool data_dependent_source(const ggml_tensor *node, int *source, int64_t *bound) {
    const ops::OpEntry *entry = ops::op_entry(node->op);
    if (entry == nullptr || entry->index.source < 0) return false;
    const ops::IndexRead &read = entry->index;
    *source = read.source;
    if (read.values_only) {
        *bound = -1;
    } else {
        const ggml_tensor *t = read.bound.tensor == ops::kResult ? node : node->src[read.bound.tensor];
        *bound = t->ne[read.bound.dim];
    }
    return true;
}

Status IndexGuard::plan(ggml_cgraph *graph, const GuestWritable &guest_writable) {
    const int n = ggml_graph_n_nodes(graph);
    int last_stop = 0;
    for (int i = 0; i < n; ++i) {
        ggml_tensor *node = ggml_graph_node(graph, i);
        int source = 0;
        int64_t bound = 0;
        if (!computed(node) || !data_dependent_source(node, &source, &bound)) continue;
        const ggml_tensor *guest = node->src[source];
        if (Status s = refuse_unreadable(node, guest); !s) return s;
        if (guest->buffer == nullptr || !ggml_backend_buffer_is_host(guest->buffer)) continue;
        if (bound < 0 && !guest_writable(guest->buffer)) continue;  // values that hold still already
        if (ggml_blck_size(guest->type) != 1) continue;             // not ids nor plain values: validation refused it
        const int writer = last_writer(graph, i, guest);
        int at = 0;
        if (writer >= 0) {
            // Computed by the graph: gathered after its last writer, before this node.
            if (last_stop <= writer) {
                last_stop = i;
                stops_.push_back(i);
            }
            at = last_stop;
        }
        add_read(node, source, bound, at);
    }
    std::stable_sort(reads_.begin(), reads_.end(), [](const Read &a, const Read &b) { return a.at < b.at; });
    if (!stops_.empty() && !build_segments(graph)) {
        return error(Code::out_of_memory, "cannot allocate the graph's segments");
    }
    return Status::success();
}

void IndexGuard::add_read(ggml_tensor *node, int source, int64_t bound, int at) {
    Read read;
    read.node = node;
    read.source = source;
    read.guest = node->src[source];
    read.bound = bound;
    read.at = at;
    read.bytes.resize(ggml_nelements(read.guest) * ggml_type_size(read.guest->type));
    // The kernel's view of the source: the guest's shape and type over the dense copy.
    read.copy = std::make_unique<ggml_tensor>(*read.guest);
    ggml_tensor *copy = read.copy.get();
    copy->op = GGML_OP_NONE;
    copy->flags = 0;
    std::fill(std::begin(copy->src), std::end(copy->src), nullptr);
    copy->view_src = nullptr;
    copy->view_offs = 0;
    copy->extra = nullptr;
    copy->data = read.bytes.empty() ? read.guest->data : read.bytes.data();
    copy->nb[0] = ggml_type_size(copy->type);
    for (int d = 1; d < GGML_MAX_DIMS; ++d) copy->nb[d] = copy->nb[d - 1] * copy->ne[d - 1];
    node->src[source] = copy;
    reads_.push_back(std::move(read));
}

bool IndexGuard::build_segments(ggml_cgraph *graph) {
    const int n = ggml_graph_n_nodes(graph);
    std::vector<int> bounds{0};
    bounds.insert(bounds.end(), stops_.begin(), stops_.end());
    bounds.push_back(n);
    size_t size = 1024;
    for (size_t k = 0; k + 1 < bounds.size(); ++k) {
        size += ggml_graph_overhead_custom(bounds[k + 1] - bounds[k], false);
    }
    ggml_init_params params{};
    params.mem_size = size;
    params.no_alloc = true;
    segment_context_.reset(ggml_init(params));
    if (segment_context_ == nullptr) return false;
    // Each segment is a plain list of the graph's nodes: no use counts, so ggml-cpu
    // fuses nothing across or inside it; only graphs with computed indexes pay that.
    for (size_t k = 0; k + 1 < bounds.size(); ++k) {
        ggml_cgraph *segment = ggml_new_graph_custom(segment_context_.get(), bounds[k + 1] - bounds[k], false);
        for (int i = bounds[k]; i < bounds[k + 1]; ++i) ggml_graph_add_node(segment, ggml_graph_node(graph, i));
        segments_.push_back(segment);
    }
    return true;
}

Status IndexGuard::check_before(int at) {
    auto first = std::lower_bound(reads_.begin(), reads_.end(), at, [](const Read &r, int a) { return r.at < a; });
    for (auto read = first; read != reads_.end() && read->at == at; ++read) {
        if (read->bytes.empty()) continue;
        gather(read->guest, read->bytes.data());
        // What is checked below is the copy, which the kernel reads; the compiler
        // may not read the guest's bytes again in its place.
        std::atomic_signal_fence(std::memory_order_seq_cst);
        if (read->bound < 0) continue;
        if (Status s = check_range(read->node, read->source, read->copy->type, read->bytes, read->bound); !s) {
            return s;
        }
    }
    return Status::success();
}

ggml_status IndexGuard::compute(ggml_backend_t backend, ggml_cgraph *graph, Status *refused) {
    if (segments_.empty()) return ggml_backend_graph_compute(backend, graph);
    for (size_t k = 0; k < segments_.size(); ++k) {
        if (k > 0) {
            Status checked = check_before(stops_[k - 1]);
            if (!checked) {
                *refused = checked;
                return GGML_STATUS_FAILED;
            }
        }
        const ggml_status status = ggml_backend_graph_compute(backend, segments_[k]);
        if (status != GGML_STATUS_SUCCESS) return status;
    }
    return GGML_STATUS_SUCCESS;
}

}  // namespace ggml_remote::host
