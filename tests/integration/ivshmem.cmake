# The ivshmem transport on the host, without a VM: guests map the server's region
# file (ivshmem:file:PATH). See ivshmem.sh's header for what each asserts.
add_integration_test(ivshmem_llama ivshmem.sh llama)
add_integration_test(ivshmem_whisper ivshmem.sh whisper)
add_integration_test(ivshmem_hostile ivshmem.sh hostile)
# The region file is the listener's own, and a file that shrinks ends only its session
# (issue 25, class 5).
add_integration_test(ivshmem_region_owner ivshmem_files.sh owner)
add_integration_test(ivshmem_region_shrunk_idle ivshmem_files.sh shrunk-idle)
add_integration_test(ivshmem_region_shrunk_attached ivshmem_files.sh shrunk-attached)
