#include "transport/tls_session.h"

#include <gnutls/gnutls.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

#include "protocol/printable.h"
#include "transport/socket.h"

namespace ggml_remote {

namespace {

// TLS 1.3 only, and only key exchanges that pair the key with (EC)DHE: plain PSK
// (no forward secrecy) and certificates are off.
// AES-GCM first: GnuTLS chose ChaCha20 otherwise, at a third of AES-NI's speed.
constexpr const char *kPriority =
    "NORMAL:-VERS-ALL:+VERS-TLS1.3:-KX-ALL:+ECDHE-PSK:+DHE-PSK"
    ":-CIPHER-ALL:+AES-128-GCM:+AES-256-GCM:+CHACHA20-POLY1305";
// What a guest keeps of the server's first bytes, to explain a failed handshake.
constexpr size_t kCaptureLimit = 4096;

// The server's way to its key, and what the guest asked for (for the log when it fails).
struct ServerAuth {
    TlsSession::KeyOracle oracle;
    std::string client_hello;  // the body of the guest's ClientHello, for its proof
    int client_hellos = 0;     // a second one follows a HelloRetryRequest: not served
    bool asked = false;        // the oracle is asked once
    std::string identity;      // the identity the guest presented, escaped: it is only ever shown
    Status refusal;            // why the oracle gave no key
};

}  // namespace

struct TlsSession::State {
    int fd = -1;
    gnutls_session_t session = nullptr;
    gnutls_psk_client_credentials_t client_credentials = nullptr;
    gnutls_psk_server_credentials_t server_credentials = nullptr;
    ServerAuth server_auth;  // server: how it gets the key of the guest's identity
    // Of the receive and the send that failed last: kept apart, since one thread may
    // send while another receives.
    int last_recv_errno = 0;
    int last_send_errno = 0;
    int read_timeout_ms = 0;   // set_read_timeout_ms's, for the message
    int write_timeout_ms = 0;  // set_write_timeout_ms's
    bool capturing = false;    // guest, during the handshake
    std::string captured;

    ~State() {
        if (session != nullptr) gnutls_deinit(session);
        if (client_credentials != nullptr) gnutls_psk_free_client_credentials(client_credentials);
        if (server_credentials != nullptr) gnutls_psk_free_server_credentials(server_credentials);
    }
};

namespace {

// The socket calls GnuTLS makes, on the session's own descriptor: no SIGPIPE on a
// closed connection, EINTR retried here, errno kept for the error message.
template <class S>
ssize_t pull(gnutls_transport_ptr_t context, void *data, size_t size) {
    auto *state = static_cast<S *>(context);
    ssize_t got;
    do {
        got = ::recv(state->fd, data, size, 0);
    } while (got < 0 && errno == EINTR);
    if (got < 0) {
        state->last_recv_errno = errno;
        gnutls_transport_set_errno(state->session, errno);
    } else if (state->capturing && state->captured.size() < kCaptureLimit) {
        state->captured.append(static_cast<const char *>(data),
                               std::min(static_cast<size_t>(got), kCaptureLimit - state->captured.size()));
    }
    return got;
}

template <class S>
int pull_timeout(gnutls_transport_ptr_t context, unsigned int ms) {
    auto *state = static_cast<S *>(context);
    const int timeout = ms == GNUTLS_INDEFINITE_TIMEOUT ? -1 : static_cast<int>(std::min<unsigned>(ms, INT_MAX));
    const int ready = poll_one(state->fd, POLLIN, timeout);
    if (ready < 0) {
        state->last_recv_errno = errno;
        gnutls_transport_set_errno(state->session, errno);
    }
    return ready;
}

template <class S>
ssize_t push(gnutls_transport_ptr_t context, const giovec_t *iov, int count) {
    auto *state = static_cast<S *>(context);
    msghdr message{};
    message.msg_iov = const_cast<iovec *>(iov);
    message.msg_iovlen = static_cast<size_t>(count);
    ssize_t sent;
    do {
        sent = ::sendmsg(state->fd, &message, MSG_NOSIGNAL);
    } while (sent < 0 && errno == EINTR);
    if (sent < 0) {
        state->last_send_errno = errno;
        gnutls_transport_set_errno(state->session, errno);
    }
    return sent;
}

// Keeps the guest's ClientHello: its proof of the key is read from it.
int keep_client_hello(gnutls_session_t session, unsigned int type, unsigned, unsigned int incoming,
                      const gnutls_datum_t *message) {
    auto *auth = static_cast<ServerAuth *>(gnutls_session_get_ptr(session));
    if (incoming == 0 || type != GNUTLS_HANDSHAKE_CLIENT_HELLO || message == nullptr) return 0;
    auth->client_hello.assign(reinterpret_cast<const char *>(message->data), message->size);
    ++auth->client_hellos;
    return 0;
}

// The key for the identity a guest presents, from the oracle, once it saw the
// guest's binder for it.
int find_key(gnutls_session_t session, const char *identity, gnutls_datum_t *key) {
    auto *auth = static_cast<ServerAuth *>(gnutls_session_get_ptr(session));
    auth->identity = printable(identity);
    if (auth->asked || auth->client_hellos != 1) {
        auth->refusal = error(Code::bad_request, "TLS: one key per handshake, without a HelloRetryRequest");
        return -1;
    }
    auth->asked = true;
    BinderProof proof;
    const auto *hello = reinterpret_cast<const uint8_t *>(auth->client_hello.data());
    auth->refusal = binder_proof_from_client_hello(hello, auth->client_hello.size(), identity, &proof);
    std::vector<uint8_t> found;
    if (auth->refusal) auth->refusal = auth->oracle(proof, &found);
    if (!auth->refusal) return -1;
    key->data = static_cast<unsigned char *>(gnutls_malloc(found.size()));
    if (key->data != nullptr) std::memcpy(key->data, found.data(), found.size());
    key->size = static_cast<unsigned>(found.size());
    ::explicit_bzero(found.data(), found.size());
    return key->data != nullptr ? 0 : -1;
}

bool is_key_alert(gnutls_alert_description_t alert) {
    return alert == GNUTLS_A_DECRYPT_ERROR || alert == GNUTLS_A_BAD_RECORD_MAC ||
           alert == GNUTLS_A_UNKNOWN_PSK_IDENTITY || alert == GNUTLS_A_HANDSHAKE_FAILURE ||
           alert == GNUTLS_A_ILLEGAL_PARAMETER;
}

}  // namespace

TlsSession::TlsSession(std::unique_ptr<State> state) : state_(std::move(state)) {}
TlsSession::~TlsSession() = default;

Status TlsSession::failure(int code) const {
    if (code == GNUTLS_E_PREMATURE_TERMINATION) return error(Code::disconnected, "connection closed by peer");
    if (code == GNUTLS_E_TIMEDOUT) {
        return error(Code::disconnected, "no answer within " + std::to_string(state_->read_timeout_ms) + " ms");
    }
    if (code == GNUTLS_E_AGAIN && state_->write_timeout_ms > 0) {
        return error(Code::disconnected,
                     "the peer took no data within " + std::to_string(state_->write_timeout_ms) + " ms");
    }
    if (code == GNUTLS_E_AGAIN) return error(Code::disconnected, std::strerror(EAGAIN));  // SO_RCVTIMEO/SO_SNDTIMEO
    if (code == GNUTLS_E_PULL_ERROR && state_->last_recv_errno != 0) {
        return error(Code::disconnected, std::strerror(state_->last_recv_errno));
    }
    if (code == GNUTLS_E_PUSH_ERROR && state_->last_send_errno != 0) {
        return error(Code::disconnected, std::strerror(state_->last_send_errno));
    }
    if (code == GNUTLS_E_FATAL_ALERT_RECEIVED) {
        return error(Code::disconnected, std::string("TLS alert from the peer: ") +
                                             gnutls_alert_get_name(gnutls_alert_get(state_->session)));
    }
    return error(Code::bad_request, std::string("TLS: ") + gnutls_strerror(code));
}

namespace {

// A session with our priorities and transport, ready for its credentials.
template <class S>
Status start(S *state, unsigned flags, int timeout_ms) {
    int rc = gnutls_init(&state->session, flags | GNUTLS_NO_TICKETS);
    if (rc < 0) return error(Code::error, std::string("TLS: ") + gnutls_strerror(rc));
    const char *where = nullptr;
    rc = gnutls_priority_set_direct(state->session, kPriority, &where);
    if (rc < 0) return error(Code::error, std::string("TLS priorities: ") + gnutls_strerror(rc));
    gnutls_transport_set_ptr(state->session, state);
    gnutls_transport_set_pull_function(state->session, pull<S>);
    gnutls_transport_set_pull_timeout_function(state->session, pull_timeout<S>);
    gnutls_transport_set_vec_push_function(state->session, push<S>);
    gnutls_handshake_set_timeout(state->session,
                                 timeout_ms > 0 ? static_cast<unsigned>(timeout_ms) : GNUTLS_INDEFINITE_TIMEOUT);
    return Status::success();
}

int handshake(gnutls_session_t session) {
    int rc;
    do {
        rc = gnutls_handshake(session);
    } while (rc < 0 && rc != GNUTLS_E_AGAIN && !gnutls_error_is_fatal(rc));
    return rc;
}

}  // namespace

Status TlsSession::connect(int fd, const PreSharedKey &key, int timeout_ms, std::unique_ptr<TlsSession> *out,
                           std::string *first_bytes) {
    auto state = std::make_unique<State>();
    state->fd = fd;
    Status status = start(state.get(), GNUTLS_CLIENT, timeout_ms);
    if (!status) return status;
    int rc = gnutls_psk_allocate_client_credentials(&state->client_credentials);
    const std::string identity = key.identity.empty() ? kDefaultPskIdentity : key.identity;
    gnutls_datum_t secret{const_cast<unsigned char *>(key.key.data()), static_cast<unsigned>(key.key.size())};
    if (rc >= 0) {
        rc =
            gnutls_psk_set_client_credentials(state->client_credentials, identity.c_str(), &secret, GNUTLS_PSK_KEY_RAW);
    }
    if (rc >= 0) rc = gnutls_credentials_set(state->session, GNUTLS_CRD_PSK, state->client_credentials);
    if (rc < 0) return error(Code::error, std::string("TLS credentials: ") + gnutls_strerror(rc));

    state->capturing = true;
    rc = handshake(state->session);
    state->capturing = false;
    if (rc < 0) {
        if (first_bytes != nullptr) *first_bytes = state->captured;
        if (rc == GNUTLS_E_TIMEDOUT || rc == GNUTLS_E_AGAIN) {
            return error(Code::disconnected, "no TLS answer within " + std::to_string(timeout_ms) + " ms");
        }
        const gnutls_alert_description_t alert = gnutls_alert_get(state->session);
        if (rc == GNUTLS_E_FATAL_ALERT_RECEIVED && alert == GNUTLS_A_UNKNOWN_PSK_IDENTITY) {
            return error(Code::disconnected, "unknown identity '" + identity + "' (not in the server's key file)");
        }
        if (rc == GNUTLS_E_FATAL_ALERT_RECEIVED && is_key_alert(alert)) {
            return error(Code::disconnected, "wrong pre-shared key for identity '" + identity +
                                                 "' (the server's TLS alert: " + gnutls_alert_get_name(alert) + ")");
        }
        TlsSession failed(std::move(state));
        return failed.failure(rc);
    }
    state->captured.clear();
    out->reset(new TlsSession(std::move(state)));
    return Status::success();
}

Status TlsSession::accept(int fd, const std::vector<PreSharedKey> &keys, int timeout_ms,
                          std::unique_ptr<TlsSession> *out) {
    // The same check as a worker's listener makes: every handshake checks the binder twice.
    const KeyOracle local = [&keys](const BinderProof &proof, std::vector<uint8_t> *key) {
        return key_for_proof(keys, proof, key);
    };
    return accept(fd, local, timeout_ms, out);
}

Status TlsSession::accept(int fd, const KeyOracle &oracle, int timeout_ms, std::unique_ptr<TlsSession> *out) {
    auto state = std::make_unique<State>();
    state->fd = fd;
    state->server_auth.oracle = oracle;
    Status status = start(state.get(), GNUTLS_SERVER, timeout_ms);
    if (!status) return status;
    int rc = gnutls_psk_allocate_server_credentials(&state->server_credentials);
    if (rc >= 0) {
        gnutls_psk_set_server_credentials_function(state->server_credentials, find_key);
        gnutls_session_set_ptr(state->session, &state->server_auth);
        gnutls_handshake_set_hook_function(state->session, GNUTLS_HANDSHAKE_CLIENT_HELLO, GNUTLS_HOOK_PRE,
                                           keep_client_hello);
        rc = gnutls_credentials_set(state->session, GNUTLS_CRD_PSK, state->server_credentials);
    }
    if (rc < 0) return error(Code::error, std::string("TLS credentials: ") + gnutls_strerror(rc));

    rc = handshake(state->session);
    if (rc < 0) return refused_handshake(std::move(state), rc, timeout_ms);
    out->reset(new TlsSession(std::move(state)));
    return Status::success();
}

// Why a guest's handshake failed, and the alert that tells it (a wrong key is an
// alert, not a hang-up).
Status TlsSession::refused_handshake(std::unique_ptr<State> state, int rc, int timeout_ms) {
    if (rc == GNUTLS_E_TIMEDOUT || rc == GNUTLS_E_AGAIN) {
        return error(Code::disconnected, "no TLS handshake within " + std::to_string(timeout_ms) + " ms");
    }
    const ServerAuth &asked = state->server_auth;
    if (asked.asked && asked.refusal.code() == Code::not_found) {
        (void)gnutls_alert_send(state->session, GNUTLS_AL_FATAL, GNUTLS_A_UNKNOWN_PSK_IDENTITY);
        return error(Code::bad_request, "unknown identity '" + asked.identity + "' (not in the key file)");
    }
    if (asked.asked && !asked.refusal) {
        (void)gnutls_alert_send(state->session, GNUTLS_AL_FATAL, GNUTLS_A_DECRYPT_ERROR);
        return error(Code::bad_request,
                     "wrong pre-shared key for identity '" + asked.identity + "' (" + asked.refusal.message() + ")");
    }
    (void)gnutls_alert_send_appropriate(state->session, rc);
    if (!asked.identity.empty() && (rc == GNUTLS_E_RECEIVED_ILLEGAL_PARAMETER || rc == GNUTLS_E_DECRYPTION_FAILED)) {
        return error(Code::bad_request,
                     "wrong pre-shared key for identity '" + asked.identity + "' (" + gnutls_strerror(rc) + ")");
    }
    TlsSession failed(std::move(state));
    return failed.failure(rc);
}

Status TlsSession::write(const void *data, size_t size) {
    const auto *in = static_cast<const uint8_t *>(data);
    while (size > 0) {
        const ssize_t sent = gnutls_record_send(state_->session, in, size);
        if (sent == GNUTLS_E_INTERRUPTED) continue;
        if (sent < 0) return failure(static_cast<int>(sent));
        in += sent;
        size -= static_cast<size_t>(sent);
    }
    return Status::success();
}

Status TlsSession::read(void *data, size_t size) {
    auto *out = static_cast<uint8_t *>(data);
    while (size > 0) {
        const ssize_t got = gnutls_record_recv(state_->session, out, size);
        if (got == GNUTLS_E_INTERRUPTED) continue;
        if (got == 0) return error(Code::disconnected, "connection closed by peer");
        if (got < 0) return failure(static_cast<int>(got));
        out += got;
        size -= static_cast<size_t>(got);
    }
    return Status::success();
}

bool TlsSession::readable_now() const {
    if (gnutls_record_check_pending(state_->session) > 0) return true;
    return poll_one(state_->fd, POLLIN, 0) > 0;
}

void TlsSession::set_read_timeout_ms(int ms) {
    state_->read_timeout_ms = std::max(ms, 0);
    gnutls_record_set_timeout(state_->session, static_cast<unsigned>(state_->read_timeout_ms));
}

Status TlsSession::set_write_timeout_ms(int ms) {
    ms = std::max(ms, 0);
    const timeval limit{ms / 1000, (ms % 1000) * 1000};
    if (::setsockopt(state_->fd, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof(limit)) != 0) {
        return error(Code::error, std::string("setsockopt SO_SNDTIMEO: ") + std::strerror(errno));
    }
    state_->write_timeout_ms = ms;
    return Status::success();
}

std::string TlsSession::description() const {
    char *text = gnutls_session_get_desc(state_->session);
    std::string result = text != nullptr ? text : "";
    gnutls_free(text);
    return result;
}

std::string TlsSession::peer_identity() const {
    const char *identity = gnutls_psk_server_get_username(state_->session);
    return identity != nullptr ? printable(identity) : "";
}

bool TlsSession::forward_secret() const {
    const gnutls_kx_algorithm_t kx = gnutls_kx_get(state_->session);
    return kx == GNUTLS_KX_ECDHE_PSK || kx == GNUTLS_KX_DHE_PSK;
}

}  // namespace ggml_remote
