# llama.cpp guests through ggml-remote-server, and the ways a session can fail.
# Each test is one script in this folder; see the script's header for what it asserts.

# A deliberately wrong peer: speaks only the handshake, with knobs to get it wrong.
add_executable(ggml-remote-handshake-client ${CMAKE_CURRENT_LIST_DIR}/handshake_client.cpp)
target_link_libraries(ggml-remote-handshake-client PRIVATE ggml_remote_transport ggml_remote_protocol)

add_integration_test(llama_tokens_unix llama_tokens.sh unix)
add_integration_test(llama_tokens_tcp llama_tokens.sh tcp)
add_integration_test(llama_tokens_shm llama_tokens.sh shm)
add_integration_test(llama_four_guests llama_four_guests.sh)
add_integration_test(weight_store weight_store.sh)
add_integration_test(weight_store_shared weight_store_shared.sh)
add_integration_test(model_library model_library.sh)
add_integration_test(llama_shared_cores llama_shared_cores.sh)
add_integration_test(llama_plugin_without_servers llama_plugin_without_servers.sh)

add_integration_test(errors_no_server errors_no_server.sh)
add_integration_test(errors_bad_endpoint errors_bad_endpoint.sh)
# device_names: REMOTE<i> is the i-th server of GGML_REMOTE_SERVERS, whichever are down.
add_integration_test(device_names device_names.sh)
add_integration_test(errors_vsock errors_vsock.sh)
add_integration_test(errors_version_mismatch errors_version_mismatch.sh $<TARGET_FILE:ggml-remote-handshake-client>)
add_integration_test(errors_wrong_peer errors_wrong_peer.sh)
add_integration_test(errors_foreign_clients errors_foreign_clients.sh)
add_integration_test(logs_journal logs_journal.sh)
add_integration_test(errors_server_full errors_server_full.sh $<TARGET_FILE:ggml-remote-handshake-client>)
add_integration_test(errors_timeouts errors_timeouts.sh $<TARGET_FILE:ggml-remote-handshake-client>)
add_integration_test(errors_server_killed_worker errors_server_killed.sh worker)
add_integration_test(errors_server_killed_server errors_server_killed.sh server)
add_integration_test(errors_guest_killed errors_guest_killed.sh)
# Issue 40, class 6: a stopped worker is given up after the silence limit, not the reply timeout.
add_integration_test(errors_silent_server_unix errors_silent_server.sh unix)
add_integration_test(errors_silent_server_tcp errors_silent_server.sh tcp)
add_integration_test(errors_silent_server_shm errors_silent_server.sh shm)
add_integration_test(llama_server llama_server.sh)
# `status` and /metrics show each session's weight upload; status --watch.
add_integration_test(status_upload status_upload.sh)

# The listener replaced (SIGUSR2) or killed while llama-server generates.
add_integration_test(listener_restart_shm listener_restart.sh shm restart)
add_integration_test(listener_restart_unix listener_restart.sh unix restart)
add_integration_test(listener_restart_tcp listener_restart.sh tcp restart)
add_integration_test(listener_restart_tls listener_restart.sh tls restart)
add_integration_test(listener_killed listener_restart.sh shm killed)
