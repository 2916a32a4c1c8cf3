# ggml-remote-rtt to a buffer of a GPU backend's device (issue 17: Vulkan0 on
# lavapipe), beside the local device; the bytes read back are checked.
add_integration_test(rtt_vulkan rtt_vulkan.sh)
# Its arguments: a bad --device or ROUND_TRIPS is refused, not read as 0.
add_integration_test(rtt_arguments rtt_arguments.sh)
