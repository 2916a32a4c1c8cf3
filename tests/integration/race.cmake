# The double fetch over shared memory (docs/SECURITY.md): a guest whose racer thread
# rewrites every data-dependent input during computes, over shm: and ivshmem:
# (race_client.cpp). RACE_SECONDS (per transport, default 4) makes a longer run.
add_executable(ggml-remote-race-client ${CMAKE_CURRENT_LIST_DIR}/race_client.cpp)
target_link_libraries(ggml-remote-race-client PRIVATE ggml_all Threads::Threads)

add_integration_test(race_shm race.sh shm $<TARGET_FILE:ggml-remote-race-client>)
add_integration_test(race_ivshmem race.sh ivshmem $<TARGET_FILE:ggml-remote-race-client>)
# make sanitize runs them too (label race), with a sanitized server and plugin.
set_tests_properties(race_shm race_ivshmem PROPERTIES LABELS "integration;race")
