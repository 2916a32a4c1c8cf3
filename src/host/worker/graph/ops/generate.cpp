// Ops that generate values from their op_params: ARANGE, TIMESTEP_EMBEDDING, TRI.
// All three are checked by replaying ggml's constructor.
#include "host/worker/graph/ops/checks.h"
#include "host/worker/graph/ops/families.h"

namespace ggml_remote::host::ops {
namespace {

ggml_tensor *make_arange(ggml_context *ctx, const ggml_tensor *node) {
    return ggml_arange(ctx, float_param(node, 0), float_param(node, 1), float_param(node, 2));
}

// op_params = {start, stop, step} as floats.
Why arange_geometry(const ggml_tensor *node) {
    const float start = float_param(node, 0), stop = float_param(node, 1), step = float_param(node, 2);
    // Compared this way, NaN and infinities fail too.
    if (!(step > 0.0f) || !(stop > start) || !((stop - start) / step < float(1 << 30))) {
        return "start, stop and step do not make a range";
    }
    return {};
}

ggml_tensor *make_timestep_embedding(ggml_context *ctx, const ggml_tensor *node) {
    return ggml_timestep_embedding(ctx, src(node, 0), param(node, 0), param(node, 1));
}
Why timestep_embedding_geometry(const ggml_tensor *node) { return params_in_range(node, {0, 1}, {}); }

ggml_tensor *make_tri(ggml_context *ctx, const ggml_tensor *node) {
    return ggml_tri(ctx, src(node, 0), static_cast<ggml_tri_type>(param(node, 0)));
}
Why tri_geometry(const ggml_tensor *node) {
    if (param(node, 0) < GGML_TRI_TYPE_UPPER_DIAG || param(node, 0) > GGML_TRI_TYPE_LOWER) return "unknown triangle";
    return {};
}

constexpr OpEntry kEntries[] = {
    replayed(GGML_OP_ARANGE, 0, "rc", make_arange).with_geometry(arange_geometry),
    replayed(GGML_OP_TIMESTEP_EMBEDDING, 1, "rc", make_timestep_embedding).with_geometry(timestep_embedding_geometry),
    replayed(GGML_OP_TRI, 1, "rc", make_tri).with_geometry(tri_geometry),
};

}  // namespace

const OpFamily kGenerateOps{kEntries};

}  // namespace ggml_remote::host::ops
