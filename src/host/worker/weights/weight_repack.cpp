#include "host/worker/weights/weight_repack.h"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "ggml.h"

namespace ggml_remote::host {

namespace {

constexpr size_t kMaxRefusalsKept = 4096;

bool reads_a_weight(const ggml_tensor *op) {
    return (op->op == GGML_OP_MUL_MAT || op->op == GGML_OP_MUL_MAT_ID) && op->src[0] != nullptr;
}

// The device's extra buffer types, in the order ggml ranks them (llama.cpp's order).
std::vector<ggml_backend_buffer_type_t> extra_types_of(ggml_backend_dev_t device) {
    std::vector<ggml_backend_buffer_type_t> types;
    if (ggml_backend_dev_type(device) != GGML_BACKEND_DEVICE_TYPE_CPU) return types;
    ggml_backend_reg_t reg = ggml_backend_dev_backend_reg(device);
    auto get_extra = reg != nullptr ? reinterpret_cast<ggml_backend_dev_get_extra_bufts_t>(
                                          ggml_backend_reg_get_proc_address(reg, "ggml_backend_dev_get_extra_bufts"))
                                    : nullptr;
    if (get_extra == nullptr) return types;
    for (ggml_backend_buffer_type_t *type = get_extra(device); type != nullptr && *type != nullptr; ++type) {
        types.push_back(*type);
    }
    return types;
}

// Whether the device computes `op` with its weight in a buffer of `type`: asked
// the way llama.cpp asks, with the weight in an empty buffer of that type.
bool supports_with_weight_in(ggml_backend_dev_t device, ggml_tensor *op, ggml_backend_buffer_type_t type) {
    std::unique_ptr<ggml_backend_buffer, void (*)(ggml_backend_buffer_t)> empty(ggml_backend_buft_alloc_buffer(type, 0),
                                                                                ggml_backend_buffer_free);
    if (!empty) return false;
    ggml_tensor probe = *op->src[0];
    probe.buffer = empty.get();
    probe.extra = nullptr;
    ggml_tensor *weight = op->src[0];
    op->src[0] = &probe;
    const bool supported = ggml_backend_dev_supports_op(device, op);
    op->src[0] = weight;
    return supported;
}

// What names a repacked image in the store: the digest of the bytes it was made
// from and everything its layout depends on: the weight's type and shape, the
// buffer type, the layout ggml-cpu's init_tensor chose (`extra`, named by its place
// in the library that holds it: another build of ggml-cpu, another name) and
// ggml's version. False when the layout has no such name.
bool image_key(const ggml_tensor *weight, const ggml_tensor *copy, ggml_backend_buffer_type_t type,
               protocol::ContentDigest *key) {
    Dl_info library{};
    if (copy->extra == nullptr || ::dladdr(copy->extra, &library) == 0 || library.dli_fname == nullptr) return false;
    const protocol::ContentDigest source = protocol::content_digest(weight->data, ggml_nbytes(weight));
    std::string named = "ggml-remote repacked image 1";
    for (const char *part : {ggml_version(), ggml_commit(), library.dli_fname, ggml_backend_buft_name(type)}) {
        named.append(1, '\0').append(part != nullptr ? part : "");
    }
    const auto append = [&named](const void *bytes, size_t size) {
        named.append(static_cast<const char *>(bytes), size);
    };
    const uintptr_t layout = reinterpret_cast<uintptr_t>(copy->extra) - reinterpret_cast<uintptr_t>(library.dli_fbase);
    append(&layout, sizeof(layout));
    append(&weight->type, sizeof(weight->type));
    append(weight->ne, sizeof(weight->ne));
    append(weight->nb, sizeof(weight->nb));
    append(source.bytes, sizeof(source.bytes));
    *key = protocol::content_digest(named.data(), named.size());
    return true;
}

size_t page_size() { return static_cast<size_t>(::sysconf(_SC_PAGESIZE)); }

}  // namespace

void WeightRepack::ContextDeleter::operator()(ggml_context *context) const { ggml_free(context); }

WeightRepack::~WeightRepack() = default;

int WeightRepack::apply(ggml_backend_dev_t device, ggml_cgraph *graph,
                        const std::function<uint64_t(const ggml_tensor *, uint64_t *)> &source_of,
                        const Charge &charge) {
    if (graph == nullptr) return 0;
    const std::vector<ggml_backend_buffer_type_t> extra_types = extra_types_of(device);
    if (extra_types.empty()) return 0;
    int pointed = 0;
    for (int i = 0; i < ggml_graph_n_nodes(graph); ++i) {
        ggml_tensor *op = ggml_graph_node(graph, i);
        if (!reads_a_weight(op)) continue;
        const ggml_tensor *weight = op->src[0];
        // A weight is a whole tensor as the model file holds it, not a view or a result.
        if (weight->op != GGML_OP_NONE || weight->view_src != nullptr || !ggml_is_contiguous(weight)) continue;
        uint64_t buffer_size = 0;
        const uint64_t buffer = source_of(weight, &buffer_size);
        if (buffer == 0) continue;
        if (ggml_tensor *copy = copy_for(device, extra_types, op, buffer, buffer_size, charge)) {
            op->src[0] = copy;
            ++pointed;
        }
    }
    return pointed;
}

ggml_tensor *WeightRepack::copy_for(ggml_backend_dev_t device,
                                    const std::vector<ggml_backend_buffer_type_t> &extra_types, ggml_tensor *op,
                                    uint64_t buffer, uint64_t buffer_size, const Charge &charge) {
    const ggml_tensor *weight = op->src[0];
    const auto offset =
        static_cast<uint64_t>(static_cast<const uint8_t *>(weight->data) -
                              static_cast<const uint8_t *>(ggml_backend_buffer_get_base(weight->buffer)));
    Key key{buffer, offset, weight->type, std::vector<int64_t>(weight->ne, weight->ne + GGML_MAX_DIMS),
            std::vector<size_t>(weight->nb, weight->nb + GGML_MAX_DIMS)};
    auto found = copies_.find(key);
    if (found != copies_.end()) return found->second->tensor;
    if (refused_.count(key) != 0) return nullptr;
    // A guest can name a weight in endless shapes: remembering refusals is only a
    // shortcut, so it starts over rather than grow without bound.
    if (refused_.size() >= kMaxRefusalsKept) refused_.clear();

    ggml_backend_buffer_type_t chosen = nullptr;
    for (ggml_backend_buffer_type_t type : extra_types) {
        if (supports_with_weight_in(device, op, type)) {
            chosen = type;
            break;
        }
    }
    const size_t size = chosen != nullptr ? ggml_backend_buft_get_alloc_size(chosen, weight) : 0;
    // The copies of one buffer stay within twice its size: a guest that names one
    // weight in many shapes gets no more than that.
    const auto made_so_far = bytes_by_buffer_.find(buffer);
    const uint64_t made = made_so_far != bytes_by_buffer_.end() ? made_so_far->second : 0;
    if (chosen == nullptr || copies_.size() >= max_copies_ || size > 2 * buffer_size || made > 2 * buffer_size - size ||
        !charge(static_cast<int64_t>(size))) {
        refused_.insert(std::move(key));
        return nullptr;
    }
    auto copy = std::make_unique<Copy>();
    ggml_init_params params{ggml_tensor_overhead(), nullptr, true};
    copy->context.reset(ggml_init(params));
    // A page more: the copy starts on a page, so that a shared image's pages fit it.
    copy->buffer.reset(ggml_backend_buft_alloc_buffer(chosen, size + page_size()));
    if (!copy->context || !copy->buffer) {
        charge(-static_cast<int64_t>(size));
        refused_.insert(std::move(key));
        return nullptr;
    }
    ggml_backend_buffer_set_usage(copy->buffer.get(), GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
    copy->tensor = ggml_dup_tensor(copy->context.get(), weight);
    ggml_set_name(copy->tensor, weight->name);
    // The type's init_tensor records how its kernels read the tensor; its set_tensor repacks.
    const auto base = reinterpret_cast<uintptr_t>(ggml_backend_buffer_get_base(copy->buffer.get()));
    void *page_start = reinterpret_cast<void *>((base + page_size() - 1) / page_size() * page_size());
    if (ggml_backend_tensor_alloc(copy->buffer.get(), copy->tensor, page_start) != GGML_STATUS_SUCCESS) {
        charge(-static_cast<int64_t>(size));
        refused_.insert(std::move(key));
        return nullptr;
    }
    copy->source = buffer;
    copy->source_offset = offset;
    copy->source_data = weight->data;
    copy->source_bytes = ggml_nbytes(weight);
    copy->bytes = size;
    fill_copy(copy.get(), weight, chosen);
    bytes_by_buffer_[buffer] += size;
    ggml_tensor *tensor = copy->tensor;
    copies_.emplace(std::move(key), std::move(copy));
    return tensor;
}

void WeightRepack::fill_copy(Copy *copy, const ggml_tensor *weight, ggml_backend_buffer_type_t type) {
    auto *image = static_cast<uint8_t *>(copy->tensor->data);
    protocol::ContentDigest key;
    const bool named = images_ != nullptr && image_key(weight, copy->tensor, type, &key);
    const uint64_t image_size = ggml_nbytes(copy->tensor);  // not the buffer's padding: never written
    if (named && images_->fill(key, image, image_size)) return;
    ggml_backend_tensor_set(copy->tensor, weight->data, 0, ggml_nbytes(weight));
    if (!named) return;
    images_->share(key, image, image_size, {copy->source, copy->source_offset, copy->source_bytes}, [this, copy] {
        copy->stale = true;
        any_stale_ = true;
    });
}

uint64_t WeightRepack::forget(uint64_t buffer) {
    uint64_t freed = 0;
    for (auto it = copies_.begin(); it != copies_.end();) {
        if (it->second->source == buffer) {
            freed += it->second->bytes;
            it = copies_.erase(it);
        } else {
            ++it;
        }
    }
    for (auto it = refused_.begin(); it != refused_.end();) {
        it = std::get<0>(*it) == buffer ? refused_.erase(it) : std::next(it);
    }
    bytes_by_buffer_.erase(buffer);
    return freed;
}

void WeightRepack::written(uint64_t buffer, uint64_t offset, uint64_t size) {
    // Every write over a socket comes here (a token's inputs too): most buffers have no copies.
    if (bytes_by_buffer_.count(buffer) == 0) return;
    for (auto &[key, copy] : copies_) {
        if (copy->source != buffer || offset >= copy->source_offset + copy->source_bytes ||
            copy->source_offset - std::min(copy->source_offset, offset) >= size) {
            continue;
        }
        copy->stale = true;
        any_stale_ = true;
    }
}

void WeightRepack::refresh() {
    if (!any_stale_) return;
    for (auto &[key, copy] : copies_) {
        if (!copy->stale) continue;
        ggml_backend_tensor_set(copy->tensor, copy->source_data, 0, copy->source_bytes);
        copy->stale = false;
    }
    any_stale_ = false;
}

}  // namespace ggml_remote::host
