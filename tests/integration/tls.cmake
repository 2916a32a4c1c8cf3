# TLS with a pre-shared key (--tls-psk, tls:// endpoints): llama.cpp's tokens through
# it, and every way of getting the key or the transport wrong.
add_integration_test(llama_tokens_tls llama_tokens.sh tls)
add_integration_test(tls_errors tls_errors.sh)
# A guest's TLS identity with a newline, control bytes or 3000 bytes forges no log line.
add_integration_test(log_injection log_injection.sh)
# tls_keys_per_server: two TLS servers with different keys, each named with its own
# key file in GGML_REMOTE_SERVERS; a wrong one costs that server only.
add_integration_test(tls_keys_per_server tls_keys_per_server.sh)
