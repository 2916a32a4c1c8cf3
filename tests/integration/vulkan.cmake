# ggml's Vulkan backend served to guests (lavapipe here); skipped without a Vulkan device.
add_integration_test(vulkan_llama vulkan_llama.sh)
