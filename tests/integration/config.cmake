# The server's configuration: --config FILE, and the log's format.
add_integration_test(config_file config_file.sh)
add_integration_test(logs_json logs_json.sh)
# Issue 40, class 3: FIFOs and other special files where the server reads a file.
add_integration_test(special_files special_files.sh)
