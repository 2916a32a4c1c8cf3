# A guest does not trust its server: a server that lies (hostile_server.cpp, in
# front of a real one) must cost llama.cpp only a ggml error, in bounded time.
add_executable(ggml-remote-hostile-server ${CMAKE_CURRENT_LIST_DIR}/hostile_server.cpp)
target_link_libraries(ggml-remote-hostile-server PRIVATE ggml_remote_protocol Threads::Threads)

add_integration_test(errors_hostile_server errors_hostile_server.sh $<TARGET_FILE:ggml-remote-hostile-server>)
