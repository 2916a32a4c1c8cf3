# The --metrics endpoint (issue 15): Prometheus' text format, figures that move with
# what guests do, refusals by reason, and a scraper that cannot hold up the listener.
add_integration_test(metrics metrics.sh $<TARGET_FILE:ggml-remote-handshake-client>
  $<TARGET_FILE:ggml-remote-memory-client> $<TARGET_FILE:ggml-remote-async-client>)
