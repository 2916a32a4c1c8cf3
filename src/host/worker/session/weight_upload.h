// WeightUpload: how far a guest has come with uploading its weights, for `status`
// and /metrics (the weights_* figures of session_figures.h).
//
// The guest flags the buffers that hold weights (BufferSetUsage, as llama.cpp
// marks its model's buffers): their size is what its upload is expected to fill.
// Bytes it sends into them (SetTensor, or its writes into shared memory, which it
// reports) are received; bytes the weight store fills instead are found. Once the
// guest computes, its upload is over: a buffer's padding between tensors never
// comes, so from then on what arrived is what was expected. The figures are those
// of the buffers held now: a buffer freed takes its share along.
#pragma once

#include <cstdint>

namespace ggml_remote::host {

// One buffer's share, kept with the buffer.
struct BufferUpload {
    uint64_t received = 0;
    uint64_t found = 0;
    bool weights = false;
    bool settled = false;  // a graph was computed since it was flagged
};

class WeightUpload {
  public:
    // Whether the buffer of `size` bytes holds weights the guest uploads. Its bytes
    // received before count too: a guest may flag its weights only at its first graph.
    void set_weights(BufferUpload *buffer, uint64_t size, bool weights);
    // `bytes` of the guest's, or of the store's, arrived in the buffer. A buffer
    // counts at most its size in all, so that bytes written twice do not make a load
    // look further on than it is.
    void count_received(BufferUpload *buffer, uint64_t size, uint64_t bytes);
    void count_found(BufferUpload *buffer, uint64_t size, uint64_t bytes);
    // The guest computed a graph: the weights buffer's upload is over.
    void settle(BufferUpload *buffer, uint64_t size);
    // Whether a weights buffer awaits settle(): cheap, asked after every compute.
    bool any_unsettled() const { return unsettled_ != 0; }
    // The buffer is freed.
    void forget(const BufferUpload &buffer, uint64_t size);

    uint64_t expected() const { return expected_; }
    uint64_t received() const { return received_; }
    uint64_t found() const { return found_; }

  private:
    // What the buffer adds to expected_: its size, or once settled what arrived.
    static uint64_t expected_of(const BufferUpload &buffer, uint64_t size);
    // Adds what is left of `bytes` after the buffer's earlier counts to *count and,
    // for a weights buffer, to *total.
    void count(BufferUpload *buffer, uint64_t size, uint64_t bytes, uint64_t *count, uint64_t *total);

    uint64_t expected_ = 0;
    uint64_t received_ = 0;
    uint64_t found_ = 0;
    uint64_t unsettled_ = 0;  // weights buffers
};

}  // namespace ggml_remote::host
