// LD_PRELOAD shim: loads every ggml backend (the CPU variants, ggml-remote via
// GGML_BACKEND_PATH, ...) before main() runs. llama.cpp's test-export-graph-ops never
// calls ggml_backend_load_all(), so as shipped it stops with "no backends are loaded".
#include <ggml-backend.h>

namespace {

__attribute__((constructor)) void load_all_backends() { ggml_backend_load_all(); }

}  // namespace
