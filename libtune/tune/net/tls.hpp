// TLS for the cluster's connections (docs/cluster.md, Security): OpenSSL (Debian's
// libssl), TLS 1.3 only, both sides verified against the cluster's CA.
//
// A session works on memory buffers, not on a socket: the relay that owns the socket
// (the gate, actors/transport/gate.hpp) feeds it the ciphertext it read and writes out what the
// session produced, so TLS fits the relay's one poll loop with no blocking call.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tune/core/status.hpp"

using SSL_CTX = struct ssl_ctx_st;
using SSL = struct ssl_st;

namespace tune::tls {

// A process's certificate, its key and the CA its peers' certificates must come from.
struct files {
  std::string cert, key, ca;
  bool any() const { return !cert.empty() || !key.empty() || !ca.empty(); }
};

// The files given on the command line (--tls-cert/--tls-key/--tls-ca), else from
// TUNE_TLS_CERT, TUNE_TLS_KEY and TUNE_TLS_CA.
files from_environment(files given);

// One side's settings (an SSL_CTX): certificate and key loaded and matched, the CA
// trusted, TLS 1.3 at least, the peer's certificate required and verified.
class context {
 public:
  // Errors name the file and what to do (a missing file, a key readable by others, a key
  // that does not match the certificate, a certificate that is not valid now).
  // `ask_peer`: a server that asks for no client certificate (the dashboard: browsers
  // sign in with a token instead); the CA is then not needed.
  static expected<std::shared_ptr<context>> make(const files& f, bool server, bool ask_peer = true);
  ~context();
  context(const context&) = delete;
  context& operator=(const context&) = delete;
  SSL_CTX* get() const { return ctx_; }
  bool server() const { return server_; }

 private:
  context() = default;
  SSL_CTX* ctx_ = nullptr;
  bool server_ = false;
};

// One connection's TLS, over memory buffers.
class session {
 public:
  explicit session(const context& ctx);
  ~session();
  session(const session&) = delete;
  session& operator=(const session&) = delete;

  // Ciphertext from the peer: handshake progress, then plaintext appended to `plain`.
  // False (and `why`, for people) when the session failed: a bad certificate, not TLS.
  bool receive(const char* data, size_t n, std::string& plain, std::string& why);
  // Plaintext to send; held until the handshake is done. False on failure.
  bool send(std::string_view plain, std::string& why);
  // Starts the handshake (a client's hello); the output is then ready to take.
  bool start(std::string& why);
  // Appends the ciphertext to write to the peer to `out`.
  void take_output(std::string& out);
  bool established() const { return established_; }

 private:
  bool step(std::string& why);  // handshake, then pending plaintext out
  SSL* ssl_ = nullptr;
  bool established_ = false;
  std::string held_;  // plaintext sent before the handshake finished
};

// `tune tls init DIR`: a CA and a certificate for the cluster signed by it.
struct init_options {
  std::string dir{};
  int days = 825;                  // how long the certificates are valid
  std::vector<std::string> hosts{};  // names and addresses the certificate names (SAN)
  bool force = false;              // replace files that exist
};
// Writes DIR/ca.crt, DIR/ca.key, DIR/cluster.crt, DIR/cluster.key (keys 0600); returns
// what it wrote, for people. Existing files are kept (an error) unless `force`.
expected<std::string> init(const init_options& opt);

// OpenSSL's queued errors as one line (and the queue cleared).
std::string openssl_errors();

}  // namespace tune::tls
