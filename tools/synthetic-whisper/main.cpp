// ggml-remote-synthetic-whisper: writes a whisper model in whisper.cpp's legacy
// ggml model format ("ggml-tiny.bin" style) with random weights.
//
// The model transcribes nothing useful, but it has the exact structure that
// whisper.cpp expects (encoder, decoder, mel filters, vocabulary with the
// special tokens where whisper.cpp puts them), so whisper-cli and whisper-bench
// load and run it, and greedy decoding produces readable, deterministic noise
// that depends on the audio and on every layer's arithmetic. The decoder's
// weights are shaped so that each segment ends after about 30 tokens (see
// DecoderEmbeddings), which keeps a transcription to a few seconds. It is meant
// for tests and benchmarks that need a real whisper model without downloading one.
// The same flags always produce the same file.
//
// File layout (all integers are little-endian int32, floats are IEEE binary32):
//   magic 0x67676d6c ("ggml")
//   hparams: n_vocab, n_audio_ctx, n_audio_state, n_audio_head, n_audio_layer,
//            n_text_ctx, n_text_state, n_text_head, n_text_layer, n_mels, ftype
//   mel filters: n_mel, n_fft, then n_mel * n_fft floats
//   vocabulary: count, then per token: length, bytes
//   tensors until the end of the file, each:
//     n_dims, name length, ttype (ggml type: 0 f32, 1 f16), ne[0..n_dims),
//     name bytes, data (ggml row-major: ne[0] varies fastest)
//
// Tensor data is streamed to the file one chunk at a time, so peak memory stays
// a few MiB.

#include <ggml.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <unordered_set>
#include <vector>

#include "common/synthetic_support.h"

using synthetic::fail;
using synthetic::parse_u64;
using synthetic::Rng;

namespace {

// ---------------------------------------------------------------------------
// whisper's fixed audio front end

constexpr int32_t kMagic = 0x67676d6c;  // "ggml"
constexpr int kSampleRate = 16000;
constexpr int kFftSize = 400;               // 25 ms windows
constexpr int kFftBins = kFftSize / 2 + 1;  // n_fft as whisper.cpp stores it

// The vocabulary whisper.cpp expects: the ordinary (text) tokens, then
// <|endoftext|>, <|startoftranscript|>, 99 language slots, <|translate|>,
// <|transcribe|>, <|startoflm|>, <|startofprev|>, <|nospeech|>,
// <|notimestamps|> and 1501 timestamps <|0.00|> ... <|30.00|>. Only the number
// of ordinary tokens differs between English-only and multilingual models.
constexpr int32_t kOrdinaryMultilingual = 50257;
constexpr int32_t kOrdinaryEnglish = 50256;
constexpr int32_t kSpecialTokens = 2 + 99 + 6 + 1501;
static_assert(kOrdinaryMultilingual + kSpecialTokens == 51865, "multilingual n_vocab");
static_assert(kOrdinaryEnglish + kSpecialTokens == 51864, "English-only n_vocab");

// ---------------------------------------------------------------------------
// options

struct Hparams {
    int32_t n_vocab = 51865;
    int32_t n_audio_ctx = 1500;
    int32_t n_audio_state = 384;
    int32_t n_audio_head = 6;
    int32_t n_audio_layer = 4;
    int32_t n_text_ctx = 448;
    int32_t n_text_state = 384;
    int32_t n_text_head = 6;
    int32_t n_text_layer = 4;
    int32_t n_mels = 80;
};

struct Preset {
    const char *name;
    int32_t n_state, n_head, n_layer;
    const char *about;
};

// The two smallest OpenAI whisper architectures (encoder and decoder alike),
// and a much smaller one of the same shape for quick tests: whisper.cpp runs
// any layer count and width (the audio and text contexts stay fixed).
const Preset kPresets[] = {
    {"micro", 128, 2, 2, "~8M parameters (F16 ~16 MiB), not an OpenAI size"},
    {"tiny", 384, 6, 4, "~38M parameters (F16 ~74 MiB)"},
    {"base", 512, 8, 6, "~73M parameters (F16 ~141 MiB)"},
};

struct Options {
    std::string output;
    std::string preset = "tiny";
    bool english = false;  // English-only vocabulary (tiny.en, base.en)
    ggml_type type = GGML_TYPE_F16;
    uint64_t seed = 42;
};

void print_usage(const char *argv0) {
    std::printf(
        "usage: %s [options] -o PATH\n"
        "\n"
        "Writes a whisper model in whisper.cpp's ggml model format, with random\n"
        "weights, real mel filters and a synthetic vocabulary, that whisper-cli and\n"
        "whisper-bench can load and run. Its transcripts are deterministic noise.\n"
        "The same options always produce the same file.\n"
        "\n"
        "options:\n"
        "  -h,  --help              show this help message and exit\n"
        "  -o,  --output PATH       file to write (required)\n"
        "       --preset NAME       architecture: micro, tiny, base (default: tiny;\n"
        "                           see below)\n"
        "       --vocab KIND        multilingual (n_vocab 51865, default) or en\n"
        "                           (English-only, n_vocab 51864)\n"
        "       --type TYPE         type of the weight matrices and convolutions:\n"
        "                           f16 (default) or f32; biases, norms and positional\n"
        "                           embeddings are always f32\n"
        "  -s,  --seed N            random seed (default: 42)\n"
        "\n"
        "presets (n_audio_ctx 1500, n_text_ctx 448, 80 mels):\n",
        argv0);
    for (const Preset &p : kPresets) {
        std::printf("  %-5s %d layers, state %d, %d heads: %s\n", p.name, p.n_layer, p.n_state, p.n_head, p.about);
    }
    std::printf(
        "\n"
        "example:\n"
        "  %s --preset tiny -o /tmp/whisper-tiny.bin\n"
        "  whisper-cli -m /tmp/whisper-tiny.bin -f audio.wav -bs 1 -nf -nt\n",
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
                fail("unknown preset '%s' (expected micro, tiny or base)", opt.preset);
            }
        } else if (arg == "--vocab") {
            const std::string v = value();
            if (v == "multilingual") {
                opt.english = false;
            } else if (v == "en") {
                opt.english = true;
            } else {
                fail("unknown vocabulary '%s' for --vocab (expected multilingual or en)", v);
            }
        } else if (arg == "--type") {
            const std::string t = value();
            if (t == "f32" || t == "F32") {
                opt.type = GGML_TYPE_F32;
            } else if (t == "f16" || t == "F16") {
                opt.type = GGML_TYPE_F16;
            } else {
                fail("unknown type '%s' for --type (expected f16 or f32)", t);
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
            hp.n_audio_state = hp.n_text_state = p.n_state;
            hp.n_audio_head = hp.n_text_head = p.n_head;
            hp.n_audio_layer = hp.n_text_layer = p.n_layer;
        }
    }
    hp.n_vocab = (opt.english ? kOrdinaryEnglish : kOrdinaryMultilingual) + kSpecialTokens;
    return hp;
}

// whisper.cpp tells the two vocabularies apart by n_vocab (multilingual from
// 51865 on) and numbers the special tokens from the first id after the
// ordinary ones. The real converters write only the ordinary tokens and
// whisper.cpp names the special ones itself; so do we.
int32_t n_ordinary_tokens(const Hparams &hp) { return hp.n_vocab - kSpecialTokens; }

// ---------------------------------------------------------------------------
// deterministic random numbers (xoshiro256**, seeded with splitmix64), so the
// output does not depend on the standard library's distributions

// output file: little-endian int32 / float32 records, errors remembered

class ModelFile {
  public:
    explicit ModelFile(const std::string &path) : f_(std::fopen(path.c_str(), "wb")) {
        if (!f_) {
            error_ = errno;
        }
    }
    ~ModelFile() {
        if (f_) {
            std::fclose(f_);
        }
    }
    ModelFile(const ModelFile &) = delete;
    ModelFile &operator=(const ModelFile &) = delete;

    void bytes(const void *data, size_t n) {
        if (f_ && error_ == 0 && std::fwrite(data, 1, n, f_) != n) {
            error_ = errno ? errno : EIO;
        }
        written_ += n;
    }
    // The format is little-endian; so are all targets ggml's CPU backends run on.
    void i32(int32_t v) { bytes(&v, sizeof(v)); }
    void f32(float v) { bytes(&v, sizeof(v)); }

    // Closes the file; false (with errno in error()) if anything failed.
    bool close() {
        if (f_ && std::fclose(f_) != 0 && error_ == 0) {
            error_ = errno;
        }
        f_ = nullptr;
        return error_ == 0;
    }
    int error() const { return error_; }
    size_t written() const { return written_; }

  private:
    FILE *f_;
    int error_ = 0;
    size_t written_ = 0;
};

// ---------------------------------------------------------------------------
// mel filters: n_mels triangular filters over the 201 FFT bins of 0..8 kHz,
// on the Slaney mel scale and area-normalised, the shape whisper was trained with.

double hz_to_mel(double hz) {
    constexpr double f_sp = 200.0 / 3.0, min_log_hz = 1000.0, min_log_mel = min_log_hz / f_sp;
    const double logstep = std::log(6.4) / 27.0;
    return hz < min_log_hz ? hz / f_sp : min_log_mel + std::log(hz / min_log_hz) / logstep;
}

double mel_to_hz(double mel) {
    constexpr double f_sp = 200.0 / 3.0, min_log_hz = 1000.0, min_log_mel = min_log_hz / f_sp;
    const double logstep = std::log(6.4) / 27.0;
    return mel < min_log_mel ? f_sp * mel : min_log_hz * std::exp(logstep * (mel - min_log_mel));
}

std::vector<float> mel_filters(int n_mels) {
    std::vector<double> edges(size_t(n_mels) + 2);  // filter corners in Hz
    const double mel_max = hz_to_mel(kSampleRate / 2.0);
    for (size_t i = 0; i < edges.size(); ++i) {
        edges[i] = mel_to_hz(mel_max * double(i) / double(n_mels + 1));
    }
    std::vector<float> w(size_t(n_mels) * kFftBins, 0.0f);
    for (int m = 0; m < n_mels; ++m) {
        const double lo = edges[m], mid = edges[m + 1], hi = edges[m + 2];
        const double norm = 2.0 / (hi - lo);
        for (int k = 0; k < kFftBins; ++k) {
            const double hz = double(k) * kSampleRate / kFftSize;
            const double rise = (hz - lo) / (mid - lo), fall = (hi - hz) / (hi - mid);
            w[size_t(m) * kFftBins + k] = float(std::max(0.0, std::min(rise, fall)) * norm);
        }
    }
    return w;
}

// ---------------------------------------------------------------------------
// vocabulary: like a byte-level BPE vocabulary it holds every single byte
// (whisper.cpp looks up " " to suppress blanks), then printable ASCII pieces.

constexpr int32_t kPrintableBytes = 0x7f - 0x20;  // " " ... "~" are tokens 0..94
constexpr int32_t kByteTokens = 256;              // the other bytes follow them

std::vector<std::string> build_vocab(int32_t n_tokens) {
    std::vector<std::string> tokens;
    std::unordered_set<std::string> seen;
    auto add = [&](const std::string &s) {
        if (int32_t(tokens.size()) < n_tokens && seen.insert(s).second) {
            tokens.push_back(s);
        }
    };
    for (int c = 0x20; c < 0x7f; ++c) {
        add(std::string(1, char(c)));
    }
    for (int c = 0; c < 256; ++c) {
        if (c < 0x20 || c >= 0x7f) {
            add(std::string(1, char(c)));
        }
    }
    static const char *const words[] = {
        "the",       "a",      "of",      "and",   "to",     "in",      "is",    "it",     "that",  "was",
        "for",       "on",     "with",    "as",    "I",      "you",     "he",    "she",    "we",    "they",
        "be",        "at",     "by",      "this",  "have",   "from",    "or",    "one",    "not",   "but",
        "what",      "all",    "were",    "when",  "there",  "can",     "an",    "which",  "said",  "if",
        "do",        "will",   "about",   "how",   "up",     "out",     "so",    "some",   "would", "like",
        "time",      "no",     "way",     "could", "people", "first",   "water", "day",    "rules", "ignore",
        "Wikipedia", "remote", "backend", "model", "noise",  "whisper", "audio", "speech",
    };
    for (const char *w : words) {
        add(std::string(" ") + w);
        add(w);
    }
    // Fill the rest with lowercase strings of growing length, with and without
    // a leading space, as a byte-pair vocabulary would have.
    std::vector<std::string> level = {""};
    while (int32_t(tokens.size()) < n_tokens) {
        std::vector<std::string> next;
        next.reserve(level.size() * 26);
        for (const std::string &s : level) {
            for (char c = 'a'; c <= 'z'; ++c) {
                next.push_back(s + c);
            }
        }
        for (const std::string &s : next) {
            add(" " + s);
            add(s);
        }
        level.swap(next);
    }
    return tokens;
}

// ---------------------------------------------------------------------------
// tensors

// Fills row `row` (n values) of a tensor; a tensor's rows are filled in order,
// all from the same generator.
using RowFill = std::function<void(Rng &rng, int64_t row, float *dst, int64_t n)>;

RowFill constant(float value) {
    return [value](Rng &, int64_t, float *dst, int64_t n) { std::fill(dst, dst + n, value); };
}

// uniform with the given standard deviation (uniform in [-a, a) has a / sqrt(3))
RowFill uniform(float stddev) {
    const float amp = stddev * std::sqrt(3.0f);
    return [amp](Rng &rng, int64_t, float *dst, int64_t n) {
        for (int64_t i = 0; i < n; ++i) {
            dst[i] = amp * rng.symmetric();
        }
    };
}

// The encoder's fixed positional embedding: row = position, first half
// sin(pos * f_i), second half cos(pos * f_i), frequencies spaced geometrically
// from 1 down to 1/10000.
RowFill sinusoids() {
    return [](Rng &, int64_t row, float *dst, int64_t n) {
        const int64_t half = n / 2;
        const double step = std::log(10000.0) / double(std::max<int64_t>(1, half - 1));
        for (int64_t i = 0; i < half; ++i) {
            const double angle = double(row) * std::exp(-step * double(i));
            dst[i] = float(std::sin(angle));
            dst[half + i] = float(std::cos(angle));
        }
    };
}

struct TensorSpec {
    std::string name;
    std::vector<int64_t> ne;  // ggml order: ne[0] is the row length
    ggml_type type;
    RowFill fill;

    int64_t row_len() const { return ne[0]; }
    int64_t n_rows() const {
        int64_t n = 1;
        for (size_t i = 1; i < ne.size(); ++i) {
            n *= ne[i];
        }
        return n;
    }
};

// A random direction of unit length.
std::vector<float> unit_vector(uint64_t seed, const std::string &stream, int64_t n) {
    Rng rng(seed, stream);
    std::vector<float> v(static_cast<size_t>(n));
    double norm2 = 0.0;
    for (float &x : v) {
        x = rng.symmetric();
        norm2 += double(x) * x;
    }
    for (float &x : v) {
        x = float(x / std::sqrt(norm2));
    }
    return v;
}

// Shaping of the decoder's random weights, so that greedy decoding gives varied
// text that depends on the audio, and segments end early (see DecoderEmbeddings).
constexpr float kTokenGain = 10.0f;     // token embedding scale; the final norm divides it out
constexpr float kSelfQueryGain = 4.0f;  // sharpens self-attention onto a few earlier tokens
constexpr float kSelfOutGain = 0.5f;
constexpr float kCrossQueryGain = 8.0f;  // sharpens cross-attention onto a few audio frames
constexpr float kCrossOutGain = 0.5f;    // keeps the audio from drowning the text context
constexpr int64_t kSegmentTokens = 32;   // decoder position from which <|endoftext|> wins
constexpr float kEndPull = 100.0f;       // how far those positions pull towards it

std::vector<float> random_signs(uint64_t seed, const std::string &stream, int64_t n) {
    Rng rng(seed, stream);
    std::vector<float> v(static_cast<size_t>(n));
    for (float &x : v) {
        x = (rng.next() >> 63) ? 1.0f : -1.0f;
    }
    return v;
}

float inv_sqrt(int64_t n) { return 1.0f / std::sqrt(float(n)); }

// Appends tensors in whisper's layouts: norms, linear layers, attention and MLPs.
struct TensorList {
    std::vector<TensorSpec> &t;
    ggml_type wtype;
    RowFill bias = uniform(0.02f);

    void norm(const std::string &prefix, int64_t n) {
        t.push_back({prefix + ".weight", {n}, GGML_TYPE_F32, constant(1.0f)});
        t.push_back({prefix + ".bias", {n}, GGML_TYPE_F32, constant(0.0f)});
    }
    // A linear layer y = W x + b with W of shape [n_out][n_in].
    void linear(const std::string &prefix, int64_t n_in, int64_t n_out, bool has_bias, float gain = 1.0f) {
        t.push_back({prefix + ".weight", {n_in, n_out}, wtype, uniform(gain * inv_sqrt(n_in))});
        if (has_bias) {
            t.push_back({prefix + ".bias", {n_out}, GGML_TYPE_F32, bias});
        }
    }
    // Self- or cross-attention: the key projection has no bias in whisper.
    void attention(const std::string &prefix, int64_t n, float q_gain = 1.0f, float out_gain = 1.0f) {
        linear(prefix + ".query", n, n, true, q_gain);
        linear(prefix + ".key", n, n, false);
        linear(prefix + ".value", n, n, true);
        linear(prefix + ".out", n, n, true, out_gain);
    }
    void mlp(const std::string &prefix, int64_t n) {
        linear(prefix + ".mlp.0", n, 4 * n, true);
        linear(prefix + ".mlp.2", 4 * n, n, true);
        norm(prefix + ".mlp_ln", n);
    }
};

// Two convolutions (kernel 3) over the mel frames, then blocks.
void add_encoder(TensorList &list, const Hparams &hp) {
    const int64_t na = hp.n_audio_state;
    std::vector<TensorSpec> &t = list.t;
    t.push_back({"encoder.positional_embedding", {na, hp.n_audio_ctx}, GGML_TYPE_F32, sinusoids()});
    t.push_back({"encoder.conv1.weight", {3, hp.n_mels, na}, list.wtype, uniform(inv_sqrt(3 * hp.n_mels))});
    t.push_back({"encoder.conv1.bias", {1, na}, GGML_TYPE_F32, list.bias});
    t.push_back({"encoder.conv2.weight", {3, na, na}, list.wtype, uniform(inv_sqrt(3 * na))});
    t.push_back({"encoder.conv2.bias", {1, na}, GGML_TYPE_F32, list.bias});
    for (int il = 0; il < hp.n_audio_layer; ++il) {
        const std::string p = "encoder.blocks." + std::to_string(il);
        list.attention(p + ".attn", na);
        list.norm(p + ".attn_ln", na);
        list.mlp(p, na);
    }
    list.norm("encoder.ln_post", na);
}

// The decoder's token and positional embeddings, and its final norm. The token
// embedding doubles as the output projection (logits = decoder.ln(x) . embedding
// rows), which random weights turn into repetition: the residual stream is
// dominated by attention averages that barely change from step to step, and a
// token's own embedding in it makes it predict itself. So the embeddings are
// kTokenGain times larger than the logits need (each token steers the next step)
// and the final norm's weights are +-1/kTokenGain with random signs (logits keep a
// standard deviation of ~2, and no token favours itself).
//
// The rows of the unprintable bytes are damped so that transcripts stay readable,
// those of the special and timestamp tokens so that decoding stays in text.
// <|endoftext|> reads one direction, and from position kSegmentTokens on the
// positional embedding pushes the state far along it: every segment ends there at
// the latest, so a 30 s window costs about 30 decoder steps instead of 220.
struct DecoderEmbeddings {
    std::vector<float> end_dir;
    std::vector<float> signs;
    int64_t eot;
    int64_t nt;

    DecoderEmbeddings(const Hparams &hp, uint64_t seed)
        : end_dir(unit_vector(seed, "endoftext direction", hp.n_text_state)),
          signs(random_signs(seed, "decoder.ln signs", hp.n_text_state)),
          eot(n_ordinary_tokens(hp)),
          nt(hp.n_text_state) {}

    RowFill tokens() const {
        const float row_std = kTokenGain * 2.0f * inv_sqrt(nt);
        const RowFill text = uniform(row_std);
        const RowFill damped = uniform(0.1f * row_std);
        return [row_std, text, damped, end_dir = end_dir, signs = signs, eot = eot](Rng &rng, int64_t row, float *dst,
                                                                                    int64_t n) {
            if (row == eot) {
                const float norm = row_std * std::sqrt(float(n));
                for (int64_t i = 0; i < n; ++i) {
                    dst[i] = norm * signs[size_t(i)] * end_dir[size_t(i)];
                }
            } else if ((row >= kPrintableBytes && row < kByteTokens) || row > eot) {
                damped(rng, row, dst, n);
            } else {
                text(rng, row, dst, n);
            }
        };
    }
    RowFill positions() const {
        const RowFill position = uniform(0.02f);
        return [position, end_dir = end_dir](Rng &rng, int64_t row, float *dst, int64_t n) {
            position(rng, row, dst, n);
            if (row >= kSegmentTokens) {
                for (int64_t i = 0; i < n; ++i) {
                    dst[i] += kEndPull * end_dir[size_t(i)];
                }
            }
        };
    }
    RowFill final_norm() const {
        return [signs = signs](Rng &, int64_t, float *dst, int64_t n) {
            for (int64_t i = 0; i < n; ++i) {
                dst[i] = signs[size_t(i)] / kTokenGain;
            }
        };
    }
};

// Self- and cross-attention are sharp (random queries would average everything
// into a constant) and moderate, so the text varies and shows the audio from the
// first tokens; see DecoderEmbeddings for the rest of the shaping.
void add_decoder(TensorList &list, const Hparams &hp, uint64_t seed) {
    const int64_t nt = hp.n_text_state;
    std::vector<TensorSpec> &t = list.t;
    const DecoderEmbeddings embeddings(hp, seed);
    t.push_back({"decoder.token_embedding.weight", {nt, hp.n_vocab}, list.wtype, embeddings.tokens()});
    t.push_back({"decoder.positional_embedding", {nt, hp.n_text_ctx}, GGML_TYPE_F32, embeddings.positions()});
    for (int il = 0; il < hp.n_text_layer; ++il) {
        const std::string p = "decoder.blocks." + std::to_string(il);
        list.attention(p + ".attn", nt, kSelfQueryGain, kSelfOutGain);
        list.norm(p + ".attn_ln", nt);
        list.attention(p + ".cross_attn", nt, kCrossQueryGain, kCrossOutGain);
        list.norm(p + ".cross_attn_ln", nt);
        list.mlp(p, nt);
    }
    t.push_back({"decoder.ln.weight", {nt}, GGML_TYPE_F32, embeddings.final_norm()});
    t.push_back({"decoder.ln.bias", {nt}, GGML_TYPE_F32, constant(0.0f)});
}

std::vector<TensorSpec> tensor_specs(const Hparams &hp, ggml_type wtype, uint64_t seed) {
    std::vector<TensorSpec> t;
    TensorList list{t, wtype};
    add_encoder(list, hp);
    add_decoder(list, hp, seed);
    return t;
}

// Writes one tensor record: header, then the data chunk by chunk.
void write_tensor(ModelFile &out, const TensorSpec &ts, uint64_t seed, std::vector<float> &src,
                  std::vector<ggml_fp16_t> &half) {
    out.i32(int32_t(ts.ne.size()));
    out.i32(int32_t(ts.name.size()));
    out.i32(int32_t(ts.type));  // the file's ttype is the ggml type id
    for (int64_t n : ts.ne) {
        out.i32(int32_t(n));
    }
    out.bytes(ts.name.data(), ts.name.size());

    constexpr int64_t kChunkElems = int64_t(1) << 20;
    const int64_t rows_per_chunk = std::max<int64_t>(1, kChunkElems / ts.row_len());
    Rng rng(seed, ts.name);
    for (int64_t r0 = 0; r0 < ts.n_rows(); r0 += rows_per_chunk) {
        const int64_t nrows = std::min(rows_per_chunk, ts.n_rows() - r0);
        src.resize(size_t(nrows * ts.row_len()));
        for (int64_t r = 0; r < nrows; ++r) {
            ts.fill(rng, r0 + r, src.data() + r * ts.row_len(), ts.row_len());
        }
        if (ts.type == GGML_TYPE_F16) {
            half.resize(src.size());
            ggml_fp32_to_fp16_row(src.data(), half.data(), int64_t(src.size()));
            out.bytes(half.data(), half.size() * sizeof(ggml_fp16_t));
        } else {
            out.bytes(src.data(), src.size() * sizeof(float));
        }
    }
}

}  // namespace

int main(int argc, char **argv) {
    const Options opt = parse_args(argc, argv);
    const Hparams hp = resolve(opt);
    const auto t_start = std::chrono::steady_clock::now();

    const std::vector<TensorSpec> specs = tensor_specs(hp, opt.type, opt.seed);
    const std::vector<std::string> vocab = build_vocab(n_ordinary_tokens(hp));
    const std::vector<float> filter = mel_filters(hp.n_mels);

    ModelFile out(opt.output);
    if (out.error() != 0) {
        std::fprintf(stderr, "error: cannot open '%s' for writing: %s\n", opt.output.c_str(),
                     std::strerror(out.error()));
        return 1;
    }

    out.i32(kMagic);
    for (int32_t v : {hp.n_vocab, hp.n_audio_ctx, hp.n_audio_state, hp.n_audio_head, hp.n_audio_layer, hp.n_text_ctx,
                      hp.n_text_state, hp.n_text_head, hp.n_text_layer, hp.n_mels}) {
        out.i32(v);
    }
    // ftype: 0 all f32, 1 mostly f16 (ggml_ftype); no quantization version to add
    out.i32(opt.type == GGML_TYPE_F16 ? 1 : 0);

    out.i32(hp.n_mels);
    out.i32(kFftBins);
    for (float w : filter) {
        out.f32(w);
    }

    out.i32(int32_t(vocab.size()));
    for (const std::string &token : vocab) {
        out.i32(int32_t(token.size()));
        out.bytes(token.data(), token.size());
    }

    std::vector<float> src;
    std::vector<ggml_fp16_t> half;
    int64_t n_params = 0;
    for (const TensorSpec &ts : specs) {
        write_tensor(out, ts, opt.seed, src, half);
        n_params += ts.row_len() * ts.n_rows();
    }

    if (!out.close()) {
        std::fprintf(stderr, "error: failed to write '%s': %s\n", opt.output.c_str(), std::strerror(out.error()));
        std::remove(opt.output.c_str());
        return 1;
    }

    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
    std::printf(
        "wrote %s: whisper %s%s, %s, n_audio_state %d, n_audio_layer %d, n_text_layer %d, "
        "n_head %d, n_vocab %d, seed %" PRIu64 "\n",
        opt.output.c_str(), opt.preset.c_str(), opt.english ? ".en" : "", ggml_type_name(opt.type), hp.n_audio_state,
        hp.n_audio_layer, hp.n_text_layer, hp.n_audio_head, hp.n_vocab, opt.seed);
    std::printf("  %" PRId64
                " parameters (%.2fM), %zu tensors, %zu tokens + %d special, %zu bytes (%.2f MiB), %.2f s\n",
                n_params, double(n_params) / 1e6, specs.size(), vocab.size(), hp.n_vocab - int32_t(vocab.size()),
                out.written(), double(out.written()) / (1024.0 * 1024.0), secs);
    return 0;
}
