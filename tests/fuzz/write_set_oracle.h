// The write-set oracle: proves the op rule table instead of trusting it.
//
// ASan sees nothing inside ggml-cpu (it is not instrumented), so a kernel that
// writes past the bytes validation allowed would go unnoticed. Before a validated
// graph is computed, the oracle copies every buffer the graph touches; afterwards
// it checks that no byte changed outside the spans of the graph's results (and of
// the sources their op writes in place, op_validation.h). A stray write inside a
// buffer shows up here; one past a buffer's end faults on the guard pages every
// host mapping has (transport/shared_memory.h).
#pragma once

#include <ggml-backend.h>
#include <ggml.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "compute_gate.h"
#include "host/worker/graph/op_validation.h"

namespace ggml_remote::fuzz {

class WriteSetOracle {
  public:
    // Copies the buffers `graph` touches and notes the bytes it may write.
    void before(const ggml_cgraph *graph) {
        snapshots_.clear();
        allowed_.clear();
        auto *g = const_cast<ggml_cgraph *>(graph);
        for (int i = 0; i < ggml_graph_n_nodes(g); ++i) {
            const ggml_tensor *node = ggml_graph_node(g, i);
            note(node);
            for (int s = 0; s < GGML_MAX_SRC; ++s) note(node->src[s]);
            if (writes_nothing(node->op)) continue;
            allowed_.push_back(address_range(node));
            const uint32_t in_place = host::sources_written_in_place(node->op);
            for (int s = 0; s < GGML_MAX_SRC; ++s) {
                if ((in_place >> s) & 1u && node->src[s] != nullptr) allowed_.push_back(address_range(node->src[s]));
            }
        }
    }

    // Empty when every changed byte lies in the write set; otherwise the first one.
    std::string after(const ggml_cgraph *graph) const {
        for (const Snapshot &snapshot : snapshots_) {
            const auto *now = static_cast<const uint8_t *>(snapshot.base);
            for (size_t i = 0; i < snapshot.bytes.size(); ++i) {
                if (now[i] == snapshot.bytes[i] || allowed(reinterpret_cast<uintptr_t>(now + i))) continue;
                return "byte " + std::to_string(i) + " of a " + std::to_string(snapshot.bytes.size()) +
                       "-byte buffer changed outside the write set of a graph whose first node is " +
                       describe_first_node(graph);
            }
        }
        return {};
    }

  private:
    struct Snapshot {
        const void *base;
        std::vector<uint8_t> bytes;
    };

    void note(const ggml_tensor *t) {
        if (t == nullptr || t->buffer == nullptr) return;
        const void *base = ggml_backend_buffer_get_base(t->buffer);
        for (const Snapshot &snapshot : snapshots_) {
            if (snapshot.base == base) return;
        }
        if (!ggml_backend_buffer_is_host(t->buffer)) return;
        const auto *bytes = static_cast<const uint8_t *>(base);
        snapshots_.push_back({base, std::vector<uint8_t>(bytes, bytes + ggml_backend_buffer_get_size(t->buffer))});
    }

    bool allowed(uintptr_t address) const {
        for (const AddressRange &range : allowed_) {
            if (range.begin <= address && address < range.end) return true;
        }
        return false;
    }

    static std::string describe_first_node(const ggml_cgraph *graph) {
        auto *g = const_cast<ggml_cgraph *>(graph);
        if (ggml_graph_n_nodes(g) == 0) return "(none)";
        const ggml_tensor *node = ggml_graph_node(g, 0);
        return std::string(ggml_op_desc(node)) + " '" + node->name + "'";
    }

    std::vector<Snapshot> snapshots_;
    std::vector<AddressRange> allowed_;
};

}  // namespace ggml_remote::fuzz
