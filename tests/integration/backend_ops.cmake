# test-backend-ops through the remote device: the ops of llama.cpp's graphs for
# synthetic models (exported by test-export-graph-ops) plus a selection of ops that
# llama.cpp uses on other paths; once per transport.

# LD_PRELOAD shims for the stock test tools (see each file's header).
add_library(ggml_remote_load_all_backends SHARED ${CMAKE_CURRENT_SOURCE_DIR}/load_all_backends.cpp)
target_link_libraries(ggml_remote_load_all_backends PRIVATE ggml_all)

add_library(ggml_remote_backend_ops_zero_buffers SHARED ${CMAKE_CURRENT_SOURCE_DIR}/backend_ops_zero_buffers.cpp)
target_link_libraries(ggml_remote_backend_ops_zero_buffers PRIVATE ggml_all ${CMAKE_DL_LIBS})

add_integration_test(backend_ops_unix backend_ops.sh unix)
add_integration_test(backend_ops_tcp backend_ops.sh tcp)
# The same through a server that serves only the host's Vulkan0 (a smaller subset);
# skipped where the host has no Vulkan device.
add_integration_test(backend_ops_vulkan backend_ops.sh unix vulkan)
set_tests_properties(backend_ops_vulkan PROPERTIES SKIP_RETURN_CODE 77)
