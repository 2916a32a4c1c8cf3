// Shared by the synthetic model writers: command-line value parsing with clear
// errors, and a small deterministic random generator (the same flags always give
// the same file).
#pragma once

#include <cerrno>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace synthetic {

[[noreturn]] inline void fail(const char *fmt, const std::string &arg) {
    std::fprintf(stderr, "error: ");
    std::fprintf(stderr, fmt, arg.c_str());
    std::fprintf(stderr, "\n(use --help for usage)\n");
    std::exit(1);
}

inline int64_t parse_int(const std::string &flag, const std::string &value, int64_t lo, int64_t hi) {
    const char *s = value.c_str();
    char *end = nullptr;
    errno = 0;
    const long long v = std::strtoll(s, &end, 10);
    if (value.empty() || end == s || *end != '\0' || errno == ERANGE || v < lo || v > hi) {
        std::fprintf(stderr, "error: invalid value '%s' for %s: expected an integer in [%" PRId64 ", %" PRId64 "]\n",
                     value.c_str(), flag.c_str(), lo, hi);
        std::fprintf(stderr, "(use --help for usage)\n");
        std::exit(1);
    }
    return v;
}

inline uint64_t parse_u64(const std::string &flag, const std::string &value) {
    const char *s = value.c_str();
    char *end = nullptr;
    errno = 0;
    const unsigned long long v = std::strtoull(s, &end, 10);
    if (value.empty() || value[0] == '-' || end == s || *end != '\0' || errno == ERANGE) {
        std::fprintf(stderr, "error: invalid value '%s' for %s: expected a non-negative integer\n", value.c_str(),
                     flag.c_str());
        std::fprintf(stderr, "(use --help for usage)\n");
        std::exit(1);
    }
    return v;
}

inline uint64_t splitmix64(uint64_t &x) {
    uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

inline uint64_t fnv1a(const std::string &s) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (unsigned char c : s) {
        h = (h ^ c) * 0x100000001b3ULL;
    }
    return h;
}

class Rng {
  public:
    Rng(uint64_t seed, const std::string &stream) {
        uint64_t x = seed ^ fnv1a(stream);
        for (uint64_t &w : s_) {
            w = splitmix64(x);
        }
    }

    uint64_t next() {
        const uint64_t result = rotl(s_[1] * 5, 7) * 9;
        const uint64_t t = s_[1] << 17;
        s_[2] ^= s_[0];
        s_[3] ^= s_[1];
        s_[1] ^= s_[2];
        s_[0] ^= s_[3];
        s_[2] ^= t;
        s_[3] = rotl(s_[3], 45);
        return result;
    }

    // uniform in [-1, 1)
    float symmetric() { return float(int64_t(next() >> 40) - (int64_t(1) << 23)) * (1.0f / float(1 << 23)); }

  private:
    static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
    uint64_t s_[4];
};

}  // namespace synthetic
