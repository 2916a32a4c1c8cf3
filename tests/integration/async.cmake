# The asynchronous stream: ggml's async set/get/copy and events on a remote device,
# and llama.cpp's pipeline parallelism across two servers, which needs them.
add_executable(ggml-remote-async-client ${CMAKE_CURRENT_LIST_DIR}/async_stream_client.cpp)
target_link_libraries(ggml-remote-async-client PRIVATE ggml_all)

add_integration_test(async_stream async_stream.sh $<TARGET_FILE:ggml-remote-async-client>)
add_integration_test(llama_pipeline_unix llama_pipeline.sh unix)
add_integration_test(llama_pipeline_shm llama_pipeline.sh shm)
# llama_tensor_split_{shm,unix,tcp,tls}: -sm tensor over two servers that sum their
# partial results among themselves (tcp, tls: over a connection their listeners
# make); tokens equal ggml's own all-reduce's and the CPU's.
add_integration_test(llama_tensor_split_shm llama_tensor_split.sh shm)
add_integration_test(llama_tensor_split_unix llama_tensor_split.sh unix)
add_integration_test(llama_tensor_split_tcp llama_tensor_split.sh tcp)
add_integration_test(llama_tensor_split_tls llama_tensor_split.sh tls)
# Two "machines": network namespaces joined by a veth pair (skipped without root).
add_integration_test(llama_tensor_split_hosts llama_tensor_split_hosts.sh)
set_tests_properties(llama_tensor_split_hosts PROPERTIES SKIP_RETURN_CODE 77)
# Each runs three servers and three llama.cpp processes: with another test beside
# them on 2 cores they took a minute each, and a llama-completion run beside them
# (theirs or another test's) was seen to end its output a token short. Alone, they
# take 13 s each.
set_tests_properties(llama_tensor_split_shm llama_tensor_split_unix llama_tensor_split_tcp llama_tensor_split_tls
                     llama_tensor_split_hosts PROPERTIES RUN_SERIAL TRUE)
# Raw TCP clients play a hostile peer server (a hello for no group, the magic then
# silence, a wrong hello): each is refused and closed in time, and the server goes on.
add_integration_test(errors_tensor_peer_hostile errors_tensor_peer_hostile.sh)
# A server of the group killed mid-token: the guest fails fast and clearly, both
# servers go on.
add_integration_test(errors_tensor_peer_killed errors_tensor_peer_killed.sh shm)
add_integration_test(errors_tensor_peer_killed_tcp errors_tensor_peer_killed.sh tcp)
