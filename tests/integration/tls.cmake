# TLS with a pre-shared key (--tls-psk, tls:// endpoints): llama.cpp's tokens through
# it, and every way of getting the key or the transport wrong.
add_integration_test(llama_tokens_tls llama_tokens.sh tls)
add_integration_test(tls_errors tls_errors.sh)
# A guest's TLS identity with a newline, control bytes or 3000 bytes forges no log line.
add_integration_test(log_injection log_injection.sh)
