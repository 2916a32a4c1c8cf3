// `ggml-remote-server status`: asks a running server for its devices and sessions.
#pragma once

int run_status_command(int argc, char **argv);
