// TlsSession: TLS 1.3 with a pre-shared key over a connected TCP socket (GnuTLS).
// The key exchange is (EC)DHE authenticated by the key, so a recorded session stays
// secret even if the key leaks later. FramedStream sends its frames through one.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "protocol/status.h"
#include "transport/psk_binder.h"
#include "transport/tls_key.h"

namespace ggml_remote {

class TlsSession {
  public:
    ~TlsSession();
    TlsSession(const TlsSession &) = delete;
    TlsSession &operator=(const TlsSession &) = delete;

    // The guest's side: the handshake on `fd`, presenting `key`, within timeout_ms.
    // When it fails, `first_bytes` (if given) gets what the server sent, for telling
    // a server that does not speak TLS from one that refused the key.
    static Status connect(int fd, const PreSharedKey &key, int timeout_ms, std::unique_ptr<TlsSession> *session,
                          std::string *first_bytes = nullptr);
    // Who gives the server the key of the identity a guest names, once it has seen
    // the guest's proof that it holds it (psk_binder.h): the key in *key, or an error
    // (Code::not_found: no such identity; bad_request: the proof does not match).
    using KeyOracle = std::function<Status(const BinderProof &proof, std::vector<uint8_t> *key)>;
    // The server's side: accepts a guest that holds one of `keys`, within timeout_ms.
    static Status accept(int fd, const std::vector<PreSharedKey> &keys, int timeout_ms,
                         std::unique_ptr<TlsSession> *out);
    // The same, with the key asked of `oracle` (a worker's listener), which is asked
    // once: this side holds no key before the guest proved it holds one.
    static Status accept(int fd, const KeyOracle &oracle, int timeout_ms, std::unique_ptr<TlsSession> *out);

    // Sends all of `data`; the error's message is the reason alone.
    Status write(const void *data, size_t size);
    // Receives exactly `size` bytes; Code::disconnected when the peer went away.
    Status read(void *data, size_t size);
    // Whether a read would find bytes at once: decrypted ones held here, or the
    // socket's (which may be only part of a record).
    bool readable_now() const;

    // From here on each read waits at most `ms` for the peer's next bytes (0: no
    // limit, the default), then fails with Code::disconnected, "no answer within N ms".
    void set_read_timeout_ms(int ms);
    // From here on each write waits at most `ms` for the peer to take bytes (0: no
    // limit, the default); it sets SO_SNDTIMEO on the socket.
    Status set_write_timeout_ms(int ms);

    // The protocol and cipher suite, e.g. "(TLS1.3)-(ECDHE-SECP256R1)-(AES-256-GCM)".
    std::string description() const;
    // The identity the guest presented (server side), escaped with printable(): the
    // guest chose its bytes, and it is only ever shown (keys are matched in the handshake).
    std::string peer_identity() const;
    // Whether the key exchange gives forward secrecy ((EC)DHE with the key).
    bool forward_secret() const;

  private:
    struct State;
    static Status refused_handshake(std::unique_ptr<State> state, int rc, int timeout_ms);
    explicit TlsSession(std::unique_ptr<State> state);
    Status failure(int code) const;

    std::unique_ptr<State> state_;
};

}  // namespace ggml_remote
