#include "protocol/commands.h"

namespace ggml_remote::protocol {

const char *command_name(CommandId id) {
    switch (id) {
        case CommandId::hello: return "hello";
        case CommandId::device_info: return "device_info";
        case CommandId::device_memory: return "device_memory";
        case CommandId::supports_op: return "supports_op";
        case CommandId::alloc_size: return "alloc_size";
        case CommandId::buffer_alloc: return "buffer_alloc";
        case CommandId::buffer_free: return "buffer_free";
        case CommandId::buffer_clear: return "buffer_clear";
        case CommandId::buffer_reset: return "buffer_reset";
        case CommandId::init_tensor: return "init_tensor";
        case CommandId::set_tensor: return "set_tensor";
        case CommandId::set_tensor_2d: return "set_tensor_2d";
        case CommandId::get_tensor: return "get_tensor";
        case CommandId::get_tensor_2d: return "get_tensor_2d";
        case CommandId::memset_tensor: return "memset_tensor";
        case CommandId::copy_tensor: return "copy_tensor";
        case CommandId::backend_init: return "backend_init";
        case CommandId::backend_free: return "backend_free";
        case CommandId::set_n_threads: return "set_n_threads";
        case CommandId::graph_compute: return "graph_compute";
        case CommandId::buffer_from_file: return "buffer_from_file";
        case CommandId::synchronize: return "synchronize";
        case CommandId::server_status: return "server_status";
        case CommandId::buffer_set_usage: return "buffer_set_usage";
        case CommandId::buffer_written: return "buffer_written";
        case CommandId::weight_lookup: return "weight_lookup";
        case CommandId::weight_offer: return "weight_offer";
        case CommandId::count_: break;
    }
    return "unknown";
}

}  // namespace ggml_remote::protocol
