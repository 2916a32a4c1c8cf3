# Memory outside a session's limits: a client that tries (memory_client.cpp), and a
# guest killed in the middle of a long compute.
add_executable(ggml-remote-memory-client ${CMAKE_CURRENT_LIST_DIR}/memory_client.cpp)
target_link_libraries(ggml-remote-memory-client PRIVATE ggml_remote_transport ggml_remote_protocol)

add_integration_test(memory_limits memory_limits.sh $<TARGET_FILE:ggml-remote-memory-client>)
add_integration_test(errors_guest_killed_mid_prompt errors_guest_killed_mid_prompt.sh)
