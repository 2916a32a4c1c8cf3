#include "host/worker/graph/graph_builder.h"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <string>
#include <vector>

#include "host/worker/graph/op_validation.h"
#include "protocol/printable.h"

namespace ggml_remote::host {

using protocol::TensorList;
using protocol::WireTensor;

namespace {

Status bad(size_t index, const WireTensor &t, const std::string &what) {
    return error(Code::bad_request,
                 "tensor " + std::to_string(index) + (t.name[0] ? " '" + printable(t.name) + "'" : "") + ": " + what);
}

// Ops whose result is only another look at their source: they write nothing.
bool is_view_op(int32_t op) {
    return op == GGML_OP_NONE || op == GGML_OP_VIEW || op == GGML_OP_RESHAPE || op == GGML_OP_PERMUTE ||
           op == GGML_OP_TRANSPOSE;
}

// The graph of the guest's nodes, in the guest's order. Built as ggml builds one
// (ggml_build_forward_expand, node by node) so that it counts each tensor's uses:
// backends fuse consecutive ops (RMS_NORM then MUL, on the CPU; many more on GPUs)
// only where an intermediate result has no other user. Tensors computed outside
// this graph are inputs here: leaves, never recomputed. A node list
// that is not in dependency order gets a plain list of nodes, without use counts.
ggml_cgraph *build_graph(const TensorList &list, const std::vector<bool> &is_node, ggml_context *context,
                         const std::vector<ggml_tensor *> &tensors) {
    ggml_cgraph *graph = ggml_new_graph_custom(context, list.tensors.size(), false);
    std::vector<bool> placed(list.tensors.size(), false);
    bool in_order = true;
    for (int32_t index : list.nodes) {
        const WireTensor &w = list.tensors[index];
        for (int s = 0; s < GGML_MAX_SRC && in_order; ++s) {
            if (w.src[s] == protocol::kSelf || (w.src[s] >= 0 && is_node[w.src[s]] && !placed[w.src[s]])) {
                in_order = false;
            }
        }
        if (placed[index] || w.op == GGML_OP_NONE) in_order = false;
        placed[index] = true;
    }
    if (in_order) {
        // While the graph is expanded, a tensor outside it is a bare input: no op
        // (it would be placed as a node), no sources (they would be walked, as deep
        // as a guest cares to chain them). Then each gets back what the guest said.
        std::vector<ggml_tensor> saved(tensors.size());
        for (size_t i = 0; i < tensors.size(); ++i) {
            saved[i] = *tensors[i];
            if (is_node[i]) continue;
            tensors[i]->op = GGML_OP_NONE;
            tensors[i]->flags &= ~GGML_TENSOR_FLAG_PARAM;  // a parameter is placed as a node
            for (ggml_tensor *&source : tensors[i]->src) source = nullptr;
        }
        for (int32_t index : list.nodes) ggml_build_forward_expand(graph, tensors[index]);
        for (size_t i = 0; i < tensors.size(); ++i) {
            tensors[i]->op = saved[i].op;
            // Expanding marks every node to be computed; the guest's flags say which are.
            tensors[i]->flags = saved[i].flags;
            std::copy(std::begin(saved[i].src), std::end(saved[i].src), std::begin(tensors[i]->src));
        }
        if (static_cast<size_t>(ggml_graph_n_nodes(graph)) == list.nodes.size()) return graph;
        ggml_graph_clear(graph);
    }
    for (int32_t index : list.nodes) ggml_graph_add_node(graph, tensors[index]);
    return graph;
}

}  // namespace

Status build_tensors(const TensorList &list, const BufferLookup &lookup, DataPolicy policy, BuiltTensors *built) {
    const size_t n_nodes = list.nodes.size();
    ggml_init_params params{};
    // The graph has room for every tensor: its leaves are listed too.
    params.mem_size = list.tensors.size() * ggml_tensor_overhead() +
                      (n_nodes > 0 ? ggml_graph_overhead_custom(list.tensors.size(), false) : 0) + 1024;
    params.no_alloc = true;
    built->context.reset(ggml_init(params));
    if (!built->context) return error(Code::out_of_memory, "cannot allocate a context for the tensors");
    built->tensors.assign(list.tensors.size(), nullptr);
    std::vector<bool> is_node(list.tensors.size(), false);
    for (int32_t index : list.nodes) is_node[index] = true;
    std::vector<const ggml_backend_buffer *> guest_writable;

    for (size_t i = 0; i < list.tensors.size(); ++i) {
        const WireTensor &w = list.tensors[i];
        ggml_tensor *t = ggml_new_tensor(built->context.get(), static_cast<ggml_type>(w.type), GGML_MAX_DIMS, w.ne);
        if (t == nullptr) return bad(i, w, "cannot create tensor");
        for (int d = 0; d < GGML_MAX_DIMS; ++d) t->nb[d] = w.nb[d];
        t->op = static_cast<ggml_op>(w.op);
        std::memcpy(t->op_params, w.op_params, sizeof(t->op_params));
        t->flags = w.flags;
        for (int s = 0; s < GGML_MAX_SRC; ++s) {
            t->src[s] = w.src[s] >= 0 ? built->tensors[w.src[s]] : w.src[s] == protocol::kSelf ? t : nullptr;
        }
        t->view_src = w.view_src >= 0 ? built->tensors[w.view_src] : nullptr;
        t->view_offs = w.view_offs;
        std::memcpy(t->name, w.name, sizeof(t->name));

        if (w.buffer == 0) {
            if (policy == DataPolicy::required) return bad(i, w, "has no buffer");
        } else {
            if (policy == DataPolicy::none || !lookup) return bad(i, w, "may not name a buffer here");
            BufferView view;
            Status status = lookup(w.buffer, &view);
            if (!status) return bad(i, w, status.message());
            uint64_t span = 0, end = 0;
            if (!protocol::tensor_byte_span(w, &span) || __builtin_add_overflow(w.data_offset, span, &end) ||
                end > view.size) {
                return bad(i, w,
                           "data [" + std::to_string(w.data_offset) + ", +" + std::to_string(span) +
                               ") lies outside its buffer of " + std::to_string(view.size) + " bytes");
            }
            if (!view.writable && is_node[i] && !is_view_op(w.op)) {
                return bad(i, w, "would write into a read-only buffer");
            }
            if (w.view_src >= 0) {
                const WireTensor &source = list.tensors[w.view_src];
                uint64_t expected = 0;
                if (source.buffer != w.buffer || __builtin_add_overflow(source.data_offset, w.view_offs, &expected) ||
                    expected != w.data_offset) {
                    return bad(i, w, "view does not lie at view_offs inside its view_src");
                }
            }
            t->buffer = view.buffer;
            if (view.guest_writable &&
                std::find(guest_writable.begin(), guest_writable.end(), view.buffer) == guest_writable.end()) {
                guest_writable.push_back(view.buffer);
            }
            t->data = static_cast<uint8_t *>(ggml_backend_buffer_get_base(view.buffer)) + w.data_offset;
        }
        built->tensors[i] = t;
    }

    // Every tensor that carries an op, not only the graph's nodes: supports_op and
    // alloc_size hand theirs to the host device too, which reads its sources.
    for (const ggml_tensor *t : built->tensors) {
        if (t->op == GGML_OP_NONE) continue;
        Status status = validate_node(t);
        if (!status) return status;
    }

    if (n_nodes == 0) return Status::success();
    built->graph = build_graph(list, is_node, built->context.get(), built->tensors);
    if (policy != DataPolicy::required) return Status::success();  // nothing is computed
    return built->index_guard.plan(built->graph, [&guest_writable](const ggml_backend_buffer *buffer) {
        return std::find(guest_writable.begin(), guest_writable.end(), buffer) != guest_writable.end();
    });
}

}  // namespace ggml_remote::host
