# GPU failures reach the guest as errors, not hangs (issue 17): a guest that meets
# the Vulkan device's limits (gpu_failures_client.cpp), and a worker that aborts.
add_executable(ggml-remote-gpu-failures-client ${CMAKE_CURRENT_LIST_DIR}/gpu_failures_client.cpp)
target_link_libraries(ggml-remote-gpu-failures-client PRIVATE ggml_all)

add_integration_test(gpu_failures gpu_failures.sh $<TARGET_FILE:ggml-remote-gpu-failures-client>)
