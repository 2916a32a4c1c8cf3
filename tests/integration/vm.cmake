# Guests inside a QEMU virtual machine (scripts/vm/run; KVM where /dev/kvm works,
# TCG otherwise): the VM boots and runs a command, and llama.cpp in it reaches the
# host's server over QEMU's user network.
add_integration_test(vm_boot vm_boot.sh)
add_integration_test(vm_llama_tokens_tcp vm_llama_tokens.sh tcp)
add_integration_test(vm_llama_tokens_tls vm_llama_tokens.sh tls)
# Through ivshmem: the server's region mapped into the VM as a PCI device (see
# vm_ivshmem.sh's header for what each asserts).
add_integration_test(vm_ivshmem_llama vm_ivshmem.sh llama)
add_integration_test(vm_ivshmem_whisper vm_ivshmem.sh whisper)
add_integration_test(vm_ivshmem_killed vm_ivshmem.sh killed)
# Over vsock: QEMU's vhost-user-vsock-pci served by vhost-device-vsock, which
# forwards to the server's unix socket UDS_PATH_PORT; and the server's own
# AF_VSOCK listener over the VM kernel's loopback (vm_vsock.sh's header).
add_integration_test(vm_vsock_llama vm_vsock.sh llama)
add_integration_test(vm_vsock_loopback vm_vsock.sh loopback)
