# Isolation between processes, and pre-authentication (issue 14, items 3 and 4).
# worker_probe: a preload that plays an attacker with code running in a worker.
add_library(ggml_remote_worker_probe SHARED ${CMAKE_CURRENT_LIST_DIR}/worker_probe.cpp)
target_link_libraries(ggml_remote_worker_probe PRIVATE ${CMAKE_DL_LIBS})

add_integration_test(worker_isolation worker_isolation.sh $<TARGET_FILE:ggml-remote-handshake-client>
  $<TARGET_FILE:ggml_remote_worker_probe>)

# Key-less TLS clients, idle or dribbling handshake bytes, never keep out a guest with the key.
add_integration_test(tls_preauth tls_preauth.sh $<TARGET_FILE:ggml-remote-handshake-client>)

# --shader-cache: a worker writes its own tenant's shader cache, not another's.
add_integration_test(shader_cache_isolation shader_cache_isolation.sh $<TARGET_FILE:ggml-remote-handshake-client>
  $<TARGET_FILE:ggml_remote_worker_probe>)

# A worker that forges the status board changes nothing a new listener adopts,
# counts or ends (issue 25, class 6).
add_integration_test(listener_board_decoys listener_board.sh decoys $<TARGET_FILE:ggml-remote-handshake-client>
  $<TARGET_FILE:ggml_remote_worker_probe>)
add_integration_test(listener_board_zero listener_board.sh zero $<TARGET_FILE:ggml-remote-handshake-client>
  $<TARGET_FILE:ggml_remote_worker_probe>)

# Paths workers may write, overlapping each other or what others trust, are refused at start.
add_integration_test(config_refused config_refused.sh)

# --weight-store: workers have no access to the store's directory (issue 25, class 3).
add_integration_test(weight_store_isolation weight_store_isolation.sh $<TARGET_FILE:ggml-remote-handshake-client>
  $<TARGET_FILE:ggml_remote_worker_probe>)

# The store's owner, the library and the peer broker in a sandboxed process of their
# own, supervised by the listener (issue 40, class 5).
add_integration_test(services_sandbox services_sandbox.sh $<TARGET_FILE:ggml-remote-handshake-client>
  $<TARGET_FILE:ggml_remote_worker_probe>)
