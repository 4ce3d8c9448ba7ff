#include "tune/net/tls.hpp"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <functional>
#include <tuple>
#include <cstdlib>
#include <filesystem>
#include <memory>

namespace tune::tls {

std::string openssl_errors() {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    out += (out.empty() ? "" : "; ") + std::string{buf};
  }
  return out;
}

files from_environment(files given) {
  auto env = [](const char* name) {
    const char* v = std::getenv(name);
    return v ? std::string{v} : std::string{};
  };
  if (given.cert.empty()) given.cert = env("TUNE_TLS_CERT");
  if (given.key.empty()) given.key = env("TUNE_TLS_KEY");
  if (given.ca.empty()) given.ca = env("TUNE_TLS_CA");
  return given;
}

namespace {

status readable(const std::string& path, const char* what, const char* flag) {
  if (path.empty())
    return {errc::invalid_argument, std::string{"TLS needs "} + what + ": give " + flag +
                                        " (or its TUNE_TLS_ variable); `tune tls init DIR` makes a set"};
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
    return {errc::invalid_argument, std::string{what} + " " + path + " (" + flag + ") is not a readable file"};
  return {};
}

// The verification failure of the peer's certificate, for people.
std::string verify_failure(SSL* ssl) {
  long v = SSL_get_verify_result(ssl);
  if (v == X509_V_OK) return {};
  std::string why = X509_verify_cert_error_string(v);
  switch (v) {
    case X509_V_ERR_CERT_HAS_EXPIRED: return why + " (its certificate expired: make a new one with tune tls init)";
    case X509_V_ERR_CERT_NOT_YET_VALID: return why + " (check both machines' clocks)";
    case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY:
    case X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN:
    case X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT:
    case X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE:
    case X509_V_ERR_CERT_SIGNATURE_FAILURE:
      return why + " (its certificate is not from this cluster's CA: use a certificate the cluster's ca.crt signed)";
    default: return why;
  }
}

}  // namespace

expected<std::shared_ptr<context>> context::make(const files& f, bool server, bool ask_peer) {
  for (auto [path, what, flag] : {std::tuple{f.cert, "a certificate", "--tls-cert"}, std::tuple{f.key, "a key", "--tls-key"},
                                  std::tuple{f.ca, "the cluster's CA certificate", "--tls-ca"}})
    if (auto ok = readable(path, what, flag); !ok) return ok;
  struct stat st {};
  if (::stat(f.key.c_str(), &st) == 0 && (st.st_mode & 077))
    return status{errc::invalid_argument, "the key " + f.key + " can be read by other users: chmod 600 " + f.key};
  std::shared_ptr<context> c{new context};
  c->server_ = server;
  c->ctx_ = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
  if (!c->ctx_) return status{errc::invalid_argument, "TLS: " + openssl_errors()};
  SSL_CTX_set_min_proto_version(c->ctx_, TLS1_3_VERSION);
  if (SSL_CTX_use_certificate_chain_file(c->ctx_, f.cert.c_str()) != 1)
    return status{errc::invalid_argument, "the certificate " + f.cert + " cannot be used: " + openssl_errors()};
  if (SSL_CTX_use_PrivateKey_file(c->ctx_, f.key.c_str(), SSL_FILETYPE_PEM) != 1) {
    auto why = openssl_errors();
    if (why.find("mismatch") == std::string::npos)
      return status{errc::invalid_argument, "the key " + f.key + " cannot be used: " + why};
  }
  if (SSL_CTX_check_private_key(c->ctx_) != 1)
    return status{errc::invalid_argument,
                  "the key " + f.key + " does not belong to the certificate " + f.cert + ": give the pair tune tls init made"};
  if (SSL_CTX_load_verify_locations(c->ctx_, f.ca.c_str(), nullptr) != 1)
    return status{errc::invalid_argument, "the CA certificate " + f.ca + " cannot be used: " + openssl_errors()};
  // Our own certificate must be valid now: an expired one fails every peer's check.
  if (X509* own = SSL_CTX_get0_certificate(c->ctx_)) {
    if (X509_cmp_current_time(X509_get0_notAfter(own)) < 0)
      return status{errc::invalid_argument, "the certificate " + f.cert + " expired: make a new set with tune tls init"};
    if (X509_cmp_current_time(X509_get0_notBefore(own)) > 0)
      return status{errc::invalid_argument, "the certificate " + f.cert + " is not valid yet: check this machine's clock"};
  }
  // Both sides show a certificate and check the other's against the cluster's CA. The
  // name in it is not checked: holding a certificate the cluster's CA signed is what
  // makes a process one of the cluster's (docs/cluster.md).
  if (server && !ask_peer) SSL_CTX_set_verify(c->ctx_, SSL_VERIFY_NONE, nullptr);
  else SSL_CTX_set_verify(c->ctx_, SSL_VERIFY_PEER | (server ? SSL_VERIFY_FAIL_IF_NO_PEER_CERT : 0), nullptr);
  SSL_CTX_set_session_cache_mode(c->ctx_, SSL_SESS_CACHE_OFF);
  SSL_CTX_set_num_tickets(c->ctx_, 0);
  ERR_clear_error();
  return c;
}

context::~context() {
  if (ctx_) SSL_CTX_free(ctx_);
}

session::session(const context& ctx) {
  ssl_ = SSL_new(ctx.get());
  BIO* in = BIO_new(BIO_s_mem());
  BIO* out = BIO_new(BIO_s_mem());
  SSL_set_bio(ssl_, in, out);  // the session owns both
  if (ctx.server()) SSL_set_accept_state(ssl_);
  else SSL_set_connect_state(ssl_);
}

session::~session() {
  if (ssl_) SSL_free(ssl_);
}

bool session::step(std::string& why) {
  if (!established_) {
    int r = SSL_do_handshake(ssl_);
    if (r != 1) {
      int e = SSL_get_error(ssl_, r);
      if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) return true;
      why = verify_failure(ssl_);
      if (why.empty()) why = openssl_errors();
      if (why.empty()) why = "the TLS handshake failed";
      ERR_clear_error();
      return false;
    }
    established_ = true;
  }
  if (!held_.empty()) {
    std::string plain = std::move(held_);
    held_.clear();
    return send(plain, why);
  }
  return true;
}

bool session::start(std::string& why) { return step(why); }

bool session::receive(const char* data, size_t n, std::string& plain, std::string& why) {
  if (n > 0 && BIO_write(SSL_get_rbio(ssl_), data, static_cast<int>(n)) != static_cast<int>(n)) {
    why = "TLS: cannot buffer what the peer sent";
    return false;
  }
  if (!step(why)) return false;
  if (!established_) return true;
  char buf[16 * 1024];
  for (;;) {
    int r = SSL_read(ssl_, buf, sizeof buf);
    if (r > 0) {
      plain.append(buf, static_cast<size_t>(r));
      continue;
    }
    int e = SSL_get_error(ssl_, r);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) return true;
    if (e == SSL_ERROR_ZERO_RETURN) {
      why = "the peer closed the TLS session";
      return false;
    }
    why = openssl_errors();
    if (why.empty()) why = "TLS read failed";
    return false;
  }
}

bool session::send(std::string_view plain, std::string& why) {
  if (!established_) {
    held_.append(plain);
    return true;
  }
  while (!plain.empty()) {
    int r = SSL_write(ssl_, plain.data(), static_cast<int>(std::min<size_t>(plain.size(), 1 << 20)));
    if (r <= 0) {
      why = openssl_errors();
      if (why.empty()) why = "TLS write failed";
      return false;
    }
    plain.remove_prefix(static_cast<size_t>(r));
  }
  return true;
}

void session::take_output(std::string& out) {
  BIO* w = SSL_get_wbio(ssl_);
  char* data = nullptr;
  long n = BIO_get_mem_data(w, &data);
  if (n > 0) {
    out.append(data, static_cast<size_t>(n));
    (void)BIO_reset(w);
  }
}

// --- tune tls init ------------------------------------------------------------

namespace {

using key_ptr = std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)>;
using cert_ptr = std::unique_ptr<X509, decltype(&X509_free)>;

key_ptr new_key() { return {EVP_EC_gen("P-256"), &EVP_PKEY_free}; }

bool add_ext(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX v3;
  X509V3_set_ctx_nodb(&v3);
  X509V3_set_ctx(&v3, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &v3, nid, value.c_str());
  if (!ext) return false;
  bool ok = X509_add_ext(cert, ext, -1) == 1;
  X509_EXTENSION_free(ext);
  return ok;
}

expected<cert_ptr> new_cert(EVP_PKEY* key, const std::string& cn, X509* issuer, EVP_PKEY* issuer_key, int days,
                            const std::vector<std::string>& hosts, long serial) {
  cert_ptr c{X509_new(), &X509_free};
  X509_set_version(c.get(), 2);
  ASN1_INTEGER_set(X509_get_serialNumber(c.get()), serial);
  X509_gmtime_adj(X509_getm_notBefore(c.get()), -60);  // a minute of clock skew
  X509_gmtime_adj(X509_getm_notAfter(c.get()), static_cast<long>(days) * 86400);
  X509_set_pubkey(c.get(), key);
  X509_NAME* name = X509_get_subject_name(c.get());
  X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC, reinterpret_cast<const unsigned char*>("libtune"), -1, -1, 0);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
  X509* signer = issuer ? issuer : c.get();
  X509_set_issuer_name(c.get(), X509_get_subject_name(signer));
  bool ok = true;
  if (!issuer) {
    ok = ok && add_ext(c.get(), signer, NID_basic_constraints, "critical,CA:TRUE,pathlen:0");
    ok = ok && add_ext(c.get(), signer, NID_key_usage, "critical,keyCertSign,cRLSign");
  } else {
    ok = ok && add_ext(c.get(), signer, NID_basic_constraints, "critical,CA:FALSE");
    ok = ok && add_ext(c.get(), signer, NID_key_usage, "critical,digitalSignature");
    ok = ok && add_ext(c.get(), signer, NID_ext_key_usage, "serverAuth,clientAuth");
    std::string san;
    for (auto& h : hosts) {
      unsigned char buf[16];
      bool ip = ::inet_pton(AF_INET, h.c_str(), buf) == 1 || ::inet_pton(AF_INET6, h.c_str(), buf) == 1;
      if (!san.empty()) san += ',';
      san += ip ? "IP:" : "DNS:";
      san += h;
    }
    if (!san.empty()) ok = ok && add_ext(c.get(), signer, NID_subject_alt_name, san);
  }
  ok = ok && add_ext(c.get(), signer, NID_subject_key_identifier, "hash");
  if (!ok || X509_sign(c.get(), issuer_key ? issuer_key : key, EVP_sha256()) <= 0)
    return status{errc::invalid_argument, "cannot make the certificate " + cn + ": " + openssl_errors()};
  return c;
}

status write_pem(const std::string& path, bool secret, const std::function<bool(FILE*)>& write) {
  std::string tmp = path + ".tmp";
  ::unlink(tmp.c_str());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, secret ? 0600 : 0644);
  FILE* f = fd < 0 ? nullptr : ::fdopen(fd, "w");
  if (!f) {
    if (fd >= 0) ::close(fd);
    return {errc::invalid_argument, "cannot write " + tmp + ": " + std::strerror(errno)};
  }
  bool ok = write(f);
  ok = std::fclose(f) == 0 && ok;
  if (ok) ok = ::chmod(tmp.c_str(), secret ? 0600 : 0644) == 0 && ::rename(tmp.c_str(), path.c_str()) == 0;
  if (!ok) {
    ::unlink(tmp.c_str());
    return {errc::invalid_argument, "cannot write " + path + ": " + openssl_errors()};
  }
  return {};
}

}  // namespace

expected<std::string> init(const init_options& opt) {
  namespace fs = std::filesystem;
  if (opt.dir.empty()) return status{errc::invalid_argument, "tune tls init needs a folder: tune tls init DIR"};
  if (opt.days < 1 || opt.days > 36500) return status{errc::invalid_argument, "--days must be between 1 and 36500"};
  std::error_code ec;
  fs::create_directories(opt.dir, ec);
  if (ec) return status{errc::invalid_argument, "cannot make " + opt.dir + ": " + ec.message()};
  const std::string ca_crt = opt.dir + "/ca.crt", ca_key = opt.dir + "/ca.key", crt = opt.dir + "/cluster.crt",
                    key = opt.dir + "/cluster.key";
  if (!opt.force)
    for (auto& p : {ca_crt, ca_key, crt, key})
      if (fs::exists(p))
        return status{errc::already_exists, p + " exists: its cluster may be using it; give another folder, or --force to replace the set"};
  auto ca_pkey = new_key(), pkey = new_key();
  if (!ca_pkey || !pkey) return status{errc::invalid_argument, "cannot make a key: " + openssl_errors()};
  long serial = static_cast<long>(std::time(nullptr));
  auto ca = new_cert(ca_pkey.get(), "libtune cluster CA", nullptr, nullptr, opt.days, {}, serial);
  if (!ca) return ca.error();
  std::vector<std::string> hosts = opt.hosts;
  for (auto h : {"localhost", "127.0.0.1", "::1"})
    if (std::find(hosts.begin(), hosts.end(), h) == hosts.end()) hosts.push_back(h);
  auto cert = new_cert(pkey.get(), "libtune cluster", ca->get(), ca_pkey.get(), opt.days, hosts, serial + 1);
  if (!cert) return cert.error();
  auto pem_key = [](EVP_PKEY* k) {
    return [k](FILE* f) { return PEM_write_PrivateKey(f, k, nullptr, nullptr, 0, nullptr, nullptr) == 1; };
  };
  auto pem_cert = [](X509* c) { return [c](FILE* f) { return PEM_write_X509(f, c) == 1; }; };
  for (auto& [path, secret, write] :
       {std::tuple{ca_key, true, std::function<bool(FILE*)>{pem_key(ca_pkey.get())}},
        std::tuple{ca_crt, false, std::function<bool(FILE*)>{pem_cert(ca->get())}},
        std::tuple{key, true, std::function<bool(FILE*)>{pem_key(pkey.get())}},
        std::tuple{crt, false, std::function<bool(FILE*)>{pem_cert(cert->get())}}})
    if (auto ok = write_pem(path, secret, write); !ok) return ok;
  std::string names;
  for (auto& h : hosts) names += (names.empty() ? "" : ", ") + h;
  return "made a CA and a cluster certificate in " + opt.dir + " (valid " + std::to_string(opt.days) + " days):\n" +
         "  " + ca_crt + "       the cluster's CA (every process trusts it: --tls-ca)\n" +
         "  " + ca_key + "       its key (0600): keep it off the cluster's machines once certificates are made\n" +
         "  " + crt + "  the certificate every process shows (--tls-cert), naming " + names + "\n" +
         "  " + key + "  its key (0600, --tls-key)\n" +
         "start with: tune start --head --tls-cert " + crt + " --tls-key " + key + " --tls-ca " + ca_crt;
}

}  // namespace tune::tls
