// GraphRetry: whether a graph whose compute was cut off by a lost connection can
// be run again on a new one and give the same values, and what that needs.
//
// Over shm a CPU device loses nothing with its worker, but the worker may have run
// part of the graph: ggml-alloc lets later nodes reuse the memory of inputs they
// no longer need, and a node may have written persistent memory (a KV cache).
// So the inputs (leaves in compute buffers) are saved before each compute and put
// back before running it again, and a graph is run again only when each of its
// writes into persistent memory is a plain store (SET_ROWS, CPY) of bytes that no
// earlier node read: running it again stores the same values. A recurrent state
// read and then written in place is not; that compute fails instead.
#pragma once

#include <ggml.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ggml_remote::guest {

class GraphRetry {
  public:
    // Plans for `graph` (its nodes in order, as the host runs them).
    void plan(ggml_cgraph *graph);
    void forget() { safe_ = false, inputs_.clear(); }
    bool safe() const { return safe_; }
    // Before each compute of the planned graph: a copy of its inputs.
    void save_inputs();
    // Before running it again: the inputs as they were.
    void restore_inputs();

  private:
    struct Bytes {
        uint8_t *data;
        size_t size;
    };
    bool safe_ = false;
    std::vector<Bytes> inputs_;
    std::vector<uint8_t> saved_;
};

}  // namespace ggml_remote::guest
