// ggml-remote: a ggml backend that forwards the backend interface to a
// ggml-remote-server, in another process or on another machine.
//
// Applications normally load it as a plugin, with no code change:
//   GGML_BACKEND_PATH=/path/to/libggml-remote.so
//   GGML_REMOTE_SERVERS=unix:/run/ggml-remote.sock,tcp://gpu-box:50053
// Each device of each server appears as a ggml device: the first of the i-th server
// in GGML_REMOTE_SERVERS is REMOTE<i>, its others REMOTE<i>.1, REMOTE<i>.2, ...
// (a server that is down leaves a gap; the others keep their names).
#pragma once

#include <ggml-backend.h>

#ifdef __cplusplus
extern "C" {
#endif

// The plugin entry point (also what GGML_BACKEND_PATH loading calls): connects to
// the servers in GGML_REMOTE_SERVERS and returns the registry of their devices.
__attribute__((visibility("default"))) ggml_backend_reg_t ggml_backend_remote_reg(void);

#ifdef __cplusplus
}
#endif
