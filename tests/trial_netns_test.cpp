// Program shipping between hosts: the head in one network namespace (host 0), a node
// with logical GPUs in another (host 1), and a client process (tests/trial_client.cpp)
// in a third (host 2). The program exists only on the client's side: the test moves
// it into a tmpfs that the client mounts in its own mount namespace, so no other
// process can read it by any path; the node is told its name, SHA-256 and size, and
// fetches it over the network. Needs root and iproute2; skips without.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include "harness.hpp"

namespace tune::test {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

std::string worker_binary() { return built_or_moved("TRIAL_WORKER", TRIAL_WORKER); }

std::string client_binary() { return built_or_moved("TRIAL_CLIENT", TRIAL_CLIENT); }

// By another implementation than the product's.
std::string sha256_of(const std::string& path) {
  auto r = run({"sha256sum", path});
  return r.rc == 0 ? r.out.substr(0, 64) : "sha256sum failed: " + r.err;
}

size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (auto p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), {}};
}

class TrialNetnsTest : public ::testing::Test {
 protected:
  cluster_files files;
  std::unique_ptr<netns_lab> lab;
  std::string head = netns_lab::address(0) + ":6380";
  std::string node_id;

  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "network namespaces need root";
    if (run({"ip", "netns", "list"}).rc != 0) GTEST_SKIP() << "no `ip netns` here";
    lab = std::make_unique<netns_lab>(3);
    if (!lab->ok()) {
      auto why = lab->why();
      lab.reset();
      GTEST_SKIP() << "cannot make network namespaces here: " << why;
    }
    auto h = files.tune({"start", "--head", "--host", netns_lab::address(0)}, lab->on(0), runtime(0));
    ASSERT_EQ(h.rc, 0) << h.out << h.err;
    auto n = files.tune({"start", "--address", head, "--num-gpus", "2"}, lab->on(1), runtime(1));
    ASSERT_EQ(n.rc, 0) << n.out << n.err;
    node_id = node_id_in(n.out);
    ASSERT_FALSE(node_id.empty()) << n.out;
  }
  void TearDown() override {
    if (!lab) return;
    for (int h : {1, 0}) files.tune({"stop", "--grace", "3"}, lab->on(h), runtime(h));
    lab.reset();  // kills whatever is left in the namespaces
  }

  std::string runtime(int host) const { return files.dir() + "/host" + std::to_string(host); }
  std::string node_dir() const { return runtime(1) + "/" + node_id; }

  // The trial worker, made longer than two 4 MiB chunks (what follows an ELF
  // executable's segments is never loaded).
  std::string program_file(const std::string& name) {
    auto dir = files.dir() + "/client-src";
    fs::create_directories(dir);
    auto path = dir + "/" + name;
    fs::copy_file(worker_binary(), path);
    std::ofstream(path, std::ios::app) << std::string(9u << 20, '\0');
    return path;
  }

  // Runs trial_client on host 2. It first mounts a tmpfs of its own (`ip netns exec`
  // gives it a mount namespace whose mounts stay its own) and moves the program there:
  // from then on the client's process is the only one that can read the file.
  run_result client(const std::string& scenario, const std::string& program, std::vector<std::string> extra = {}) {
    std::string own = files.dir() + "/client-only";
    fs::create_directories(own);
    std::string script =
        "own=\"$1\" src=\"$2\" head=\"$3\" token=\"$4\" scenario=\"$5\"; shift 5; "
        "mount -t tmpfs tune-client \"$own\" && mv \"$src\" \"$own/trainable\" && "
        "exec \"$0\" --address \"$head\" --token-file \"$token\" --program \"$own/trainable\" --scenario \"$scenario\" \"$@\"";
    std::vector<std::string> argv = lab->on(2);
    argv.insert(argv.end(), {"sh", "-c", script, client_binary(), own, program, head, files.token_file(), scenario});
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto r = run(argv, {}, 40s);
    EXPECT_FALSE(fs::exists(program)) << "the program was not moved into the client's own mount";
    EXPECT_FALSE(fs::exists(own + "/trainable")) << "the client's program is visible outside the client";
    return r;
  }
  static nlohmann::json last_json(const std::string& out) {
    auto end = out.find_last_not_of('\n');
    auto begin = out.rfind('\n', end);
    auto j = nlohmann::json::parse(out.substr(begin == std::string::npos ? 0 : begin + 1), nullptr, false);
    return j.is_discarded() ? nlohmann::json{} : j;
  }

  // Bytes received and sent on a host's link.
  std::pair<int64_t, int64_t> traffic(int host) {
    auto r = run({"ip", "-n", lab->name(host), "-s", "-j", "link", "show", "eth0"});
    auto j = nlohmann::json::parse(r.out, nullptr, false);
    if (j.is_discarded() || !j.is_array() || j.empty()) return {-1, -1};
    return {j[0]["stats64"]["rx"]["bytes"].get<int64_t>(), j[0]["stats64"]["tx"]["bytes"].get<int64_t>()};
  }
  // What /proc/self/ns/net says for a process on the host.
  std::string netns_of(int host) {
    struct stat st {};
    if (::stat(("/run/netns/" + lab->name(host)).c_str(), &st) != 0) return "no namespace";
    return "net:[" + std::to_string(st.st_ino) + "]";
  }
  // Slows host 2's outgoing traffic to 32 Mbit/s: a 4 MiB chunk takes a second.
  std::string throttle_client(bool on) {
    std::vector<std::string> argv = lab->on(2);
    if (on) argv.insert(argv.end(), {"tc", "qdisc", "add", "dev", "eth0", "root", "tbf", "rate", "32mbit", "burst", "32kbit", "latency", "1s"});
    else argv.insert(argv.end(), {"tc", "qdisc", "del", "dev", "eth0", "root"});
    auto r = run(argv);
    return r.rc == 0 ? "" : "`tc` failed: " + r.err;
  }
  // Whether the node has begun to fetch: its first chunk is in a hidden temporary file.
  bool fetching() {
    for (auto& f : cached_files())
      if (f[0] == '.') return true;
    return false;
  }
  std::vector<std::string> cached_files() {
    std::vector<std::string> names;
    std::error_code ec;
    for (auto& e : fs::directory_iterator(node_dir() + "/programs", ec)) names.push_back(e.path().filename().string());
    return names;
  }
};

TEST_F(TrialNetnsTest, AProgramOnlyTheClientHasIsFetchedByANodeOnAnotherHost) {
  auto program = program_file("trainable");
  auto sha = sha256_of(program);
  auto size = fs::file_size(program);
  ASSERT_GT(size, 8u << 20) << "three chunks";
  std::pair<int64_t, int64_t> before[3], after[3];
  for (int h = 0; h < 3; ++h) before[h] = traffic(h);
  auto r = client("ship", program);
  for (int h = 0; h < 3; ++h) after[h] = traffic(h);
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  auto out = last_json(r.out);
  ASSERT_TRUE(out.is_object()) << r.out;
  EXPECT_EQ(out["program"]["sha256"], sha);
  EXPECT_EQ(out["program"]["size"], size);

  // Both bundles, and so both trials, on the node of host 1.
  ASSERT_EQ(out["group"]["bundles"].size(), 2u) << out["group"].dump();
  for (auto& b : out["group"]["bundles"]) EXPECT_EQ(b["node"], node_id);
  auto status = files.status(head, lab->on(0));
  ASSERT_FALSE(status.is_null());
  ASSERT_EQ(status["nodes"].size(), 1u);
  EXPECT_EQ(status["nodes"][0]["id"], node_id);
  EXPECT_EQ(status["nodes"][0]["address"], netns_lab::address(1));
  ASSERT_EQ(out["trials"].size(), 2u);
  for (auto& t : out["trials"]) {
    ASSERT_TRUE(t["ok"]) << t.dump();
    auto id = t["id"].get<std::string>();
    EXPECT_EQ(t["started"]["node"], node_id);
    EXPECT_EQ(t["started"]["trial_dir"], node_dir() + "/trials/" + id);
    std::vector<std::string> kinds;
    nlohmann::json seen, end;
    for (auto& e : t["events"]) {
      kinds.push_back(e["kind"]);
      if (e["kind"] == "done") seen = nlohmann::json::parse(e["body"]["message"].get<std::string>(), nullptr, false);
      if (e["kind"] == "ended") end = e["body"];
    }
    EXPECT_EQ(kinds, (std::vector<std::string>{"started", "result", "result", "result", "done", "ended"})) << t.dump();
    EXPECT_TRUE(end["ok"]) << t.dump();
    EXPECT_EQ(end["results"], 3);
    ASSERT_TRUE(seen.is_object()) << t.dump();
    EXPECT_EQ(seen["netns"], netns_of(1)) << "the worker did not run on host 1";
    EXPECT_EQ(seen["cwd"], node_dir() + "/trials/" + id);
    EXPECT_EQ(seen["TUNE_TRIAL_ID"], id);
    EXPECT_EQ(seen["gpus"].size(), 1u);
  }

  // The node's cache holds the program, byte for byte, and nothing else.
  auto cached = node_dir() + "/programs/" + sha;
  EXPECT_EQ(sha256_of(cached), sha);
  EXPECT_EQ(::access(cached.c_str(), X_OK), 0);
  EXPECT_EQ(cached_files(), std::vector<std::string>{sha}) << "a partial fetch left behind";
  // Fetched once: the second trial started from the cache.
  auto log = read_all(runtime(1) + "/" + node_id + ".log");
  EXPECT_EQ(count_of(log, "fetched"), 1u) << log;
  EXPECT_EQ(count_of(log, "program trainable (" + sha.substr(0, 12) + ") fetched"), 1u) << log;

  // It came over the network: host 1 received at least the program's bytes. Which
  // way it came is printed (CAF 0.17 relays it through the head: the client has no
  // listening port, and automatic connections are off).
  EXPECT_GE(after[1].first - before[1].first, static_cast<int64_t>(size));
  const char* role[] = {"head", "node", "client"};
  for (int h = 0; h < 3; ++h)
    std::cout << "host " << h << " (" << role[h] << "): received " << (after[h].first - before[h].first) << " bytes, sent "
              << (after[h].second - before[h].second) << " bytes; the program is " << size << " bytes\n";
}

TEST_F(TrialNetnsTest, AProgramThatCannotBeFetchedFailsTheStartAndNothingHangs) {
  auto program = program_file("trainable");
  auto sha = sha256_of(program);
  auto r = client("fail", program);
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_LT(r.took, 20s);
  auto out = last_json(r.out);
  ASSERT_TRUE(out.is_object()) << r.out;

  // A SHA-256 that the client does not serve.
  auto& unknown = out["unknown"];
  ASSERT_FALSE(unknown["ok"]) << unknown.dump();
  auto why = unknown["error"].get<std::string>();
  EXPECT_NE(why.find("cannot fetch program trainable"), std::string::npos) << why;
  EXPECT_NE(why.find("no such program here"), std::string::npos) << why;
  EXPECT_LT(unknown["start_ms"].get<int64_t>(), 5000);

  // A program served, but gone from the client's disk when the node asks.
  auto& vanished = out["vanished"];
  ASSERT_FALSE(vanished["ok"]) << vanished.dump();
  why = vanished["error"].get<std::string>();
  EXPECT_NE(why.find("cannot fetch program trainable.vanishing"), std::string::npos) << why;
  EXPECT_NE(why.find("changed on disk"), std::string::npos) << why;
  EXPECT_LT(vanished["start_ms"].get<int64_t>(), 5000);

  // A program that changed after it was served: fetched whole, and its hash is wrong.
  auto& changed = out["changed"];
  ASSERT_FALSE(changed["ok"]) << changed.dump();
  why = changed["error"].get<std::string>();
  EXPECT_NE(why.find("cannot fetch program trainable.changing: its SHA-256 is "), std::string::npos) << why;
  EXPECT_NE(why.find("not " + changed["program"]["sha256"].get<std::string>()), std::string::npos) << why;
  EXPECT_LT(changed["start_ms"].get<int64_t>(), 5000);

  // None left anything on the node, which then starts the good program at once.
  for (auto id : {"t-unknown", "t-vanished", "t-changed"}) EXPECT_FALSE(fs::exists(node_dir() + "/trials/" + id)) << id;
  auto& after = out["after"];
  ASSERT_TRUE(after["ok"]) << after.dump();
  EXPECT_EQ(after["started"]["node"], node_id);
  ASSERT_FALSE(after["events"].empty());
  EXPECT_EQ(after["events"].back()["kind"], "ended");
  EXPECT_TRUE(after["events"].back()["body"]["ok"]) << after.dump();
  EXPECT_EQ(cached_files(), std::vector<std::string>{sha}) << "a failed fetch left something in the cache";
  EXPECT_EQ(files.state_of(head, node_id, lab->on(0)), "alive");
}

// The client dies while the node fetches its program (its link throttled, so that a
// chunk takes seconds). The node is not held up: another client's trial of the same
// program starts at once, and the dead client's trial never starts.
TEST_F(TrialNetnsTest, AClientGoneMidFetchDoesNotHoldUpTheNode) {
  if (auto why = throttle_client(true); !why.empty()) GTEST_SKIP() << "cannot slow down a link here (sch_tbf): " << why;
  auto program = program_file("trainable");
  auto sha = sha256_of(program);
  run_result gone;
  std::thread first([&] { gone = client("ship", program, {"--trials", "1", "--prefix", "gone-"}); });
  auto began = wait_until([&] { return fetching(); }, 20s, 2ms);
  run({"sh", "-c", "ip netns pids " + lab->name(2) + " | xargs -r kill -9"});
  first.join();
  ASSERT_TRUE(began) << "the node never began to fetch: " << gone.out << gone.err;
  EXPECT_EQ(gone.rc, 128 + SIGKILL) << "it was not waiting for its trial to start: " << gone.out << gone.err;
  ASSERT_EQ(throttle_client(false), "");

  auto r = client("ship", program_file("trainable"), {"--trials", "1", "--prefix", "next-"});
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  auto out = last_json(r.out);
  ASSERT_TRUE(out.is_object()) << r.out;
  ASSERT_EQ(out["trials"].size(), 1u);
  auto& t = out["trials"][0];
  ASSERT_TRUE(t["ok"]) << t.dump();
  EXPECT_LT(t["start_ms"].get<int64_t>(), 5000) << "the node waited for the dead client's fetch";
  EXPECT_EQ(t["started"]["node"], node_id);
  ASSERT_FALSE(t["events"].empty());
  EXPECT_EQ(t["events"].back()["kind"], "ended");
  EXPECT_TRUE(t["events"].back()["body"]["ok"]) << t.dump();
  EXPECT_EQ(sha256_of(node_dir() + "/programs/" + sha), sha);
  EXPECT_FALSE(fs::exists(node_dir() + "/trials/gone-0")) << "the dead client's trial started";
  // The head removed the dead client's group, and the other client its own.
  auto status = files.status(head, lab->on(0));
  ASSERT_FALSE(status.is_null());
  ASSERT_EQ(status["placement_groups"].size(), 2u) << status.dump();
  for (auto& g : status["placement_groups"]) EXPECT_EQ(g["state"], "removed") << g.dump();
}

// The group is removed (here with `tune group remove`) while the node fetches the
// program for a trial in it: the trial does not start in the released bundle.
TEST_F(TrialNetnsTest, NoTrialStartsInABundleReleasedWhileItsProgramWasFetched) {
  if (auto why = throttle_client(true); !why.empty()) GTEST_SKIP() << "cannot slow down a link here (sch_tbf): " << why;
  auto program = program_file("trainable");
  auto sha = sha256_of(program);
  run_result r;
  std::thread first([&] { r = client("ship", program, {"--trials", "1", "--prefix", "late-", "--group", "pg-late"}); });
  auto began = wait_until([&] { return fetching(); }, 20s, 2ms);
  auto removed = files.tune({"group", "remove", "pg-late", "--address", head}, lab->on(0));
  first.join();
  ASSERT_TRUE(began) << "the node never began to fetch: " << r.out << r.err;
  EXPECT_EQ(removed.rc, 0) << removed.out << removed.err;
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  auto out = last_json(r.out);
  ASSERT_EQ(out["trials"].size(), 1u) << r.out;
  auto& t = out["trials"][0];
  ASSERT_FALSE(t["ok"]) << "a trial started in a released bundle: " << t.dump();
  EXPECT_NE(t["error"].get<std::string>().find("was released while its program was fetched"), std::string::npos) << t.dump();
  EXPECT_FALSE(fs::exists(node_dir() + "/trials/late-0"));
  // The program was fetched whole: it is kept for the next trial.
  EXPECT_EQ(sha256_of(node_dir() + "/programs/" + sha), sha);
  // Nothing held on the node (by its heartbeats).
  nlohmann::json last;
  EXPECT_TRUE(wait_until([&] {
    last = files.status(head, lab->on(0));
    if (last.is_null() || last["nodes"].size() != 1) return false;
    auto& res = last["nodes"][0]["resources"];
    return res["available"] == res["total"];
  }, 5s, 200ms)) << last.dump();
}

}  // namespace
}  // namespace tune::test
