#include "tune/net/tls.hpp"

#include <gtest/gtest.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <sys/stat.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

namespace tune::tls {
namespace {

namespace fs = std::filesystem;

struct TlsTest : ::testing::Test {
  std::string dir = fs::temp_directory_path() / ("tls-test-" + std::to_string(::getpid()));
  void SetUp() override { fs::remove_all(dir); }
  void TearDown() override { fs::remove_all(dir); }
  files set(const std::string& d) const { return {d + "/cluster.crt", d + "/cluster.key", d + "/ca.crt"}; }
  std::string make(const std::string& d) {
    auto made = init({d});
    EXPECT_TRUE(made) << made.error().message();
    return made ? *made : "";
  }
};

// Shuttles bytes between a client and a server session until neither has output; the
// first failure's reason in `why`.
bool handshake(session& client, session& server, std::string& why, std::string* to_server_plain = nullptr,
               std::string* to_client_plain = nullptr) {
  std::string a, b, plain_s, plain_c;
  if (!client.start(why)) return false;
  for (int round = 0; round < 20; ++round) {
    a.clear();
    client.take_output(a);
    if (!a.empty() && !server.receive(a.data(), a.size(), plain_s, why)) return false;
    b.clear();
    server.take_output(b);
    if (!b.empty() && !client.receive(b.data(), b.size(), plain_c, why)) return false;
    if (a.empty() && b.empty()) break;
  }
  if (to_server_plain) *to_server_plain = plain_s;
  if (to_client_plain) *to_client_plain = plain_c;
  return client.established() && server.established();
}

TEST_F(TlsTest, InitMakesACaAndACertificateWithPrivateKeys) {
  auto text = make(dir);
  EXPECT_NE(text.find("tune start --head --tls-cert"), std::string::npos) << text;
  for (auto [name, mode] : {std::pair{"ca.crt", 0644}, {"ca.key", 0600}, {"cluster.crt", 0644}, {"cluster.key", 0600}}) {
    struct stat st {};
    ASSERT_EQ(::stat((dir + "/" + name).c_str(), &st), 0) << name;
    EXPECT_EQ(st.st_mode & 0777, static_cast<unsigned>(mode)) << name;
  }
  auto again = init({dir});
  ASSERT_FALSE(again);
  EXPECT_NE(again.error().message().find("exists"), std::string::npos) << again.error().message();
  init_options force{dir};
  force.force = true;
  EXPECT_TRUE(init(force));
  EXPECT_FALSE(init({""}));
  init_options bad{dir + "/x"};
  bad.days = 0;
  EXPECT_FALSE(init(bad));
}

TEST_F(TlsTest, BothSidesOfOneClusterHandshakeInTls13AndCarryBytes) {
  make(dir);
  auto server = context::make(set(dir), true);
  auto client = context::make(set(dir), false);
  ASSERT_TRUE(server) << server.error().message();
  ASSERT_TRUE(client) << client.error().message();
  session s{**server}, c{**client};
  std::string why;
  ASSERT_TRUE(c.send("hello head", why));  // before the handshake: held, then sent
  std::string got_s, got_c;
  ASSERT_TRUE(handshake(c, s, why, &got_s, &got_c)) << why;
  EXPECT_EQ(got_s, "hello head");
  ASSERT_TRUE(s.send(std::string(100000, 'x'), why));
  std::string cipher, plain;
  s.take_output(cipher);
  EXPECT_EQ(cipher.find("xxxxxxxx"), std::string::npos) << "the bytes travel encrypted";
  ASSERT_TRUE(c.receive(cipher.data(), cipher.size(), plain, why)) << why;
  EXPECT_EQ(plain, std::string(100000, 'x'));
}

TEST_F(TlsTest, APeerWithACertificateOfAnotherCaIsRefusedNamingIt) {
  make(dir);
  make(dir + "/other");
  auto server = context::make(set(dir), true);
  auto stranger = context::make(set(dir + "/other"), false);
  ASSERT_TRUE(server && stranger);
  session s{**server}, c{**stranger};
  std::string why;
  EXPECT_FALSE(handshake(c, s, why));
  EXPECT_NE(why.find("certificate"), std::string::npos) << why;
  // A client of this cluster refuses a server of another, too.
  auto other_server = context::make(set(dir + "/other"), true);
  auto client = context::make(set(dir), false);
  session s2{**other_server}, c2{**client};
  why.clear();
  EXPECT_FALSE(handshake(c2, s2, why));
  EXPECT_NE(why.find("not from this cluster's CA"), std::string::npos) << why;
}

TEST_F(TlsTest, PlainBytesAreNotTls) {
  make(dir);
  auto server = context::make(set(dir), true);
  session s{**server};
  std::string plain, why;
  std::string junk(64, '\x01');
  EXPECT_FALSE(s.receive(junk.data(), junk.size(), plain, why));
  EXPECT_FALSE(why.empty());
  EXPECT_TRUE(plain.empty());
}

TEST_F(TlsTest, BadFilesAreErrorsThatSayWhatToDo) {
  make(dir);
  auto f = set(dir);
  auto missing = f;
  missing.ca = dir + "/nope.crt";
  auto r = context::make(missing, true);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message().find("nope.crt (--tls-ca) is not a readable file"), std::string::npos) << r.error().message();
  auto none = files{};
  r = context::make(none, false);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message().find("tune tls init"), std::string::npos) << r.error().message();
  ::chmod(f.key.c_str(), 0644);
  r = context::make(f, true);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message().find("chmod 600"), std::string::npos) << r.error().message();
  ::chmod(f.key.c_str(), 0600);
  make(dir + "/other");
  auto mismatched = f;
  mismatched.key = dir + "/other/cluster.key";
  r = context::make(mismatched, true);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message().find("does not belong to the certificate"), std::string::npos) << r.error().message();
  auto not_pem = f;
  not_pem.cert = dir + "/junk.crt";
  std::ofstream(not_pem.cert) << "not a certificate";
  r = context::make(not_pem, true);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message().find("cannot be used"), std::string::npos) << r.error().message();
}

// A certificate of this cluster's CA that expired: the process holding it refuses to
// start with it, and a peer that uses it anyway is refused by the other side.
TEST_F(TlsTest, AnExpiredCertificateIsRefusedOnBothSides) {
  make(dir);
  // Sign an expired certificate with the cluster's CA.
  FILE* kf = std::fopen((dir + "/ca.key").c_str(), "r");
  EVP_PKEY* ca_key = PEM_read_PrivateKey(kf, nullptr, nullptr, nullptr);
  std::fclose(kf);
  FILE* cf = std::fopen((dir + "/ca.crt").c_str(), "r");
  X509* ca = PEM_read_X509(cf, nullptr, nullptr, nullptr);
  std::fclose(cf);
  ASSERT_TRUE(ca_key && ca);
  EVP_PKEY* key = EVP_EC_gen("P-256");
  X509* cert = X509_new();
  X509_set_version(cert, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert), 99);
  X509_gmtime_adj(X509_getm_notBefore(cert), -2 * 86400);
  X509_gmtime_adj(X509_getm_notAfter(cert), -86400);
  X509_set_pubkey(cert, key);
  X509_NAME_add_entry_by_txt(X509_get_subject_name(cert), "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>("old"), -1, -1, 0);
  X509_set_issuer_name(cert, X509_get_subject_name(ca));
  ASSERT_GT(X509_sign(cert, ca_key, EVP_sha256()), 0);
  fs::create_directories(dir + "/old");
  FILE* out = std::fopen((dir + "/old/cluster.crt").c_str(), "w");
  PEM_write_X509(out, cert);
  std::fclose(out);
  out = std::fopen((dir + "/old/cluster.key").c_str(), "w");
  PEM_write_PrivateKey(out, key, nullptr, nullptr, 0, nullptr, nullptr);
  std::fclose(out);
  ::chmod((dir + "/old/cluster.key").c_str(), 0600);
  files old{dir + "/old/cluster.crt", dir + "/old/cluster.key", dir + "/ca.crt"};
  auto refused = context::make(old, false);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message().find("expired"), std::string::npos) << refused.error().message();
  // Used anyway (a context made by hand): the server refuses the handshake.
  SSL_CTX* raw = SSL_CTX_new(TLS_client_method());
  SSL_CTX_use_certificate(raw, cert);
  SSL_CTX_use_PrivateKey(raw, key);
  SSL* ssl = SSL_new(raw);
  BIO* in = BIO_new(BIO_s_mem());
  BIO* wb = BIO_new(BIO_s_mem());
  SSL_set_bio(ssl, in, wb);
  SSL_set_connect_state(ssl);
  auto server = context::make(set(dir), true);
  ASSERT_TRUE(server);
  session s{**server};
  std::string why, plain;
  bool failed = false;
  for (int round = 0; round < 10 && !failed; ++round) {
    SSL_do_handshake(ssl);
    char* data = nullptr;
    long n = BIO_get_mem_data(wb, &data);
    std::string hello(data, static_cast<size_t>(std::max(0L, n)));
    (void)BIO_reset(wb);
    if (!hello.empty()) failed = !s.receive(hello.data(), hello.size(), plain, why);
    std::string back;
    s.take_output(back);
    if (!back.empty()) BIO_write(in, back.data(), static_cast<int>(back.size()));
    if (hello.empty() && back.empty()) break;
  }
  EXPECT_TRUE(failed) << "the server took an expired certificate";
  EXPECT_NE(why.find("expired"), std::string::npos) << why;
  SSL_free(ssl);
  SSL_CTX_free(raw);
  X509_free(cert);
  X509_free(ca);
  EVP_PKEY_free(key);
  EVP_PKEY_free(ca_key);
}

}  // namespace
}  // namespace tune::tls
