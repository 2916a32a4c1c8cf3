# Hostile guests: a client that speaks the protocol to break it (attack_client.cpp),
# against a real server, which must refuse each attack or close that session, never
# lose a worker to a signal, and still serve llama.cpp correctly afterwards.
add_executable(ggml-remote-attack-client ${CMAKE_CURRENT_LIST_DIR}/attack_client.cpp)
target_link_libraries(ggml-remote-attack-client PRIVATE ggml_remote_transport ggml_remote_protocol)

add_integration_test(attacks_unix attacks_refused.sh unix $<TARGET_FILE:ggml-remote-attack-client>)
add_integration_test(attacks_tcp attacks_refused.sh tcp $<TARGET_FILE:ggml-remote-attack-client>)
add_integration_test(attacks_contained attacks_contained.sh $<TARGET_FILE:ggml-remote-attack-client>)

# What an attacker who took over a worker would find: the sandbox, minimal descriptors.
add_integration_test(worker_sandbox worker_sandbox.sh $<TARGET_FILE:ggml-remote-handshake-client>)

# Fairness: one peer (an address, a user) cannot take every session.
add_integration_test(peer_fairness peer_fairness.sh $<TARGET_FILE:ggml-remote-handshake-client>)

# Floods: a peer that connects and hangs up in a loop delays no other peer's guest,
# and starts no more workers than its start budget (flood_client.cpp).
add_executable(ggml-remote-flood-client ${CMAKE_CURRENT_LIST_DIR}/flood_client.cpp)
target_link_libraries(ggml-remote-flood-client PRIVATE ggml_remote_transport ggml_remote_protocol)
add_integration_test(admission_flood admission_flood.sh $<TARGET_FILE:ggml-remote-handshake-client>
                     $<TARGET_FILE:ggml-remote-flood-client>)
