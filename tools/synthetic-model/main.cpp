// ggml-remote-synthetic-model: writes a llama-architecture GGUF model with
// random weights and a minimal SentencePiece-style ("llama") vocabulary.
//
// The model is useless for language, but it has the exact structure that
// llama.cpp expects, so it loads, runs and generates tokens. It is meant for
// tests and benchmarks that need a real model of a chosen size without
// downloading one. The same flags always produce the same file.
//
// Tensor data is streamed to the file one chunk at a time, so peak memory stays
// small (a few MiB) even for large models.

#include <ggml.h>
#include <gguf.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "common/synthetic_support.h"

using synthetic::fail;
using synthetic::parse_int;
using synthetic::parse_u64;
using synthetic::Rng;

namespace {

// ---------------------------------------------------------------------------
// options

constexpr int64_t kMinVocab = 3 + 256;  // <unk>, <s>, </s> and the 256 byte tokens
constexpr int64_t kMaxVocab = 1 << 22;
constexpr int64_t kMaxDim = 1 << 20;
constexpr int64_t kMaxLayers = 4096;
constexpr int64_t kMaxCtx = int64_t(1) << 30;
constexpr int64_t kMaxExperts = 256;

struct Hparams {
    int64_t n_embd = 64;
    int64_t n_layer = 2;
    int64_t n_head = 4;
    int64_t n_head_kv = 0;  // 0: same as n_head
    int64_t n_ff = 0;       // 0: 2 * n_embd
    int64_t n_vocab = 512;
    int64_t n_ctx = 2048;
    int64_t n_expert = 0;       // > 0: a mixture of experts (Mixtral-style feed-forward)
    int64_t n_expert_used = 0;  // experts each token is routed to
};

struct Preset {
    const char *name;
    Hparams hp;
    const char *about;
};

// n_embd, n_layer, n_head, n_head_kv, n_ff, n_vocab, n_ctx, n_expert, n_expert_used
const Preset kPresets[] = {
    {"tiny", {64, 2, 4, 0, 128, 512, 2048, 0, 0}, "~0.15M parameters (F16 ~0.3 MiB)"},
    {"small", {512, 8, 8, 0, 1024, 8192, 2048, 0, 0}, "~29M parameters (F16 ~56 MiB)"},
    {"mid", {1024, 20, 16, 0, 2816, 32768, 2048, 0, 0}, "~324M parameters (F16 ~618 MiB)"},
    {"moe", {128, 2, 4, 0, 256, 512, 2048, 4, 2}, "~1.05M parameters, 4 experts, 2 used per token (F16 ~2 MiB)"},
};

struct Options {
    std::string output;
    std::string preset;
    std::optional<int64_t> n_embd, n_layer, n_head, n_head_kv, n_ff, n_vocab, n_ctx, n_expert, n_expert_used;
    ggml_type type = GGML_TYPE_F16;
    uint64_t seed = 42;
};

void print_usage(const char *argv0) {
    std::printf(
        "usage: %s [options] -o PATH\n"
        "\n"
        "Writes a llama-architecture GGUF model with random weights and a minimal\n"
        "SentencePiece (\"llama\") vocabulary that llama.cpp can load and run.\n"
        "The same options always produce the same file.\n"
        "\n"
        "options:\n"
        "  -h,  --help              show this help message and exit\n"
        "  -o,  --output PATH       file to write (required)\n"
        "       --preset NAME       start from a preset: tiny, small, mid, moe (see below);\n"
        "                           explicit options override the preset's values\n"
        "       --n-embd N          embedding length (default: 64)\n"
        "       --n-layer N         number of transformer blocks (default: 2)\n"
        "       --n-head N          number of attention heads (default: 4)\n"
        "       --n-head-kv N       number of key/value heads, divides n-head\n"
        "                           (default: same as n-head)\n"
        "       --n-ff N            feed-forward length (default: the preset's value,\n"
        "                           2 * n-embd without a preset)\n"
        "       --n-vocab N         vocabulary size, at least %" PRId64
        " (default: 512)\n"
        "       --n-ctx N           training context length written to the metadata\n"
        "                           (default: 2048)\n"
        "       --experts N         a mixture of N experts in every block's feed-forward\n"
        "                           (Mixtral-style; default: 0, a dense feed-forward)\n"
        "       --experts-used K    experts each token is routed to (default: 2)\n"
        "       --type TYPE         type of the weight matrices: f32, f16, q8_0\n"
        "                           (default: f16); norms are always f32; q8_0 needs\n"
        "                           n-embd and n-ff to be multiples of 32\n"
        "  -s,  --seed N            random seed (default: 42)\n"
        "\n"
        "presets:\n",
        argv0, kMinVocab);
    for (const Preset &p : kPresets) {
        std::printf("  %-6s n_embd %" PRId64 ", n_layer %" PRId64 ", n_head %" PRId64 ", n_ff %" PRId64
                    ", n_vocab %" PRId64 ": %s\n",
                    p.name, p.hp.n_embd, p.hp.n_layer, p.hp.n_head, p.hp.n_ff, p.hp.n_vocab, p.about);
    }
    std::printf(
        "\n"
        "example:\n"
        "  %s --preset small --type q8_0 -o /tmp/small-q8_0.gguf\n",
        argv0);
}

Options parse_args(int argc, char **argv) {
    Options opt;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) {
                fail("missing value for %s", arg);
            }
            return argv[++i];
        };
        if (arg == "-h" || arg == "--help") {
            print_usage(argv[0]);
            std::exit(0);
        } else if (arg == "-o" || arg == "--output") {
            opt.output = value();
            if (opt.output.empty()) {
                fail("empty path for %s", arg);
            }
        } else if (arg == "--preset") {
            opt.preset = value();
            bool known = false;
            for (const Preset &p : kPresets) {
                known = known || opt.preset == p.name;
            }
            if (!known) {
                fail("unknown preset '%s' (expected tiny, small, mid or moe)", opt.preset);
            }
        } else if (arg == "--n-embd") {
            opt.n_embd = parse_int(arg, value(), 1, kMaxDim);
        } else if (arg == "--n-layer") {
            opt.n_layer = parse_int(arg, value(), 1, kMaxLayers);
        } else if (arg == "--n-head") {
            opt.n_head = parse_int(arg, value(), 1, kMaxDim);
        } else if (arg == "--n-head-kv") {
            opt.n_head_kv = parse_int(arg, value(), 1, kMaxDim);
        } else if (arg == "--n-ff") {
            opt.n_ff = parse_int(arg, value(), 1, kMaxDim);
        } else if (arg == "--n-vocab") {
            opt.n_vocab = parse_int(arg, value(), kMinVocab, kMaxVocab);
        } else if (arg == "--n-ctx") {
            opt.n_ctx = parse_int(arg, value(), 1, kMaxCtx);
        } else if (arg == "--experts") {
            opt.n_expert = parse_int(arg, value(), 0, kMaxExperts);
        } else if (arg == "--experts-used") {
            opt.n_expert_used = parse_int(arg, value(), 1, kMaxExperts);
        } else if (arg == "--type") {
            const std::string t = value();
            if (t == "f32" || t == "F32") {
                opt.type = GGML_TYPE_F32;
            } else if (t == "f16" || t == "F16") {
                opt.type = GGML_TYPE_F16;
            } else if (t == "q8_0" || t == "Q8_0") {
                opt.type = GGML_TYPE_Q8_0;
            } else {
                fail("unknown type '%s' for --type (expected f32, f16 or q8_0)", t);
            }
        } else if (arg == "-s" || arg == "--seed") {
            opt.seed = parse_u64(arg, value());
        } else {
            fail("unknown argument: %s", arg);
        }
    }
    if (opt.output.empty()) {
        std::fprintf(stderr, "error: no output file given (-o PATH)\n(use --help for usage)\n");
        std::exit(1);
    }
    return opt;
}

Hparams resolve(const Options &opt) {
    Hparams hp;
    for (const Preset &p : kPresets) {
        if (opt.preset == p.name) {
            hp = p.hp;
        }
    }
    if (opt.n_embd) hp.n_embd = *opt.n_embd;
    if (opt.n_layer) hp.n_layer = *opt.n_layer;
    if (opt.n_head) hp.n_head = *opt.n_head;
    if (opt.n_head_kv) hp.n_head_kv = *opt.n_head_kv;
    if (opt.n_ff) hp.n_ff = *opt.n_ff;
    if (opt.n_vocab) hp.n_vocab = *opt.n_vocab;
    if (opt.n_ctx) hp.n_ctx = *opt.n_ctx;
    if (opt.n_expert) hp.n_expert = *opt.n_expert;
    if (opt.n_expert_used) hp.n_expert_used = *opt.n_expert_used;
    if (hp.n_expert > 0 && hp.n_expert_used == 0) hp.n_expert_used = std::min<int64_t>(2, hp.n_expert);
    if (hp.n_head_kv == 0) {
        hp.n_head_kv = hp.n_head;
    }
    if (hp.n_ff == 0) {  // no preset and no --n-ff
        hp.n_ff = 2 * hp.n_embd;
    }

    auto bad = [](const char *fmt, int64_t a, int64_t b) {
        std::fprintf(stderr, "error: ");
        std::fprintf(stderr, fmt, a, b);
        std::fprintf(stderr, "\n(use --help for usage)\n");
        std::exit(1);
    };
    if (hp.n_embd % hp.n_head != 0) {
        bad("n-embd (%" PRId64 ") must be a multiple of n-head (%" PRId64 ")", hp.n_embd, hp.n_head);
    }
    if ((hp.n_embd / hp.n_head) % 2 != 0) {
        bad("head size n-embd / n-head (%" PRId64 " / %" PRId64 ") must be even for RoPE", hp.n_embd, hp.n_head);
    }
    if (hp.n_expert_used > hp.n_expert) {
        bad("experts-used (%" PRId64 ") must not exceed experts (%" PRId64 ")", hp.n_expert_used, hp.n_expert);
    }
    if (hp.n_head % hp.n_head_kv != 0) {
        bad("n-head (%" PRId64 ") must be a multiple of n-head-kv (%" PRId64 ")", hp.n_head, hp.n_head_kv);
    }
    if (opt.type == GGML_TYPE_Q8_0) {
        const int64_t blk = ggml_blck_size(GGML_TYPE_Q8_0);
        if (hp.n_embd % blk != 0) {
            bad("--type q8_0 needs rows that are a multiple of %" PRId64 " elements, but n-embd is %" PRId64, blk,
                hp.n_embd);
        }
        if (hp.n_ff % blk != 0) {
            bad("--type q8_0 needs rows that are a multiple of %" PRId64 " elements, but n-ff is %" PRId64, blk,
                hp.n_ff);
        }
    }
    return hp;
}

// ---------------------------------------------------------------------------
// deterministic random numbers (xoshiro256**, seeded with splitmix64), so the
// output does not depend on the standard library's distributions

// vocabulary

enum TokenType : int32_t {  // values of tokenizer.ggml.token_type
    TOKEN_NORMAL = 1,
    TOKEN_UNKNOWN = 2,
    TOKEN_CONTROL = 3,
    TOKEN_BYTE = 6,
};

struct Vocab {
    std::vector<std::string> tokens;
    std::vector<float> scores;
    std::vector<int32_t> types;
};

// "▁" (U+2581), SentencePiece's word-boundary marker
const std::string kSpace = "\xe2\x96\x81";

Vocab build_vocab(int64_t n_vocab) {
    Vocab v;
    std::unordered_set<std::string> seen;
    auto add = [&](const std::string &text, float score, int32_t type) {
        if (int64_t(v.tokens.size()) >= n_vocab || !seen.insert(text).second) {
            return;
        }
        v.tokens.push_back(text);
        v.scores.push_back(score);
        v.types.push_back(type);
    };
    add("<unk>", 0.0f, TOKEN_UNKNOWN);
    add("<s>", 0.0f, TOKEN_CONTROL);
    add("</s>", 0.0f, TOKEN_CONTROL);
    for (int b = 0; b < 256; ++b) {
        char buf[8];
        std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
        add(buf, 0.0f, TOKEN_BYTE);
    }
    // Normal pieces. The SPM tokenizer builds pieces by merging adjacent pieces
    // that are in the vocabulary, so every piece is added after its prefix
    // without the last character: then every piece is reachable. Earlier pieces
    // get higher scores (merged first).
    auto add_normal = [&](const std::string &text) { add(text, -float(v.tokens.size()), TOKEN_NORMAL); };
    add_normal(kSpace);
    for (int c = 0x21; c < 0x7f; ++c) {
        add_normal(std::string(1, char(c)));
    }
    static const char *const words[] = {
        "Hello", "world", "the",   "a",      "of",   "and",   "to",    "in",     "is",      "it",   "that",  "was",
        "for",   "on",    "with",  "as",     "I",    "you",   "he",    "she",    "we",      "they", "be",    "at",
        "by",    "this",  "have",  "from",   "or",   "one",   "had",   "not",    "but",     "what", "all",   "were",
        "when",  "there", "can",   "an",     "your", "which", "their", "said",   "if",      "do",   "will",  "each",
        "about", "how",   "up",    "out",    "many", "then",  "them",  "so",     "some",    "her",  "would", "make",
        "like",  "him",   "into",  "time",   "has",  "look",  "two",   "more",   "write",   "go",   "see",   "number",
        "no",    "way",   "could", "people", "my",   "than",  "first", "water",  "been",    "call", "who",   "its",
        "now",   "find",  "long",  "down",   "day",  "did",   "get",   "come",   "made",    "may",  "part",  "hello",
        "World", "The",   "A",     "It",     "In",   "model", "token", "remote", "backend", "test",
    };
    for (const char *w : words) {
        const std::string piece = kSpace + w;
        // all prefixes of "▁word" that are longer than one character
        for (size_t n = kSpace.size() + 1; n <= piece.size(); ++n) {
            add_normal(piece.substr(0, n));
        }
    }
    // Fill the rest with lowercase strings of growing length, with and
    // without the word marker. Enumerating by length keeps prefixes first.
    std::vector<std::string> level = {""};
    while (int64_t(v.tokens.size()) < n_vocab) {
        std::vector<std::string> next;
        next.reserve(level.size() * 26);
        for (const std::string &s : level) {
            for (char c = 'a'; c <= 'z'; ++c) {
                next.push_back(s + c);
            }
        }
        for (const std::string &s : next) {
            add_normal(kSpace + s);
            add_normal(s);
            if (int64_t(v.tokens.size()) >= n_vocab) {
                break;
            }
        }
        level.swap(next);
    }
    return v;
}

// ---------------------------------------------------------------------------
// tensors

enum class Init { Ones, Uniform };

struct TensorSpec {
    std::string name;
    int64_t ne0;  // row length (fan-in for matrices)
    int64_t ne1;  // rows (1 for vectors)
    ggml_type type;
    Init init;
    float stddev;
    int64_t n_quiet_rows = 0;  // rows [0, n) get 1/10 of stddev
    int64_t ne2 = 1;           // matrices (experts) in a 3-D tensor
};

std::vector<TensorSpec> tensor_specs(const Hparams &hp, ggml_type wtype) {
    const int64_t head_dim = hp.n_embd / hp.n_head;
    const int64_t n_q = hp.n_head * head_dim;
    const int64_t n_kv = hp.n_head_kv * head_dim;
    auto inv_sqrt = [](int64_t n) { return 1.0f / std::sqrt(float(n)); };

    std::vector<TensorSpec> t;
    // The embedding rows have unit variance; every block starts with an RMS
    // norm, so the scale of the residual stream does not matter much.
    t.push_back({"token_embd.weight", hp.n_embd, hp.n_vocab, wtype, Init::Uniform, 1.0f});
    for (int64_t il = 0; il < hp.n_layer; ++il) {
        const std::string p = "blk." + std::to_string(il) + ".";
        t.push_back({p + "attn_norm.weight", hp.n_embd, 1, GGML_TYPE_F32, Init::Ones, 0.0f});
        t.push_back({p + "attn_q.weight", hp.n_embd, n_q, wtype, Init::Uniform, inv_sqrt(hp.n_embd)});
        t.push_back({p + "attn_k.weight", hp.n_embd, n_kv, wtype, Init::Uniform, inv_sqrt(hp.n_embd)});
        t.push_back({p + "attn_v.weight", hp.n_embd, n_kv, wtype, Init::Uniform, inv_sqrt(hp.n_embd)});
        t.push_back({p + "attn_output.weight", n_q, hp.n_embd, wtype, Init::Uniform, inv_sqrt(n_q)});
        t.push_back({p + "ffn_norm.weight", hp.n_embd, 1, GGML_TYPE_F32, Init::Ones, 0.0f});
        if (hp.n_expert == 0) {
            t.push_back({p + "ffn_gate.weight", hp.n_embd, hp.n_ff, wtype, Init::Uniform, inv_sqrt(hp.n_embd)});
            t.push_back({p + "ffn_down.weight", hp.n_ff, hp.n_embd, wtype, Init::Uniform, inv_sqrt(hp.n_ff)});
            t.push_back({p + "ffn_up.weight", hp.n_embd, hp.n_ff, wtype, Init::Uniform, inv_sqrt(hp.n_embd)});
        } else {
            // The router is F32 in real MoE models; its logits of ~1 make the routing
            // differ from token to token.
            t.push_back(
                {p + "ffn_gate_inp.weight", hp.n_embd, hp.n_expert, GGML_TYPE_F32, Init::Uniform, inv_sqrt(hp.n_embd)});
            t.push_back({p + "ffn_gate_exps.weight", hp.n_embd, hp.n_ff, wtype, Init::Uniform, inv_sqrt(hp.n_embd), 0,
                         hp.n_expert});
            t.push_back({p + "ffn_down_exps.weight", hp.n_ff, hp.n_embd, wtype, Init::Uniform, inv_sqrt(hp.n_ff), 0,
                         hp.n_expert});
            t.push_back({p + "ffn_up_exps.weight", hp.n_embd, hp.n_ff, wtype, Init::Uniform, inv_sqrt(hp.n_embd), 0,
                         hp.n_expert});
        }
    }
    t.push_back({"output_norm.weight", hp.n_embd, 1, GGML_TYPE_F32, Init::Ones, 0.0f});
    // Logits with a standard deviation of ~2 make greedy and sampled output
    // depend on the context instead of being nearly uniform. The rows of the
    // special and byte tokens are damped so that generation stays in readable
    // word pieces and rarely stops early at </s>.
    t.push_back({"output.weight", hp.n_embd, hp.n_vocab, wtype, Init::Uniform, 2.0f * inv_sqrt(hp.n_embd), kMinVocab});
    return t;
}

bool write_zeros(FILE *f, size_t n) {
    static const char zeros[256] = {};
    while (n > 0) {
        const size_t k = n < sizeof(zeros) ? n : sizeof(zeros);
        if (std::fwrite(zeros, 1, k, f) != k) {
            return false;
        }
        n -= k;
    }
    return true;
}

// Generates one tensor chunk by chunk and appends it to f.
bool write_tensor(FILE *f, const TensorSpec &ts, uint64_t seed, std::vector<float> &src, std::vector<uint8_t> &dst) {
    constexpr int64_t kChunkElems = int64_t(1) << 20;
    const int64_t rows_per_chunk = std::max<int64_t>(1, kChunkElems / ts.ne0);
    // uniform in [-a, a) has standard deviation a / sqrt(3)
    const float amp = ts.stddev * std::sqrt(3.0f);
    Rng rng(seed, ts.name);

    const int64_t total_rows = ts.ne1 * ts.ne2;
    for (int64_t r0 = 0; r0 < total_rows; r0 += rows_per_chunk) {
        const int64_t nrows = std::min(rows_per_chunk, total_rows - r0);
        const size_t n = size_t(nrows * ts.ne0);
        src.resize(n);
        if (ts.init == Init::Ones) {
            std::fill(src.begin(), src.end(), 1.0f);
        } else {
            for (int64_t r = 0; r < nrows; ++r) {
                const float a = r0 + r < ts.n_quiet_rows ? 0.1f * amp : amp;
                float *row = src.data() + r * ts.ne0;
                for (int64_t c = 0; c < ts.ne0; ++c) {
                    row[c] = a * rng.symmetric();
                }
            }
        }
        const void *data = src.data();
        size_t bytes = n * sizeof(float);
        if (ts.type == GGML_TYPE_F16) {
            dst.resize(n * sizeof(ggml_fp16_t));
            ggml_fp32_to_fp16_row(src.data(), reinterpret_cast<ggml_fp16_t *>(dst.data()), int64_t(n));
            data = dst.data();
            bytes = dst.size();
        } else if (ts.type != GGML_TYPE_F32) {
            dst.resize(size_t(nrows) * ggml_row_size(ts.type, ts.ne0));
            bytes = ggml_quantize_chunk(ts.type, src.data(), dst.data(), 0, nrows, ts.ne0, nullptr);
            data = dst.data();
        }
        if (std::fwrite(data, 1, bytes, f) != bytes) {
            return false;
        }
    }
    return true;
}

const char *type_label(ggml_type t) {
    switch (t) {
        case GGML_TYPE_F32:
            return "F32";
        case GGML_TYPE_F16:
            return "F16";
        case GGML_TYPE_Q8_0:
            return "Q8_0";
        default:
            return ggml_type_name(t);
    }
}

// llama_ftype values for general.file_type
uint32_t file_type(ggml_type t) {
    switch (t) {
        case GGML_TYPE_F32:
            return 0;  // ALL_F32
        case GGML_TYPE_F16:
            return 1;  // MOSTLY_F16
        case GGML_TYPE_Q8_0:
            return 7;  // MOSTLY_Q8_0
        default:
            return 0;
    }
}

void set_general_metadata(gguf_context *gctx, const Options &opt) {
    char name[128];
    std::snprintf(name, sizeof(name), "synthetic-llama%s%s-%s", opt.preset.empty() ? "" : "-", opt.preset.c_str(),
                  type_label(opt.type));
    gguf_set_val_str(gctx, "general.architecture", "llama");
    gguf_set_val_str(gctx, "general.name", name);
    gguf_set_val_str(gctx, "general.description",
                     "random weights written by ggml-remote-synthetic-model; not a language model");
    gguf_set_val_u32(gctx, "general.file_type", file_type(opt.type));
    gguf_set_val_u32(gctx, "general.quantization_version", 2);
    gguf_set_val_u64(gctx, "general.seed", opt.seed);
}

void set_llama_hparams(gguf_context *gctx, const Hparams &hp) {
    gguf_set_val_u32(gctx, "llama.context_length", uint32_t(hp.n_ctx));
    gguf_set_val_u32(gctx, "llama.embedding_length", uint32_t(hp.n_embd));
    gguf_set_val_u32(gctx, "llama.block_count", uint32_t(hp.n_layer));
    gguf_set_val_u32(gctx, "llama.feed_forward_length", uint32_t(hp.n_ff));
    gguf_set_val_u32(gctx, "llama.attention.head_count", uint32_t(hp.n_head));
    gguf_set_val_u32(gctx, "llama.attention.head_count_kv", uint32_t(hp.n_head_kv));
    gguf_set_val_u32(gctx, "llama.rope.dimension_count", uint32_t(hp.n_embd / hp.n_head));
    gguf_set_val_f32(gctx, "llama.rope.freq_base", 10000.0f);
    gguf_set_val_f32(gctx, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    gguf_set_val_u32(gctx, "llama.vocab_size", uint32_t(hp.n_vocab));
    if (hp.n_expert > 0) {
        gguf_set_val_u32(gctx, "llama.expert_count", uint32_t(hp.n_expert));
        gguf_set_val_u32(gctx, "llama.expert_used_count", uint32_t(hp.n_expert_used));
    }
}

void set_tokenizer(gguf_context *gctx, const Vocab &vocab) {
    gguf_set_val_str(gctx, "tokenizer.ggml.model", "llama");
    std::vector<const char *> ptrs;
    ptrs.reserve(vocab.tokens.size());
    for (const std::string &s : vocab.tokens) {
        ptrs.push_back(s.c_str());
    }
    gguf_set_arr_str(gctx, "tokenizer.ggml.tokens", ptrs.data(), ptrs.size());
    gguf_set_arr_data(gctx, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, vocab.scores.data(), vocab.scores.size());
    gguf_set_arr_data(gctx, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, vocab.types.data(), vocab.types.size());
    gguf_set_val_u32(gctx, "tokenizer.ggml.unknown_token_id", 0);
    gguf_set_val_u32(gctx, "tokenizer.ggml.bos_token_id", 1);
    gguf_set_val_u32(gctx, "tokenizer.ggml.eos_token_id", 2);
    gguf_set_val_bool(gctx, "tokenizer.ggml.add_bos_token", true);
    gguf_set_val_bool(gctx, "tokenizer.ggml.add_eos_token", false);
}

// Adds each tensor's info to gctx: the tensors only describe shape and type, they
// hold no data. Returns the context that holds them (nullptr if ggml_init failed).
ggml_context *add_tensor_infos(gguf_context *gctx, const std::vector<TensorSpec> &specs, int64_t *n_params) {
    ggml_init_params ip = {};
    ip.mem_size = (specs.size() + 1) * ggml_tensor_overhead();
    ip.mem_buffer = nullptr;
    ip.no_alloc = true;
    ggml_context *ctx = ggml_init(ip);
    if (ctx == nullptr) {
        return nullptr;
    }
    *n_params = 0;
    for (const TensorSpec &ts : specs) {
        ggml_tensor *t = ts.ne2 > 1    ? ggml_new_tensor_3d(ctx, ts.type, ts.ne0, ts.ne1, ts.ne2)
                         : ts.ne1 == 1 ? ggml_new_tensor_1d(ctx, ts.type, ts.ne0)
                                       : ggml_new_tensor_2d(ctx, ts.type, ts.ne0, ts.ne1);
        ggml_set_name(t, ts.name.c_str());
        gguf_add_tensor(gctx, t);
        *n_params += ts.ne0 * ts.ne1 * ts.ne2;
    }
    return ctx;
}

// Writes the metadata, then every tensor at its offset in the data section;
// *size: the bytes written.
bool write_model(FILE *f, gguf_context *gctx, const std::vector<TensorSpec> &specs, uint64_t seed, size_t *size) {
    // The metadata size includes the padding up to the data section, and the
    // tensor offsets are relative to the start of the data section.
    // (gguf_get_data_offset is only meaningful for a context read from a file.)
    const size_t data_offset = gguf_get_meta_size(gctx);
    const size_t alignment = gguf_get_alignment(gctx);
    bool ok = data_offset % alignment == 0;
    if (ok) {
        std::vector<uint8_t> meta(data_offset);
        gguf_get_meta_data(gctx, meta.data());
        ok = std::fwrite(meta.data(), 1, meta.size(), f) == meta.size();
    }
    size_t pos = data_offset;  // relative to the file start
    std::vector<float> src;
    std::vector<uint8_t> dst;
    for (size_t i = 0; ok && i < specs.size(); ++i) {
        const size_t off = data_offset + gguf_get_tensor_offset(gctx, int64_t(i));
        if (off < pos) {
            std::fprintf(stderr, "error: unexpected tensor offset for %s\n", specs[i].name.c_str());
            ok = false;
            break;
        }
        ok = write_zeros(f, off - pos) && write_tensor(f, specs[i], seed, src, dst);
        pos = off + gguf_get_tensor_size(gctx, int64_t(i));
    }
    if (ok) {
        // pad the last tensor like the other ones
        const size_t end = (pos + alignment - 1) / alignment * alignment;
        ok = write_zeros(f, end - pos);
        pos = end;
    }
    *size = pos;
    return ok;
}

void print_summary(const Options &opt, const Hparams &hp, int64_t n_params, size_t n_tensors, size_t bytes,
                   double secs) {
    std::printf("wrote %s: llama, %s, n_embd %" PRId64 ", n_layer %" PRId64 ", n_head %" PRId64 ", n_head_kv %" PRId64
                ", n_ff %" PRId64 ", n_vocab %" PRId64 ", n_ctx %" PRId64 ", seed %" PRIu64 "\n",
                opt.output.c_str(), type_label(opt.type), hp.n_embd, hp.n_layer, hp.n_head, hp.n_head_kv, hp.n_ff,
                hp.n_vocab, hp.n_ctx, opt.seed);
    if (hp.n_expert > 0) {
        std::printf("  %" PRId64 " experts, %" PRId64 " used per token\n", hp.n_expert, hp.n_expert_used);
    }
    std::printf("  %" PRId64 " parameters (%.2fM), %zu tensors, %zu bytes (%.2f MiB), %.2f s\n", n_params,
                double(n_params) / 1e6, n_tensors, bytes, double(bytes) / (1024.0 * 1024.0), secs);
}

}  // namespace

int main(int argc, char **argv) {
    const Options opt = parse_args(argc, argv);
    const Hparams hp = resolve(opt);
    const auto t_start = std::chrono::steady_clock::now();

    const std::vector<TensorSpec> specs = tensor_specs(hp, opt.type);
    const Vocab vocab = build_vocab(hp.n_vocab);

    gguf_context *gctx = gguf_init_empty();
    set_general_metadata(gctx, opt);
    set_llama_hparams(gctx, hp);
    set_tokenizer(gctx, vocab);
    int64_t n_params = 0;
    ggml_context *ctx = add_tensor_infos(gctx, specs, &n_params);
    if (ctx == nullptr) {
        std::fprintf(stderr, "error: ggml_init failed\n");
        return 1;
    }

    FILE *f = std::fopen(opt.output.c_str(), "wb");
    if (f == nullptr) {
        std::fprintf(stderr, "error: cannot open '%s' for writing: %s\n", opt.output.c_str(), std::strerror(errno));
        return 1;
    }
    size_t size = 0;
    bool ok = write_model(f, gctx, specs, opt.seed, &size);
    if (std::fclose(f) != 0) {
        ok = false;
    }
    ggml_free(ctx);
    gguf_free(gctx);
    ggml_quantize_free();

    if (!ok) {
        std::fprintf(stderr, "error: failed to write '%s': %s\n", opt.output.c_str(), std::strerror(errno));
        std::remove(opt.output.c_str());
        return 1;
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
    print_summary(opt, hp, n_params, specs.size(), size, secs);
    return 0;
}
