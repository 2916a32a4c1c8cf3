// The families of the op table, one per file of ops/: op_table.cpp collects them.
// A new op goes into its family's file; a new family adds a line here and one in
// op_table.cpp.
#pragma once

#include "host/worker/graph/ops/op_entry.h"

namespace ggml_remote::host::ops {

extern const OpFamily kViewOps;             // views.cpp: views and copies
extern const OpFamily kElementwiseOps;      // elementwise.cpp: binary, unary, GLU, scale, fill
extern const OpFamily kNormOps;             // norm.cpp: the normalizations and RMS_NORM_BACK
extern const OpFamily kReduceOps;           // reduce.cpp: sums, argmax, sorting
extern const OpFamily kShapeOps;            // shape.cpp: repeat, concat, diag, pad, roll, upscale
extern const OpFamily kRowOps;              // rows.cpp: GET_ROWS, GET_ROWS_BACK, SET_ROWS
extern const OpFamily kMatrixOps;           // matrix.cpp: MUL_MAT, MUL_MAT_ID, OUT_PROD, SOLVE_TRI
extern const OpFamily kAttentionOps;        // attention.cpp: softmax, masks, flash attention, indexer
extern const OpFamily kRopeOps;             // rope.cpp: ROPE, ROPE_BACK
extern const OpFamily kTrainingOps;         // training.cpp: losses, optimizer steps, SILU_BACK
extern const OpFamily kConvolutionOps;      // convolution.cpp: convolutions, im2col, pooling
extern const OpFamily kRecurrentOps;        // recurrent.cpp: SSM, RWKV, gated linear attention
extern const OpFamily kGenerateOps;         // generate.cpp: ARANGE, TIMESTEP_EMBEDDING, TRI
extern const OpFamily kHyperConnectionOps;  // hyper_connections.cpp: DeepSeek V4's mixing

}  // namespace ggml_remote::host::ops
