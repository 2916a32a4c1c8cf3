# ggml's Vulkan backend served to guests (lavapipe here); skipped without a Vulkan device.
add_integration_test(vulkan_llama vulkan_llama.sh)
# --shader-cache: a second session of a tenant loads the pipelines the first compiled.
add_integration_test(vulkan_shader_cache vulkan_shader_cache.sh)
