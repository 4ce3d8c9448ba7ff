// Several people on one cluster (docs/users.md), with real processes on loopback: a head,
// a node that joined with the node token, and users made with `tune user add`. Each
// user's token acts only on what is theirs — through the CLI, the cluster protocol and
// the dashboard's API — and is refused naming the owner; the node token joins nodes and
// does nothing else; a user's experiment runs with its checkpoints copied (the trial's
// own access secret, not the node's token); users outlive a head restart.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include "harness.hpp"
#include "tune/tuner/store.hpp"

namespace tune::test {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

std::string tune_binary() { return built_or_moved("TUNE_BINARY", TUNE_BINARY); }
std::string py() { return ::access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3"; }
bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

class UsersClusterTest : public ::testing::Test {
 protected:
  cluster_files files;
  int port = free_port();
  std::string address = "127.0.0.1:" + std::to_string(port);
  std::string dashboard, node;

  std::string node_token() const { return files.dir() + "/node-token"; }
  std::string token_of(const std::string& user) const { return files.dir() + "/users/" + user + ".token"; }

  void SetUp() override {
    ASSERT_TRUE(start_head());
    auto n = files.tune({"start", "--address", address, "--num-cpus", "4", "--token-file", node_token()});
    ASSERT_EQ(n.rc, 0) << n.out << n.err;
    node = node_id_in(n.out);
    for (auto [name, gpus] : {std::pair{"ann", "2"}, std::pair{"bob", "none"}}) {
      auto r = as(files.token_file(), {"user", "add", name, "--gpus", gpus, "--weight", "2"});
      ASSERT_EQ(r.rc, 0) << r.out << r.err;
      ASSERT_TRUE(fs::exists(token_of(name))) << r.out;
      EXPECT_EQ(fs::status(token_of(name)).permissions() & fs::perms::all, fs::perms::owner_read | fs::perms::owner_write);
    }
  }
  void TearDown() override { files.tune({"stop", "--grace", "3"}); }

  bool start_head() {
    auto h = files.tune({"start", "--head", "--port", std::to_string(port), "--host", "127.0.0.1", "--dashboard-port", "0"});
    EXPECT_EQ(h.rc, 0) << h.out << h.err;
    std::smatch m;
    if (std::regex_search(h.out, m, std::regex{R"(dashboard:\s+(http://\S+?)/?\s)"})) dashboard = m[1];
    EXPECT_FALSE(dashboard.empty()) << h.out;
    return h.rc == 0;
  }

  // tune ARGS against the cluster with this token file.
  run_result as(const std::string& token_file, std::vector<std::string> args) {
    args.insert(args.end(), {"--address", address, "--token-file", token_file});
    return files.tune(args);
  }

  // GET PATH from the dashboard's API with this token: {HTTP status, body}.
  std::pair<int, nlohmann::json> get(const std::string& token_file, const std::string& path) {
    std::ifstream in(token_file);
    std::string token;
    std::getline(in, token);
    auto r = run({py(), "-c",
                  "import sys, urllib.request, urllib.error\n"
                  "req = urllib.request.Request(sys.argv[1], headers={'Authorization': 'Bearer ' + sys.argv[2]})\n"
                  "try:\n  r = urllib.request.urlopen(req, timeout=10); print(r.status); print(r.read().decode())\n"
                  "except urllib.error.HTTPError as e:\n  print(e.code); print(e.read().decode())\n",
                  dashboard + path, token});
    auto nl = r.out.find('\n');
    if (r.rc != 0 || nl == std::string::npos) return {-1, r.err};
    return {std::stoi(r.out.substr(0, nl)), nlohmann::json::parse(r.out.substr(nl + 1), nullptr, false)};
  }
};

TEST_F(UsersClusterTest, EachTokenActsOnlyOnWhatIsItsOwnAndTheNodeTokenOnlyJoins) {
  auto made = as(token_of("ann"), {"group", "create", "--bundles", R"([{"cpu": 1}])", "--id", "ann-g", "--wait", "10"});
  ASSERT_EQ(made.rc, 0) << made.out << made.err;
  // Another user can neither read, wait for, nor remove it; the refusal names its owner.
  for (auto args : {std::vector<std::string>{"group", "get", "ann-g"}, std::vector<std::string>{"group", "remove", "ann-g"}}) {
    auto r = as(token_of("bob"), args);
    EXPECT_NE(r.rc, 0) << args[1];
    EXPECT_TRUE(contains(r.err, "placement group ann-g belongs to ann: only ann or the cluster's admin can")) << r.err;
  }
  // Its owner sees it in the status, marked as theirs; bob sees it held by ann.
  auto mine = nlohmann::json::parse(as(token_of("ann"), {"status", "--json"}).out);
  auto theirs = nlohmann::json::parse(as(token_of("bob"), {"status", "--json"}).out);
  auto find = [](const nlohmann::json& s) {
    for (auto& g : s["placement_groups"])
      if (g["id"] == "ann-g") return g;
    return nlohmann::json();
  };
  EXPECT_EQ(find(mine)["owner"], "ann") << mine.dump();
  EXPECT_EQ(find(theirs)["held_by"], "ann") << theirs.dump();
  EXPECT_FALSE(find(mine).contains("held_by"));

  // The node token joins nodes and does nothing else.
  for (auto args : {std::vector<std::string>{"status"}, std::vector<std::string>{"user", "list"},
                    std::vector<std::string>{"group", "create", "--bundles", R"([{"cpu": 1}])"}}) {
    auto r = as(node_token(), args);
    EXPECT_NE(r.rc, 0) << args[0];
    EXPECT_TRUE(contains(r.err, "the node token lets nodes join and nothing else")) << r.err;
  }
  // A user's token cannot join a node, drain one, rebalance or manage users.
  auto join = files.tune({"start", "--address", address, "--num-cpus", "1", "--token-file", token_of("bob")});
  EXPECT_NE(join.rc, 0);
  EXPECT_TRUE(contains(join.out + join.err, "a user's token cannot join a node")) << join.out << join.err;
  for (auto args : {std::vector<std::string>{"drain", node}, std::vector<std::string>{"rebalance"},
                    std::vector<std::string>{"user", "add", "eve"}, std::vector<std::string>{"user", "token", "ann"}}) {
    auto r = as(token_of("bob"), args);
    EXPECT_NE(r.rc, 0) << args[0];
    EXPECT_TRUE(contains(r.err, "only the cluster's admin (the head's own token) can")) << r.err;
    EXPECT_TRUE(contains(r.err, "user bob cannot")) << r.err;
  }
  // A token nobody has: the old message.
  std::ofstream(files.dir() + "/wrong") << std::string(64, 'a') << "\n";
  fs::permissions(files.dir() + "/wrong", fs::perms::owner_read | fs::perms::owner_write, fs::perm_options::replace);
  EXPECT_TRUE(contains(as(files.dir() + "/wrong", {"status"}).err, "does not match"));

  // The owner and the admin may remove; a removed user's token stops at once.
  EXPECT_EQ(as(token_of("ann"), {"group", "remove", "ann-g"}).rc, 0);
  auto gone = as(files.token_file(), {"user", "remove", "bob"});
  ASSERT_EQ(gone.rc, 0) << gone.err;
  EXPECT_TRUE(contains(as(token_of("bob"), {"status"}).err, "does not match"));
  // Bad settings are refused before anything changes.
  auto bad = as(files.token_file(), {"user", "add", "eve", "--gpus", "lots"});
  EXPECT_EQ(bad.rc, 2);
  EXPECT_TRUE(contains(bad.err, "--gpus lots: give a number of gpus")) << bad.err;
  auto taken = as(files.token_file(), {"user", "add", "ann"});
  EXPECT_TRUE(contains(taken.err, "there is already a user ann")) << taken.err;
}

TEST_F(UsersClusterTest, AUsersExperimentRunsWithItsCheckpointsAndStaysTheirs) {
  auto project = files.dir() + "/project";
  auto exp = files.dir() + "/exp";
  fs::create_directories(project);
  fs::copy_file(std::string{PROGRAMS_DIR} + "/trial.py", project + "/trial.py");
  std::ofstream(project + "/e.yaml") << "name: anns\nmetric: val_acc\ncommand: [" << py() << R"(, trial.py]
num_samples: 3
space: {x: {uniform: [0.0, 1.0]}, epochs: 3, sleep: 0.05}
progress: none
)";
  auto r = run({tune_binary(), "run", "e.yaml", "--address", address, "--token-file", token_of("ann"), "--experiment-dir", exp},
               {{"TUNE_RUNTIME_DIR", files.dir()}, {"CUDA_VISIBLE_DEVICES", ""}}, 120s, project);
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  // Its checkpoints were copied from the node with each trial's access secret (a user's
  // token is not the node's).
  auto store = experiment_store::open(exp);
  ASSERT_TRUE(store);
  auto trials = (*store)->trials();
  ASSERT_TRUE(trials);
  ASSERT_EQ(trials->size(), 3u);
  for (auto& t : *trials) {
    EXPECT_EQ(t.state, "terminated") << t.id << ": " << t.error;
    EXPECT_TRUE(fs::exists((*store)->checkpoint_dir(t.id) + "/3/state.json")) << t.id;
  }
  auto events = (*store)->events("");
  ASSERT_TRUE(events);
  for (auto& e : *events) EXPECT_NE(e.kind, "checkpoint_copy_failed") << e.body;

  // The dashboard: ann reads her experiment; bob sees who holds it and nothing of it.
  auto [code, list] = get(token_of("bob"), "/api/experiments");
  ASSERT_EQ(code, 200) << list;
  ASSERT_EQ(list.size(), 1u) << list;
  EXPECT_EQ(list[0]["owner"], "ann");
  EXPECT_FALSE(list[0].contains("name")) << list;
  EXPECT_FALSE(list[0].contains("best")) << list;
  auto id = list[0]["id"].get<std::string>();
  auto [denied, why] = get(token_of("bob"), "/api/experiments/" + id);
  EXPECT_EQ(denied, 403);
  EXPECT_TRUE(contains(why.dump(), "belongs to ann")) << why;
  EXPECT_EQ(get(token_of("bob"), "/api/experiments/" + id + "/trials/trial-00001").first, 403);
  EXPECT_EQ(get(token_of("bob"), "/metrics").first, 403);
  auto [ok, page] = get(token_of("ann"), "/api/experiments/" + id);
  EXPECT_EQ(ok, 200);
  EXPECT_EQ(page["name"], "anns");
  EXPECT_EQ(get(files.token_file(), "/api/experiments/" + id).first, 200);  // the admin reads all
  EXPECT_EQ(get(node_token(), "/api/experiments").first, 401);
}

TEST_F(UsersClusterTest, UsersAndTheirSettingsOutliveAHeadRestart) {
  ASSERT_EQ(as(files.token_file(), {"user", "set", "ann", "--max-trials", "3", "--priority", "5"}).rc, 0);
  auto before = nlohmann::json::parse(as(files.token_file(), {"user", "list", "--json"}).out);
  ASSERT_EQ(files.tune({"stop", "--grace", "3"}).rc, 0);
  ASSERT_TRUE(start_head());
  auto after = as(files.token_file(), {"user", "list", "--json"});
  ASSERT_EQ(after.rc, 0) << after.err;
  EXPECT_EQ(nlohmann::json::parse(after.out), before);
  EXPECT_EQ(before[0]["name"], "ann");
  EXPECT_EQ(before[0]["gpus"], 2.0);
  EXPECT_EQ(before[0]["max_trials"], 3);
  EXPECT_EQ(before[0]["priority"], 5);
  EXPECT_EQ(as(token_of("ann"), {"status"}).rc, 0) << "her token still works";
  // A new token ends the old one.
  auto fresh = as(files.token_file(), {"user", "token", "ann", "--new", "--out", files.dir() + "/ann2.token"});
  ASSERT_EQ(fresh.rc, 0) << fresh.err;
  EXPECT_TRUE(contains(as(token_of("ann"), {"status"}).err, "does not match"));
  EXPECT_EQ(as(files.dir() + "/ann2.token", {"status"}).rc, 0);
}

}  // namespace
}  // namespace tune::test
