# whisper.cpp guests (whisper-cli, whisper-bench) through ggml-remote-server, with
# synthetic whisper models (tools/synthetic-whisper). See each script's header for
# what it asserts.
add_integration_test(whisper_cli_unix whisper_cli.sh unix)
add_integration_test(whisper_cli_shm whisper_cli.sh shm)
add_integration_test(whisper_cli_tcp whisper_cli.sh tcp)
add_integration_test(whisper_cli_unix_no_flash_attn whisper_cli.sh unix -nfa)
add_integration_test(whisper_bench_shm whisper_bench.sh shm)
# The same through a server that serves only the host's Vulkan0; skipped where the
# host has no Vulkan device.
add_integration_test(whisper_cli_vulkan whisper_cli_vulkan.sh)
set_tests_properties(whisper_cli_vulkan PROPERTIES SKIP_RETURN_CODE 77)
# Its graphs laid out as on the local Vulkan0 (ggml-vulkan's node order), in seconds.
add_integration_test(whisper_vulkan_schedule whisper_vulkan_schedule.sh)
