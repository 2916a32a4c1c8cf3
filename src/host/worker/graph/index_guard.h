// Indexes that a kernel follows (row ids, expert ids, sequence ids) are data: the
// guest writes them, or a node of its graph computes them. Over shm: and ivshmem:
// that data lies in memory the guest can rewrite at any moment, so a check that
// reads it and a kernel that reads it again may see two different values.
//
// The guard makes the check and the kernel read the same bytes: each such source
// is gathered, element by element, into a dense copy in the worker's own memory,
// every index of the copy is checked, and the node's source is that copy for good
// (a private tensor in its src[]). Indexes that an earlier node of the graph
// writes are gathered when that node is done: the compute stops just before the
// node that reads them (the graph is computed in segments), never before.
#pragma once

#include <ggml-backend.h>
#include <ggml.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "protocol/status.h"

namespace ggml_remote::host {

// The source of `node` whose elements its ggml-cpu kernel follows as indexes, and
// the bound each must stay under ([0, bound)). bound -1: a source copied but not
// checked (ARGSORT's values, which std::sort compares many times over). False for
// ops that follow no data. Each op's row in the op table declares these
// (ops/op_entry.h: following_indexes, holding_values_still).
bool data_dependent_source(const ggml_tensor *node, int *source, int64_t *bound);

// The same checks for a graph computed at once, without a copy: for callers whose
// memory nobody else writes (the op-rule oracle). Indexes that a node of the graph
// writes are refused here, since they cannot be checked before the compute.
Status check_data_indexes(ggml_cgraph *graph);

class IndexGuard {
  public:
    IndexGuard() = default;
    IndexGuard(IndexGuard &&) noexcept = default;
    IndexGuard &operator=(IndexGuard &&) noexcept = default;

    // Whether the guest can write a buffer's memory while the worker computes
    // (shm: memory files, the ivshmem region's heap, a file the guest mapped).
    using GuestWritable = std::function<bool(const ggml_backend_buffer *)>;

    // Once, when the graph is built: gives each node with data-dependent reads in
    // CPU memory a private copy of that source, and finds where each copy is made.
    // Nodes not flagged to be computed (GGML_TENSOR_FLAG_COMPUTE) are left alone:
    // ggml-cpu skips them, and their indexes need not be valid.
    // Indexes are copied wherever they lie; ARGSORT's values only from memory the
    // guest can write. Refuses SSM_SCAN sequence ids outside CPU memory (nothing
    // could check them) or fewer than its sequences.
    Status plan(ggml_cgraph *graph, const GuestWritable &guest_writable);
    // Whether the graph has any such read.
    bool empty() const { return reads_.empty(); }
    // Gathers and checks the copies due before the compute starts.
    Status check_at_start() { return check_before(0); }
    // Computes the graph (in segments when some indexes are computed by the graph
    // itself, gathering and checking those between segments). A failed check
    // stops the compute: GGML_STATUS_FAILED, and the reason in *refused.
    ggml_status compute(ggml_backend_t backend, ggml_cgraph *graph, Status *refused);
    // How many segments a compute runs in (1 when none are needed).
    size_t segments() const { return segments_.empty() ? 1 : segments_.size(); }

  private:
    struct Read {
        ggml_tensor *node = nullptr;
        int source = 0;
        ggml_tensor *guest = nullptr;  // the source as the guest described it
        int64_t bound = 0;
        int at = 0;                         // gathered before node `at` computes
        std::unique_ptr<ggml_tensor> copy;  // the node's source from now on
        std::vector<uint8_t> bytes;         // its elements, dense
    };
    struct ContextFree {
        void operator()(ggml_context *context) const { ggml_free(context); }
    };

    Status check_before(int at);
    void add_read(ggml_tensor *node, int source, int64_t bound, int at);
    bool build_segments(ggml_cgraph *graph);

    std::vector<Read> reads_;  // ordered by `at`
    std::vector<int> stops_;   // nodes (> 0) before which the compute stops, ascending
    std::unique_ptr<ggml_context, ContextFree> segment_context_;
    std::vector<ggml_cgraph *> segments_;  // empty: the graph is computed whole
};

}  // namespace ggml_remote::host
