# The server's configuration: --config FILE, and the log's format.
add_integration_test(config_file config_file.sh)
add_integration_test(logs_json logs_json.sh)
