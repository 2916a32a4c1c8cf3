#include "host/worker/graph/op_replay.h"

#include <csetjmp>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <mutex>

namespace ggml_remote::host {

namespace {

// --- Turning ggml's aborts inside a replay into refusals -----------------------
//
// ggml_abort calls the abort callback and then abort(). While a replay runs on
// this thread, the callback jumps back to it instead. Only ggml's constructors run
// between the jump's two ends (C code that holds no locks and owns nothing but
// objects in the replay's own scratch context), so nothing is left half done.
// A division by a guest's zero inside a constructor (SIGFPE) takes the same way.

thread_local sigjmp_buf *t_replay_jump = nullptr;
thread_local char t_abort_message[256];
ggml_abort_callback_t g_previous_abort_callback = nullptr;

void on_ggml_abort(const char *message) {
    if (t_replay_jump != nullptr) {
        std::snprintf(t_abort_message, sizeof(t_abort_message), "%s", message);
        siglongjmp(*t_replay_jump, 1);
    }
    if (g_previous_abort_callback != nullptr) {
        g_previous_abort_callback(message);
    } else {
        std::fprintf(stderr, "%s\n", message);  // what ggml prints without a callback
    }
}

void on_arithmetic_trap(int signal) {
    if (t_replay_jump != nullptr) {
        std::snprintf(t_abort_message, sizeof(t_abort_message), "arithmetic trap");
        siglongjmp(*t_replay_jump, 1);
    }
    // Not ours: the default action ends the process when the instruction traps again.
    std::signal(signal, SIG_DFL);
}

void install_traps_once() {
    static std::once_flag once;
    std::call_once(once, [] {
        g_previous_abort_callback = ggml_set_abort_callback(on_ggml_abort);
        struct sigaction action{};
        action.sa_handler = on_arithmetic_trap;
        sigemptyset(&action.sa_mask);
        sigaction(SIGFPE, &action, nullptr);
    });
}

std::string shape_text(const ggml_tensor *t) {
    return "[" + std::to_string(t->ne[0]) + ", " + std::to_string(t->ne[1]) + ", " + std::to_string(t->ne[2]) + ", " +
           std::to_string(t->ne[3]) + "] " + ggml_type_name(t->type);
}

// What differs between the guest's node and the constructor's.
std::string compare(const ggml_tensor *node, const ggml_tensor *made) {
    if (made->op != node->op) return "ggml makes a different op from these arguments";
    if (made->type != node->type || !ggml_are_same_shape(made, node)) {
        return "the result " + shape_text(node) + " should be " + shape_text(made);
    }
    if (!ggml_are_same_stride(made, node)) return "the result's strides differ from the ones ggml gives it";
    if (std::memcmp(made->op_params, node->op_params, sizeof(made->op_params)) != 0) {
        return "op_params hold values ggml's constructor does not set";
    }
    for (int i = 0; i < GGML_MAX_SRC; ++i) {
        if (made->src[i] != node->src[i]) return "src[" + std::to_string(i) + "] should not be there";
    }
    // An in-place op (the optimizer steps) writes into its first source.
    if (made->view_src != nullptr && node->data != static_cast<char *>(made->view_src->data) + made->view_offs) {
        return "the result must lie over src[0]";
    }
    return {};
}

struct ScratchContext {
    ggml_context *ctx;
    ScratchContext() {
        ggml_init_params params{};
        params.mem_size = 8 * ggml_tensor_overhead();  // every constructor makes one or two tensors
        params.no_alloc = true;
        ctx = ggml_init(params);
    }
    ~ScratchContext() { ggml_free(ctx); }
    ScratchContext(const ScratchContext &) = delete;
    ScratchContext &operator=(const ScratchContext &) = delete;
};

// Calls `make` with every GGML_ASSERT inside it caught. No object with a
// destructor may live between sigsetjmp and the call: the jump skips them.
ggml_tensor *call_trapped(ops::Constructor make, ggml_context *ctx, const ggml_tensor *node, std::string *why) {
    install_traps_once();
    sigjmp_buf jump;
    ggml_tensor *volatile made = nullptr;
    if (sigsetjmp(jump, 1) == 0) {
        t_replay_jump = &jump;
        made = make(ctx, node);
        t_replay_jump = nullptr;
        return made;
    }
    t_replay_jump = nullptr;
    *why = std::string("ggml refuses these arguments: ") + t_abort_message;
    return nullptr;
}

}  // namespace

std::string replay_constructor(const ggml_tensor *node, ops::Constructor make) {
    std::string why;
    ScratchContext scratch;
    if (scratch.ctx == nullptr) return "out of memory";
    const ggml_tensor *made = call_trapped(make, scratch.ctx, node, &why);
    if (made == nullptr) return why;
    return compare(node, made);
}

}  // namespace ggml_remote::host
