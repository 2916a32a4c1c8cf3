# Isolation between processes, and pre-authentication (issue 14, items 3 and 4).

# Key-less TLS clients, idle or dribbling handshake bytes, never keep out a guest with the key.
add_integration_test(tls_preauth tls_preauth.sh $<TARGET_FILE:ggml-remote-handshake-client>)
