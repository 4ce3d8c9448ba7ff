// A cluster that uses TLS, with head and nodes on separate hosts (network namespaces):
// experiments run end to end, a capture of the wire (tshark) shows neither the token nor
// a configuration value, peers without a certificate of the cluster's CA are refused and
// never appear, and bytes that are not TLS leave every process running.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include "harness.hpp"

namespace tune::test {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

std::string py() { return ::access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3"; }
std::string slurp(const std::string& path) {
  std::ifstream in{path, std::ios::binary};
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}
bool contains(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

// A certificate and key in `out` that the CA in `ca_dir` signed and that expired
// yesterday (`tune tls init` makes no such thing).
void write_expired_certificate(const std::string& ca_dir, const std::string& out) {
  fs::create_directories(out);
  FILE* kf = std::fopen((ca_dir + "/ca.key").c_str(), "r");
  ASSERT_NE(kf, nullptr);
  EVP_PKEY* ca_key = PEM_read_PrivateKey(kf, nullptr, nullptr, nullptr);
  std::fclose(kf);
  FILE* cf = std::fopen((ca_dir + "/ca.crt").c_str(), "r");
  ASSERT_NE(cf, nullptr);
  X509* ca = PEM_read_X509(cf, nullptr, nullptr, nullptr);
  std::fclose(cf);
  ASSERT_TRUE(ca_key && ca);
  EVP_PKEY* key = EVP_EC_gen("P-256");
  X509* cert = X509_new();
  X509_set_version(cert, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert), 77);
  X509_gmtime_adj(X509_getm_notBefore(cert), -2 * 86400);
  X509_gmtime_adj(X509_getm_notAfter(cert), -86400);
  X509_set_pubkey(cert, key);
  X509_NAME_add_entry_by_txt(X509_get_subject_name(cert), "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("expired-node"), -1, -1, 0);
  X509_set_issuer_name(cert, X509_get_subject_name(ca));
  ASSERT_GT(X509_sign(cert, ca_key, EVP_sha256()), 0);
  FILE* o = std::fopen((out + "/cluster.crt").c_str(), "w");
  PEM_write_X509(o, cert);
  std::fclose(o);
  o = std::fopen((out + "/cluster.key").c_str(), "w");
  PEM_write_PrivateKey(o, key, nullptr, nullptr, 0, nullptr, nullptr);
  std::fclose(o);
  ::chmod((out + "/cluster.key").c_str(), 0600);
  X509_free(cert);
  X509_free(ca);
  EVP_PKEY_free(key);
  EVP_PKEY_free(ca_key);
}

class TlsNetnsTest : public ::testing::Test {
 protected:
  cluster_files files;
  std::unique_ptr<netns_lab> lab;
  std::string head = netns_lab::address(0) + ":6380";
  std::string tls_dir, other_dir;
  const std::string canary = "canary-7d3f19b2";  // a configuration value to look for on the wire

  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "network namespaces need root";
    if (run({"ip", "netns", "list"}).rc != 0) GTEST_SKIP() << "no `ip netns` here";
    lab = std::make_unique<netns_lab>(3);
    ASSERT_TRUE(lab->ok()) << "could not build the namespaces: " << lab->why();
    tls_dir = files.dir() + "/tls";
    other_dir = files.dir() + "/other-ca";
    for (auto& d : {tls_dir, other_dir}) {
      auto r = files.tune({"tls", "init", d, "--host", netns_lab::address(0)});
      ASSERT_EQ(r.rc, 0) << r.out << r.err;
    }
  }
  void TearDown() override {
    if (!lab || !lab->ok()) return;
    for (int h = 0; h < 3; ++h) files.tune({"stop", "--grace", "3"}, lab->on(h), runtime(h));
    lab.reset();
  }
  std::string runtime(int host) const { return files.dir() + "/host" + std::to_string(host); }
  std::vector<std::string> tls(const std::string& dir) const {
    return {"--tls-cert", dir + "/cluster.crt", "--tls-key", dir + "/cluster.key", "--tls-ca", tls_dir + "/ca.crt"};
  }
  std::vector<std::string> with(std::vector<std::string> args, const std::vector<std::string>& more) const {
    args.insert(args.end(), more.begin(), more.end());
    return args;
  }
  run_result start_head(bool use_tls) {
    auto r = files.tune(with({"start", "--head", "--host", netns_lab::address(0), "--no-dashboard"}, use_tls ? tls(tls_dir) : std::vector<std::string>{}),
                        lab->on(0), runtime(0));
    EXPECT_EQ(r.rc, 0) << r.out << r.err;
    return r;
  }
  run_result start_node(int host, const std::vector<std::string>& extra) {
    return files.tune(with({"start", "--address", head, "--num-gpus", "2", "--num-cpus", "2"}, extra), lab->on(host),
                      runtime(host));
  }
  nlohmann::json status(const std::vector<std::string>& extra, int from = 0) {
    auto r = files.tune(with({"status", "--address", head, "--json"}, extra), lab->on(from), runtime(from));
    return r.rc == 0 ? nlohmann::json::parse(r.out, nullptr, false) : nlohmann::json{};
  }
  // An experiment of 4 Python trials whose configuration holds `canary`, run from host 2.
  run_result experiment(const std::vector<std::string>& extra) {
    std::string project = files.dir() + "/project";
    fs::create_directories(project);
    fs::copy_file(std::string{PROGRAMS_DIR} + "/trial.py", project + "/trial.py", fs::copy_options::overwrite_existing);
    std::ofstream(project + "/tls.yaml") << "name: tls\nmetric: val_acc\ncommand: [" << py()
                                         << ", trial.py]\nprogress: none\nnum_samples: 4\n"
                                            "space: {x: {uniform: [0.0, 1.0]}, epochs: 3, sleep: 0.05, tag: "
                                         << canary << "}\n";
    std::vector<std::string> argv = lab->on(2);
    argv.insert(argv.end(), {TUNE_BINARY, "run", "tls.yaml", "--address", head, "--token-file", files.token_file(),
                             "--experiment-dir", files.dir() + "/exp"});
    argv.insert(argv.end(), extra.begin(), extra.end());
    return run(argv, {{"TUNE_RUNTIME_DIR", runtime(2)}, {"CUDA_VISIBLE_DEVICES", ""}}, 120s, project);
  }
  // tshark on the head's host for `seconds`, written to `file`.
  std::thread capture(const std::string& file, int seconds) {
    std::vector<std::string> argv = lab->on(0);
    argv.insert(argv.end(), {"tshark", "-q", "-i", "eth0", "-a", "duration:" + std::to_string(seconds), "-w", file});
    return std::thread([argv, seconds] { run(argv, {}, std::chrono::seconds(seconds + 20)); });
  }
  std::string token() const {
    std::ifstream in{files.token_file()};
    std::string t;
    std::getline(in, t);
    return t;
  }
};

// The check below can fail: on a plain cluster the same capture holds the token and
// the configuration value.
TEST_F(TlsNetnsTest, APlainClustersTrafficShowsTheTokenAndTheConfig) {
  if (run({"tshark", "--version"}).rc != 0) GTEST_SKIP() << "no tshark (deploy/install-deps.sh installs it)";
  start_head(false);
  auto pcap = files.dir() + "/plain.pcap";
  ::chmod(files.dir().c_str(), 0755);  // tshark's dumpcap writes the file
  auto t = capture(pcap, 12);
  std::this_thread::sleep_for(1500ms);  // tshark listening
  ASSERT_EQ(start_node(1, {}).rc, 0);
  auto r = experiment({});
  t.join();
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  auto wire = slurp(pcap);
  ASSERT_GT(wire.size(), 10000u) << "the capture holds too little";
  EXPECT_TRUE(contains(wire, token())) << "the token travels in clear on a plain cluster";
  EXPECT_TRUE(contains(wire, canary)) << "the configuration travels in clear on a plain cluster";
}

TEST_F(TlsNetnsTest, ATlsClusterRunsExperimentsAndItsTrafficShowsNeitherTokenNorConfig) {
  if (run({"tshark", "--version"}).rc != 0) GTEST_SKIP() << "no tshark (deploy/install-deps.sh installs it)";
  auto h = start_head(true);
  EXPECT_TRUE(contains(h.out, "with TLS")) << h.out;
  auto pcap = files.dir() + "/tls.pcap";
  ::chmod(files.dir().c_str(), 0755);
  auto t = capture(pcap, 12);
  std::this_thread::sleep_for(1500ms);
  auto n = start_node(1, tls(tls_dir));
  ASSERT_EQ(n.rc, 0) << n.out << n.err;
  auto r = experiment(tls(tls_dir));
  t.join();
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  // Its summary (the last line of its output): 4 trials, 3 results each, no error.
  ASSERT_NE(r.out.find('{'), std::string::npos) << r.out;
  auto summary = nlohmann::json::parse(r.out.substr(r.out.find('{')), nullptr, false);
  ASSERT_TRUE(summary.is_object()) << r.out;
  EXPECT_EQ(summary["trials"], 4);
  EXPECT_EQ(summary["results"], 12);
  EXPECT_EQ(summary["errors"], 0);
  EXPECT_EQ(summary["best_config"]["tag"], canary);
  auto wire = slurp(pcap);
  ASSERT_GT(wire.size(), 10000u) << "the capture holds too little";
  EXPECT_FALSE(contains(wire, token())) << "the token is readable on the wire";
  EXPECT_FALSE(contains(wire, canary)) << "a configuration value is readable on the wire";
  auto s = status(tls(tls_dir));
  ASSERT_TRUE(s.is_object());
  EXPECT_EQ(s["alive_nodes"], 1);
}

// A node with a certificate of another CA, with none, or with an expired one is refused
// (saying why) and never appears; a TLS node to a plain head says so too.
TEST_F(TlsNetnsTest, NodesWithoutACertificateOfTheClustersCaAreRefusedAndNeverAppear) {
  start_head(true);
  auto good = start_node(1, tls(tls_dir));
  ASSERT_EQ(good.rc, 0) << good.out << good.err;
  // Another CA's certificate (trusting ours): the head refuses it.
  auto other = start_node(2, tls(other_dir));
  EXPECT_NE(other.rc, 0) << other.out;
  EXPECT_TRUE(contains(other.err, "refused")) << other.err;
  // Another CA altogether: this node refuses the head's certificate.
  auto stranger = start_node(2, {"--tls-cert", other_dir + "/cluster.crt", "--tls-key", other_dir + "/cluster.key",
                                 "--tls-ca", other_dir + "/ca.crt"});
  EXPECT_NE(stranger.rc, 0);
  EXPECT_TRUE(contains(stranger.err, "not from this cluster's CA")) << stranger.err;
  // No certificate: plain bytes to a TLS head.
  auto plain = start_node(2, {});
  EXPECT_NE(plain.rc, 0);
  EXPECT_TRUE(contains(plain.err, "if its cluster uses TLS, give --tls-cert")) << plain.err;
  // A key readable by others is refused before anything is sent.
  fs::copy(tls_dir, files.dir() + "/loose", fs::copy_options::recursive);
  ::chmod((files.dir() + "/loose/cluster.key").c_str(), 0644);
  auto loose = start_node(2, tls(files.dir() + "/loose"));
  EXPECT_NE(loose.rc, 0);
  EXPECT_TRUE(contains(loose.err, "chmod 600")) << loose.err;
  // An expired certificate of the cluster's CA: a node refuses its own at start, and a
  // peer that presents one anyway (OpenSSL's s_client) is refused by the head.
  const std::string expired = files.dir() + "/expired";
  write_expired_certificate(tls_dir, expired);
  auto stale = start_node(2, tls(expired));
  EXPECT_NE(stale.rc, 0);
  EXPECT_TRUE(contains(stale.err, "expired")) << stale.err;
  std::vector<std::string> hello = lab->on(2);
  hello.insert(hello.end(), {"openssl", "s_client", "-connect", head, "-tls1_3", "-cert", expired + "/cluster.crt", "-key",
                             expired + "/cluster.key", "-CAfile", tls_dir + "/ca.crt", "-verify_return_error", "-ign_eof"});
  std::this_thread::sleep_for(1100ms);  // the head logs one refusal a second
  auto peer = run(hello, {}, 20s);
  EXPECT_TRUE(contains(peer.out + peer.err, "alert")) << "the head did not refuse an expired certificate:\n" << peer.out << peer.err;
  std::string head_log;
  for (int i = 0; i < 50 && !contains(head_log, "expired"); ++i) {
    std::this_thread::sleep_for(100ms);
    head_log = slurp(runtime(0) + "/head-6380.log");
  }
  EXPECT_TRUE(contains(head_log, "expired")) << "the head's log does not say why it refused the peer:\n" << head_log;
  auto s = status(tls(tls_dir));
  ASSERT_TRUE(s.is_object());
  EXPECT_EQ(s["nodes"].size(), 1u) << "only the node with the cluster's certificate appears: " << s.dump();
  EXPECT_EQ(s["alive_nodes"], 1);
  // A client without TLS is told what to give.
  auto bare = files.tune({"status", "--address", head}, lab->on(2), runtime(2));
  EXPECT_NE(bare.rc, 0);
  EXPECT_TRUE(contains(bare.err, "--tls-cert")) << bare.err;
}

// Plain bytes, random bytes and a TLS hello to a plain head leave every process
// running; the head's resident memory stays flat.
TEST_F(TlsNetnsTest, BytesThatAreNotTlsLeaveEveryProcessRunning) {
  auto h = start_head(true);
  int head_pid = pid_in(h.out);
  ASSERT_EQ(start_node(1, tls(tls_dir)).rc, 0);
  std::string script =
      "import socket, sys, random, ssl\n"
      "host, port = sys.argv[1], int(sys.argv[2])\n"
      "random.seed(5)\n"
      "for i in range(20):\n"
      "  s = socket.create_connection((host, port), timeout=5)\n"
      "  if i == 0: s.sendall(b'\\x01' + bytes(31))\n"                        // a plain BASP header
      "  elif i == 1: s.sendall(b'\\x01\\x00\\x00\\x00\\xff\\xff\\xff\\xf0' + bytes(24))\n"  // a 4 GiB claim, plain
      "  else: s.sendall(bytes(random.getrandbits(8) for _ in range(4096)))\n"
      "  s.close()\n"
      // A TLS session with the cluster's own certificate, then a header claiming 4 GiB.
      "ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT); ctx.check_hostname = False\n"
      "ctx.load_verify_locations(sys.argv[3]); ctx.load_cert_chain(sys.argv[4], sys.argv[5])\n"
      "t = ctx.wrap_socket(socket.create_connection((host, port), timeout=5))\n"
      "t.sendall(b'\\x01\\x00\\x00\\x00\\xff\\xff\\xff\\xf0' + bytes(24))\n"
      "try:\n  t.recv(10)\nexcept Exception:\n  pass\n";
  std::vector<std::string> argv = lab->on(2);
  argv.insert(argv.end(), {py(), "-c", script, netns_lab::address(0), "6380", tls_dir + "/ca.crt", tls_dir + "/cluster.crt",
                           tls_dir + "/cluster.key"});
  auto r = run(argv, {}, 30s);
  EXPECT_EQ(r.rc, 0) << r.err;
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(::kill(head_pid, 0), 0) << "the head died";
  auto s = status(tls(tls_dir));
  ASSERT_TRUE(s.is_object()) << "the head stopped answering";
  EXPECT_EQ(s["alive_nodes"], 1);
  long rss_kib = resident_kib(head_pid);
  EXPECT_LT(rss_kib, 200 * 1024) << "the head holds " << rss_kib << " KiB";
}

// A node told to use TLS against a plain head says so.
TEST_F(TlsNetnsTest, ATlsNodeToAPlainHeadSaysSo) {
  start_head(false);
  auto n = start_node(1, tls(tls_dir));
  EXPECT_NE(n.rc, 0);
  EXPECT_TRUE(contains(n.err, "TLS")) << n.err;
  auto s = status({});
  ASSERT_TRUE(s.is_object());
  EXPECT_EQ(s["nodes"].size(), 0u);
}

}  // namespace
}  // namespace tune::test
