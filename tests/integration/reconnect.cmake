# The guest reconnects when its connection is lost (issue 19, item 2): a worker
# killed mid-generation over shm (nothing lost) and over TCP (weights come back,
# the KV cache is reported lost), and a server that never comes back.
add_integration_test(reconnect_shm reconnect_shm.sh)
add_integration_test(reconnect_tcp reconnect_tcp.sh)
add_integration_test(reconnect_server_gone reconnect_server_gone.sh)
