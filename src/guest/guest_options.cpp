#include "guest/guest_options.h"

#include <algorithm>
#include <cstdlib>

#include "guest/log.h"
#include "protocol/commands.h"
#include "transport/setting_text.h"

namespace ggml_remote::guest {

namespace {

// A malformed value costs the user only its default, so it is a warning.
void report(const Status &status) {
    if (!status) log(GGML_LOG_LEVEL_WARN, "%s", status.message().c_str());
}

std::string text_of(const Environment &environment, const char *name) {
    const char *text = environment(name);
    return text != nullptr ? text : "";
}

std::string cache_dir_from(const Environment &environment) {
    const std::string own = text_of(environment, "GGML_REMOTE_CACHE_DIR");
    if (!own.empty()) return own;
    const std::string xdg = text_of(environment, "XDG_CACHE_HOME");
    if (!xdg.empty() && xdg[0] == '/') return xdg + "/ggml-remote";
    const std::string home = text_of(environment, "HOME");
    if (!home.empty() && home[0] == '/') return home + "/.cache/ggml-remote";
    return "";
}

size_t store_min_bytes_from(const Environment &environment) {
    if (!switch_setting(environment("GGML_REMOTE_WEIGHT_STORE"), true)) return 0;
    // Every weight the protocol lets a guest name: a layer's small matrices are a
    // quarter of a mid-sized quantized model, and each tenant's own copy otherwise.
    uint64_t bytes = protocol::kMinWeightLookupBytes;
    report(number_setting("GGML_REMOTE_STORE_MIN_BYTES", environment("GGML_REMOTE_STORE_MIN_BYTES"), 0, UINT64_MAX,
                          &bytes));
    return static_cast<size_t>(std::max<uint64_t>(bytes, protocol::kMinWeightLookupBytes));
}

}  // namespace

GuestOptions read_guest_options(const Environment &environment) {
    GuestOptions options;
    options.servers = text_of(environment, "GGML_REMOTE_SERVERS");
    uint64_t timeout_ms = static_cast<uint64_t>(options.connect_timeout_ms);
    constexpr uint64_t kMaxTimeoutMs = 24ull * 3600 * 1000;
    report(number_setting("GGML_REMOTE_CONNECT_TIMEOUT_MS", environment("GGML_REMOTE_CONNECT_TIMEOUT_MS"), 1,
                          kMaxTimeoutMs, &timeout_ms));
    options.connect_timeout_ms = static_cast<int>(timeout_ms);
    uint64_t reply_ms = static_cast<uint64_t>(options.reply_timeout_ms);
    report(number_setting("GGML_REMOTE_REPLY_TIMEOUT_MS", environment("GGML_REMOTE_REPLY_TIMEOUT_MS"), 0, kMaxTimeoutMs,
                          &reply_ms));
    options.reply_timeout_ms = static_cast<int>(reply_ms);
    uint64_t silence_ms = static_cast<uint64_t>(options.silence_timeout_ms);
    report(number_setting("GGML_REMOTE_SILENCE_TIMEOUT_MS", environment("GGML_REMOTE_SILENCE_TIMEOUT_MS"), 0,
                          kMaxTimeoutMs, &silence_ms));
    options.silence_timeout_ms = static_cast<int>(silence_ms);
    options.tls_psk_file = text_of(environment, "GGML_REMOTE_TLS_PSK_FILE");
    options.tls_psk = text_of(environment, "GGML_REMOTE_TLS_PSK");
    options.print_stats = switch_setting(environment("GGML_REMOTE_STATS"), false);
    options.shared_ring = switch_setting(environment("GGML_REMOTE_SHARED_RING"), true);
    options.mapped_weights = switch_setting(environment("GGML_REMOTE_MAPPED_WEIGHTS"), true);
    options.store_min_bytes = store_min_bytes_from(environment);
    options.cache_dir = cache_dir_from(environment);
    options.reconnect = switch_setting(environment("GGML_REMOTE_RECONNECT"), true);
    uint64_t delay_ms = static_cast<uint64_t>(options.reconnect_max_delay_ms);
    report(number_setting("GGML_REMOTE_RECONNECT_MAX_DELAY_MS", environment("GGML_REMOTE_RECONNECT_MAX_DELAY_MS"), 10,
                          kMaxTimeoutMs, &delay_ms));
    options.reconnect_max_delay_ms = static_cast<int>(delay_ms);
    report(parse_wait_options(environment("GGML_REMOTE_RING_SPIN_US"), environment("GGML_REMOTE_SPIN_SPARE"),
                              environment("GGML_REMOTE_FOLLOW_WORKER"), &options.waiting));
    return options;
}

int GuestOptions::silence_limit_ms(bool server_keeps_alive) const {
    if (!server_keeps_alive || silence_timeout_ms == 0) return reply_timeout_ms;
    return reply_timeout_ms == 0 ? silence_timeout_ms : std::min(silence_timeout_ms, reply_timeout_ms);
}

GuestOptions read_guest_options() {
    return read_guest_options([](const char *name) -> const char * { return std::getenv(name); });
}

}  // namespace ggml_remote::guest
