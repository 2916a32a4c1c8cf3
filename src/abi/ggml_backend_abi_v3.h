// ggml's internal backend interface, API version 3 (Debian libggml 0.27.0).
//
// Debian's libggml-dev ships no ggml-backend-impl.h, so a plugin declares these
// structs itself. The layout follows docs/ggml-abi-v3.md, which verified every
// offset against the machine code of the Debian binaries; the static_asserts below
// pin those offsets so that a careless edit cannot shift them.
#pragma once

#include <ggml-backend.h>
#include <ggml.h>

#include <cstddef>
#include <cstdint>

#define GGML_REMOTE_BACKEND_API_VERSION 3

extern "C" {

struct ggml_backend_graph_optimize_params {
    void (*add_alloc_dep)(void *user_data, struct ggml_tensor *tensor, struct ggml_tensor *until);
    void *user_data;
};

struct ggml_backend_buffer_type_i {
    const char *(*get_name)(ggml_backend_buffer_type_t buft);
    ggml_backend_buffer_t (*alloc_buffer)(ggml_backend_buffer_type_t buft, size_t size);
    ggml_backend_buffer_t (*alloc_buffer_n)(ggml_backend_buffer_type_t buft, struct ggml_tensor **tensors,
                                            int n_tensors);
    size_t (*get_alignment)(ggml_backend_buffer_type_t buft);
    size_t (*get_max_size)(ggml_backend_buffer_type_t buft);
    size_t (*get_alloc_size)(ggml_backend_buffer_type_t buft, const struct ggml_tensor *tensor);
    size_t (*get_alloc_size_n)(ggml_backend_buffer_type_t buft, struct ggml_tensor **tensors, int n_tensors);
    bool (*is_host)(ggml_backend_buffer_type_t buft);
};

struct ggml_backend_buffer_type {
    struct ggml_backend_buffer_type_i iface;
    ggml_backend_dev_t device;
    void *context;
};

struct ggml_backend_buffer_i {
    void (*free_buffer)(ggml_backend_buffer_t buffer);
    void *(*get_base)(ggml_backend_buffer_t buffer);
    enum ggml_status (*init_tensor)(ggml_backend_buffer_t buffer, struct ggml_tensor *tensor);
    void (*memset_tensor)(ggml_backend_buffer_t buffer, struct ggml_tensor *tensor, uint8_t value, size_t offset,
                          size_t size);
    void (*set_tensor)(ggml_backend_buffer_t buffer, struct ggml_tensor *tensor, const void *data, size_t offset,
                       size_t size);
    void (*get_tensor)(ggml_backend_buffer_t buffer, const struct ggml_tensor *tensor, void *data, size_t offset,
                       size_t size);
    void (*set_tensor_2d)(ggml_backend_buffer_t buffer, struct ggml_tensor *tensor, const void *data, size_t offset,
                          size_t size, size_t n_copies, size_t stride_tensor, size_t stride_data);
    void (*get_tensor_2d)(ggml_backend_buffer_t buffer, const struct ggml_tensor *tensor, void *data, size_t offset,
                          size_t size, size_t n_copies, size_t stride_tensor, size_t stride_data);
    bool (*cpy_tensor)(ggml_backend_buffer_t buffer, const struct ggml_tensor *src, struct ggml_tensor *dst);
    void (*clear)(ggml_backend_buffer_t buffer, uint8_t value);
    void (*reset)(ggml_backend_buffer_t buffer);
};

struct ggml_backend_buffer {
    struct ggml_backend_buffer_i iface;
    ggml_backend_buffer_type_t buft;
    void *context;
    size_t size;
    enum ggml_backend_buffer_usage usage;
};

struct ggml_backend_i {
    const char *(*get_name)(ggml_backend_t backend);
    void (*free)(ggml_backend_t backend);
    void (*set_tensor_async)(ggml_backend_t backend, struct ggml_tensor *tensor, const void *data, size_t offset,
                             size_t size);
    void (*get_tensor_async)(ggml_backend_t backend, const struct ggml_tensor *tensor, void *data, size_t offset,
                             size_t size);
    void (*set_tensor_2d_async)(ggml_backend_t backend, struct ggml_tensor *tensor, const void *data, size_t offset,
                                size_t size, size_t n_copies, size_t stride_tensor, size_t stride_data);
    void (*get_tensor_2d_async)(ggml_backend_t backend, const struct ggml_tensor *tensor, void *data, size_t offset,
                                size_t size, size_t n_copies, size_t stride_tensor, size_t stride_data);
    bool (*cpy_tensor_async)(ggml_backend_t backend_src, ggml_backend_t backend_dst, const struct ggml_tensor *src,
                             struct ggml_tensor *dst);
    void (*synchronize)(ggml_backend_t backend);
    ggml_backend_graph_plan_t (*graph_plan_create)(ggml_backend_t backend, const struct ggml_cgraph *cgraph);
    void (*graph_plan_free)(ggml_backend_t backend, ggml_backend_graph_plan_t plan);
    void (*graph_plan_update)(ggml_backend_t backend, ggml_backend_graph_plan_t plan, const struct ggml_cgraph *cgraph);
    enum ggml_status (*graph_plan_compute)(ggml_backend_t backend, ggml_backend_graph_plan_t plan);
    enum ggml_status (*graph_compute)(ggml_backend_t backend, struct ggml_cgraph *cgraph);
    void (*event_record)(ggml_backend_t backend, ggml_backend_event_t event);
    void (*event_wait)(ggml_backend_t backend, ggml_backend_event_t event);
    void (*graph_optimize)(ggml_backend_t backend, struct ggml_cgraph *cgraph,
                           struct ggml_backend_graph_optimize_params *params);
};

struct ggml_backend {
    ggml_guid_t guid;
    struct ggml_backend_i iface;
    ggml_backend_dev_t device;
    void *context;
};

struct ggml_backend_event {
    struct ggml_backend_device *device;
    void *context;
};

struct ggml_backend_device_i {
    const char *(*get_name)(ggml_backend_dev_t dev);
    const char *(*get_description)(ggml_backend_dev_t dev);
    void (*get_memory)(ggml_backend_dev_t dev, size_t *free, size_t *total);
    enum ggml_backend_dev_type (*get_type)(ggml_backend_dev_t dev);
    void (*get_props)(ggml_backend_dev_t dev, struct ggml_backend_dev_props *props);
    ggml_backend_t (*init_backend)(ggml_backend_dev_t dev, const char *params);
    ggml_backend_buffer_type_t (*get_buffer_type)(ggml_backend_dev_t dev);
    ggml_backend_buffer_type_t (*get_host_buffer_type)(ggml_backend_dev_t dev);
    ggml_backend_buffer_t (*buffer_from_host_ptr)(ggml_backend_dev_t dev, void *ptr, size_t size,
                                                  size_t max_tensor_size);
    bool (*supports_op)(ggml_backend_dev_t dev, const struct ggml_tensor *op);
    bool (*supports_buft)(ggml_backend_dev_t dev, ggml_backend_buffer_type_t buft);
    bool (*offload_op)(ggml_backend_dev_t dev, const struct ggml_tensor *op);
    ggml_backend_event_t (*event_new)(ggml_backend_dev_t dev);
    void (*event_free)(ggml_backend_dev_t dev, ggml_backend_event_t event);
    void (*event_synchronize)(ggml_backend_dev_t dev, ggml_backend_event_t event);
};

struct ggml_backend_device {
    struct ggml_backend_device_i iface;
    ggml_backend_reg_t reg;
    void *context;
};

struct ggml_backend_reg_i {
    const char *(*get_name)(ggml_backend_reg_t reg);
    size_t (*get_device_count)(ggml_backend_reg_t reg);
    ggml_backend_dev_t (*get_device)(ggml_backend_reg_t reg, size_t index);
    void *(*get_proc_address)(ggml_backend_reg_t reg, const char *name);
};

struct ggml_backend_reg {
    int api_version;
    struct ggml_backend_reg_i iface;
    void *context;
};

// Exported by libggml-base but declared in no installed header.
GGML_API ggml_backend_buffer_t ggml_backend_buffer_init(ggml_backend_buffer_type_t buft,
                                                        struct ggml_backend_buffer_i iface, void *context, size_t size);

}  // extern "C"

// Offsets verified in docs/ggml-abi-v3.md (x86-64, LP64).
static_assert(sizeof(ggml_backend_buffer_type_i) == 0x40, "buft iface size");
static_assert(offsetof(ggml_backend_buffer_type_i, alloc_buffer_n) == 0x10, "alloc_buffer_n");
static_assert(offsetof(ggml_backend_buffer_type_i, get_alignment) == 0x18, "get_alignment");
static_assert(offsetof(ggml_backend_buffer_type_i, get_alloc_size_n) == 0x30, "get_alloc_size_n");
static_assert(offsetof(ggml_backend_buffer_type_i, is_host) == 0x38, "is_host");
static_assert(offsetof(ggml_backend_buffer_type, device) == 0x40, "buft device");
static_assert(offsetof(ggml_backend_buffer_type, context) == 0x48, "buft context");
static_assert(sizeof(ggml_backend_buffer_type) == 0x50, "buft size");

static_assert(sizeof(ggml_backend_buffer_i) == 0x58, "buffer iface size");
static_assert(offsetof(ggml_backend_buffer_i, cpy_tensor) == 0x40, "cpy_tensor");
static_assert(offsetof(ggml_backend_buffer_i, reset) == 0x50, "reset");
static_assert(offsetof(ggml_backend_buffer, buft) == 0x58, "buffer buft");
static_assert(offsetof(ggml_backend_buffer, context) == 0x60, "buffer context");
static_assert(offsetof(ggml_backend_buffer, size) == 0x68, "buffer size field");
static_assert(offsetof(ggml_backend_buffer, usage) == 0x70, "buffer usage");
static_assert(sizeof(ggml_backend_buffer) == 0x78, "buffer size");

static_assert(sizeof(ggml_backend_i) == 0x80, "backend iface size");
static_assert(offsetof(ggml_backend_i, synchronize) == 0x38, "synchronize");
static_assert(offsetof(ggml_backend_i, graph_compute) == 0x60, "graph_compute");
static_assert(offsetof(ggml_backend_i, graph_optimize) == 0x78, "graph_optimize");
static_assert(offsetof(ggml_backend, iface) == 0x08, "backend iface");
static_assert(offsetof(ggml_backend, device) == 0x88, "backend device");
static_assert(offsetof(ggml_backend, context) == 0x90, "backend context");
static_assert(sizeof(ggml_backend) == 0x98, "backend size");

static_assert(sizeof(ggml_backend_event) == 0x10, "event size");

static_assert(sizeof(ggml_backend_device_i) == 0x78, "device iface size");
static_assert(offsetof(ggml_backend_device_i, buffer_from_host_ptr) == 0x40, "buffer_from_host_ptr");
static_assert(offsetof(ggml_backend_device_i, supports_op) == 0x48, "supports_op");
static_assert(offsetof(ggml_backend_device_i, event_synchronize) == 0x70, "event_synchronize");
static_assert(offsetof(ggml_backend_device, reg) == 0x78, "device reg");
static_assert(offsetof(ggml_backend_device, context) == 0x80, "device context");
static_assert(sizeof(ggml_backend_device) == 0x88, "device size");

static_assert(sizeof(ggml_backend_reg_i) == 0x20, "reg iface size");
static_assert(offsetof(ggml_backend_reg, iface) == 0x08, "reg iface");
static_assert(offsetof(ggml_backend_reg, context) == 0x28, "reg context");
static_assert(sizeof(ggml_backend_reg) == 0x30, "reg size");

static_assert(sizeof(ggml_backend_dev_caps) == 5, "dev caps");
static_assert(sizeof(ggml_backend_dev_props) == 0x38, "dev props");

namespace ggml_remote {

// True when the loaded ggml speaks the backend API these declarations describe:
// its CPU backend's registry (the one backend every ggml build has) says version 3.
inline bool loaded_ggml_matches_abi(int *found_version) {
    *found_version = -1;
    ggml_backend_dev_t cpu = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
    if (cpu == nullptr) return false;
    ggml_backend_reg_t reg = ggml_backend_dev_backend_reg(cpu);
    if (reg == nullptr) return false;
    *found_version = reg->api_version;
    return reg->api_version == GGML_REMOTE_BACKEND_API_VERSION;
}

}  // namespace ggml_remote
