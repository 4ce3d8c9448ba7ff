// Several people on one cluster (docs/users.md), with real processes on loopback: a head,
// a node that joined with the node token, and users made with `tune user add`. Each
// user's token acts only on what is theirs — through the CLI, the cluster protocol and
// the dashboard's API — and is refused naming the owner; the node token joins nodes and
// does nothing else; a user's experiment runs with its checkpoints copied (the trial's
// own access secret, not the node's token); users outlive a head restart.
#include <gtest/gtest.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <optional>
#include <regex>
#include <thread>

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
    auto n = files.tune({"start", "--address", address, "--num-cpus", "4", "--num-gpus", "4", "--token-file", node_token()});
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

  int head_pid = 0;
  bool start_head() {
    auto h = files.tune({"start", "--head", "--port", std::to_string(port), "--host", "127.0.0.1", "--dashboard-port", "0"});
    EXPECT_EQ(h.rc, 0) << h.out << h.err;
    head_pid = pid_in(h.out);
    std::smatch m;
    if (std::regex_search(h.out, m, std::regex{R"(dashboard:\s+(http://\S+?)/?\s)"})) dashboard = m[1];
    EXPECT_FALSE(dashboard.empty()) << h.out;
    return h.rc == 0;
  }

  // The project folder `tune run` ships (trial.py from tests/programs), with an
  // experiment file NAME.yaml: `name`, metric val_acc, the command, and `rest`.
  std::string project() const { return files.dir() + "/project"; }
  void experiment_file(const std::string& name, const std::string& rest, const std::string& args = "") const {
    fs::create_directories(project());
    if (!fs::exists(project() + "/trial.py")) fs::copy_file(std::string{PROGRAMS_DIR} + "/trial.py", project() + "/trial.py");
    std::ofstream(project() + "/" + name + ".yaml")
        << "name: " << name << "\nmetric: val_acc\ncommand: [" << py() << ", trial.py" << args << "]\nprogress: none\n" << rest;
  }
  // tune run NAME.yaml as `user`, into files.dir()/NAME.
  run_result run_as(const std::string& user, const std::string& name) const {
    return run({tune_binary(), "run", name + ".yaml", "--address", address, "--token-file", token_of(user), "--experiment-dir",
                files.dir() + "/" + name},
               {{"TUNE_RUNTIME_DIR", files.dir()}, {"CUDA_VISIBLE_DEVICES", ""}}, 180s, project());
  }

  // tune ARGS against the cluster with this token file.
  run_result as(const std::string& token_file, std::vector<std::string> args) {
    args.insert(args.end(), {"--address", address, "--token-file", token_file});
    return files.tune(args);
  }

  // GET PATH from the dashboard's API with this token: {HTTP status, body}.
  std::pair<int, nlohmann::json> get(const std::string& token_file, const std::string& path) {
    auto [code, body] = http_get(dashboard + path, token_file);
    return {code, code < 0 ? nlohmann::json(body) : nlohmann::json::parse(body, nullptr, false)};
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
  auto exp = files.dir() + "/anns";
  experiment_file("anns", "num_samples: 3\nspace: {x: {uniform: [0.0, 1.0]}, epochs: 3, sleep: 0.05}\n");
  auto r = run_as("ann", "anns");
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

// A group over its user's quota waits in the head's records, saying why; another user's
// group goes past it; it is placed once its user gives a share back.
TEST_F(UsersClusterTest, AGroupOverItsUsersQuotaWaitsSayingWhy) {
  auto first = as(token_of("ann"), {"group", "create", "--bundles", R"([{"gpu": 1}, {"gpu": 0.5}])", "--id", "a1", "--wait", "10"});
  ASSERT_EQ(first.rc, 0) << first.err;
  auto over = as(token_of("ann"), {"group", "create", "--bundles", R"([{"gpu": 1}])", "--id", "a2"});
  ASSERT_EQ(over.rc, 0) << over.err;
  auto bobs = as(token_of("bob"), {"group", "create", "--bundles", R"([{"gpu": 2}])", "--id", "b1", "--wait", "10"});
  EXPECT_EQ(bobs.rc, 0) << "bob's group goes past ann's: " << bobs.err;
  auto group = [&](const std::string& id) {
    auto status = nlohmann::json::parse(as(files.token_file(), {"status", "--json"}).out, nullptr, false);
    if (status.is_object())
      for (auto& g : status["placement_groups"])
        if (g["id"] == id) return g;
    return nlohmann::json();
  };
  EXPECT_EQ(group("a2")["state"], "pending") << over.out;
  EXPECT_EQ(group("a2")["reason"],
            "over ann's quota of 2 gpus: 1.5 in use, it asks 1 (it waits until ann's other groups give some back)");
  // The text status shows it too.
  EXPECT_TRUE(contains(as(token_of("ann"), {"status"}).out, "over ann's quota of 2 gpus")) << as(token_of("ann"), {"status"}).out;
  ASSERT_EQ(as(token_of("ann"), {"group", "remove", "a1"}).rc, 0);
  EXPECT_TRUE(wait_until([&] { return group("a2")["state"] == "created"; }, 10s)) << group("a2");
  // More than the quota at all: refused at once with what to do.
  auto huge = as(token_of("ann"), {"group", "create", "--bundles", R"([{"gpu": 3}])", "--wait", "5"});
  EXPECT_NE(huge.rc, 0);
  EXPECT_TRUE(contains(huge.out + huge.err, "more than ann's quota of 2")) << huge.out << huge.err;
}

// A user's experiment asks for more than her quota: the head's records never show her
// holding more than it, sampled all along, and every trial still runs to its end.
TEST_F(UsersClusterTest, AnExperimentIsHeldToItsUsersQuotaAtEveryMoment) {
  ASSERT_EQ(as(files.token_file(), {"user", "set", "ann", "--gpus", "1"}).rc, 0);
  auto exp = files.dir() + "/quota";
  experiment_file("quota", "num_samples: 6\nresources_per_trial: {gpu: 0.5, cpu: 0.5}\n"
                           "space: {x: {uniform: [0.0, 1.0]}, epochs: 4, sleep: 0.1}\n");
  std::atomic<bool> done{false};
  run_result r;
  std::thread driver([&] {
    r = run_as("ann", "quota");
    done = true;
  });
  double most = 0;
  int samples = 0, waiting_seen = 0;
  while (!done) {
    auto st = nlohmann::json::parse(as(files.token_file(), {"status", "--json"}).out, nullptr, false);
    if (st.is_object()) {
      double held = 0;
      for (auto& g : st["placement_groups"]) {
        if (g.value("owner", "") != "ann") continue;
        auto state = g.value("state", "");
        if (state == "created" || state == "preparing" || state == "rescheduling")
          for (auto& b : g["bundles"])
            for (auto& c : b.value("gpus", nlohmann::json::array())) held += c.value("share", 0.0);
        waiting_seen += state == "pending" && contains(g.value("reason", ""), "over ann's quota of 1 gpus");
      }
      most = std::max(most, held);
      ++samples;
    }
    std::this_thread::sleep_for(50ms);
  }
  driver.join();
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_GE(samples, 5);
  EXPECT_LE(most, 1.0 + 1e-9) << "ann held more GPUs than her quota";
  EXPECT_GT(most, 0.0);
  EXPECT_GT(waiting_seen, 0) << "no group was seen waiting for her quota";
  auto store = experiment_store::open(exp);
  ASSERT_TRUE(store);
  auto trials = (*store)->trials();
  ASSERT_TRUE(trials);
  ASSERT_EQ(trials->size(), 6u);
  for (auto& t : *trials) EXPECT_EQ(t.state, "terminated") << t.id << ": " << t.error;
}

// A high-priority user's experiment started on a cluster full of a low-priority user's
// trials gets its cards within seconds: the head asks the fewest low-priority trials to
// move (paused through their checkpoints), and each of them later completes from its
// checkpoint with every iteration stored once.
TEST_F(UsersClusterTest, AHighPriorityExperimentPreemptsLowerTrialsThroughTheirCheckpoints) {
  ASSERT_EQ(as(files.token_file(), {"user", "set", "ann", "--priority", "10", "--gpus", "none"}).rc, 0);
  auto experiment = [&](const std::string& name, int trials, int epochs, double sleep) {
    experiment_file(name, "num_samples: " + std::to_string(trials) + "\nresources_per_trial: {gpu: 1, cpu: 0.5}\n" +
                              "space: {x: {uniform: [0.0, 1.0]}, epochs: " + std::to_string(epochs) +
                              ", sleep: " + std::to_string(sleep) + "}\n");
  };
  experiment("low", 4, 30, 0.2);
  experiment("high", 2, 3, 0.05);
  auto launch = [&](const std::string& name, const std::string& user, run_result& r, std::atomic<bool>& done) {
    return std::thread([&, name, user] {
      r = run_as(user, name);
      done = true;
    });
  };
  auto created_of = [&](const std::string& user) {
    int n = 0;
    auto st = nlohmann::json::parse(as(files.token_file(), {"status", "--json"}).out, nullptr, false);
    if (st.is_object())
      for (auto& g : st["placement_groups"]) n += g.value("owner", "") == user && g.value("state", "") == "created";
    return n;
  };
  run_result low, high;
  std::atomic<bool> low_done{false}, high_done{false};
  auto t_low = launch("low", "bob", low, low_done);
  ASSERT_TRUE(wait_until([&] { return created_of("bob") == 4; }, 30s)) << "bob's trials fill the 4 cards";
  auto asked = std::chrono::steady_clock::now();
  const double asked_wall = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  auto t_high = launch("high", "ann", high, high_done);
  auto got = wait_until([&] { return created_of("ann") >= 1 || high_done; }, 30s);
  auto waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - asked).count();
  t_high.join();
  t_low.join();
  ASSERT_TRUE(got);
  EXPECT_LT(waited, 10.0) << "ann's first trial waited " << waited << " s for its card";
  std::cerr << "[ann's first card after " << waited << " s]\n";
  ASSERT_EQ(high.rc, 0) << high.out << high.err;
  ASSERT_EQ(low.rc, 0) << low.out << low.err;
  // Bob's trials: some were preempted, saying why; every one completed with every
  // iteration stored once.
  auto store = experiment_store::open(files.dir() + "/low");
  ASSERT_TRUE(store);
  auto events = (*store)->events();
  ASSERT_TRUE(events);
  int preempted = 0;
  for (auto& e : *events)
    preempted += e.kind == "move" && contains(e.body.value("why", ""), "preempted for placement group");
  EXPECT_GE(preempted, 1) << "no trial of bob's was preempted";
  for (auto& e : *events)
    if (e.kind.rfind("checkpoint", 0) != 0)
      std::cerr << "[bob's " << e.trial << " " << e.kind << " at +" << e.time - asked_wall << " s: " << e.body.dump().substr(0, 200) << "]\n";
  for (auto& f : fs::directory_iterator(files.dir()))
    if (f.path().filename().string().rfind("head-", 0) == 0 && f.path().extension() == ".log") {
      std::ifstream in(f.path());
      for (std::string line; std::getline(in, line);)
        if (contains(line, "asked to move") || contains(line, "placement group")) std::cerr << "[head] " << line << "\n";
    }
  if (auto hs = experiment_store::open(files.dir() + "/high"); hs)
    if (auto he = (*hs)->events(); he)
      for (auto& e : *he) std::cerr << "[ann's " << e.trial << " " << e.kind << " at +" << e.time - asked_wall << " s]\n";
  auto trials = (*store)->trials();
  ASSERT_TRUE(trials);
  ASSERT_EQ(trials->size(), 4u);
  for (auto& t : *trials) {
    EXPECT_EQ(t.state, "terminated") << t.id << ": " << t.error;
    auto results = (*store)->results(t.id);
    ASSERT_TRUE(results);
    std::vector<int64_t> its;
    for (auto& r : *results) its.push_back(r.iteration);
    std::vector<int64_t> want(30);
    std::iota(want.begin(), want.end(), 1);
    EXPECT_EQ(its, want) << t.id << ": every iteration once";
  }
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

// Trials never run as root: a root node runs them as nobody (its --trial-user), or as
// the Unix account in their user's settings. The files they write are that account's,
// their folders are closed to other accounts, and their access secrets are out of reach.
TEST_F(UsersClusterTest, TrialsRunAsTheirUsersAccountNeverAsRoot) {
  if (::geteuid() != 0 || ::access("/usr/sbin/useradd", X_OK) != 0) GTEST_SKIP() << "needs root and useradd";
  std::map<std::string, uid_t> uid;
  for (auto name : {"tunetest-ann", "tunetest-bob"}) {
    if (!::getpwnam(name)) run({"/usr/sbin/useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name});
    auto* pw = ::getpwnam(name);
    ASSERT_TRUE(pw) << "could not make account " << name;
    uid[name] = pw->pw_uid;
  }
  auto* nobody = ::getpwnam("nobody");
  ASSERT_TRUE(nobody);
  ASSERT_EQ(as(files.token_file(), {"user", "set", "ann", "--account", "tunetest-ann"}).rc, 0);
  ASSERT_EQ(as(files.token_file(), {"user", "set", "bob", "--account", "tunetest-bob"}).rc, 0);
  experiment_file("who", "num_samples: 2\nspace: {x: {uniform: [0.0, 1.0]}}\n", ", --mode, whoami");
  // Each user's trials report who they ran as; the admin's (no account) run as nobody.
  auto who = [&](const std::string& user, const std::string& exp) {
    auto r = user == "admin" ? run({tune_binary(), "run", "who.yaml", "--address", address, "--token-file", files.token_file(),
                                    "--experiment-dir", files.dir() + "/" + exp},
                                   {{"TUNE_RUNTIME_DIR", files.dir()}, {"CUDA_VISIBLE_DEVICES", ""}}, 180s, project())
                             : run({tune_binary(), "run", "who.yaml", "--address", address, "--token-file", token_of(user),
                                    "--experiment-dir", files.dir() + "/" + exp},
                                   {{"TUNE_RUNTIME_DIR", files.dir()}, {"CUDA_VISIBLE_DEVICES", ""}}, 180s, project());
    EXPECT_EQ(r.rc, 0) << r.out << r.err;
    auto store = experiment_store::open(files.dir() + "/" + exp);
    EXPECT_TRUE(store);
    auto rows = store ? (*store)->results() : expected<std::vector<result_row>>{status{errc::not_found, "no store"}};
    EXPECT_TRUE(rows && rows->size() == 2) << (rows ? rows->size() : 0);
    return rows ? *rows : std::vector<result_row>{};
  };
  auto node_dir = files.dir() + "/" + node;
  for (auto& [user, account] : {std::pair{std::string{"ann"}, std::string{"tunetest-ann"}}, {"bob", "tunetest-bob"},
                                {"admin", "nobody"}}) {
    uid_t expected_uid = account == "nobody" ? nobody->pw_uid : uid[account];
    for (auto& row : who(user, user + "-who")) {
      EXPECT_EQ(row.metrics["uid"], expected_uid) << user << "'s trial " << row.trial;
      EXPECT_EQ(row.metrics["read_secret"], 0) << user << "'s trial read its access secret";
      EXPECT_EQ(row.metrics["others"], 0) << user << "'s trial looked into another trial's folder";
      EXPECT_EQ(row.metrics["home_is_trial_dir"], 1) << "a system account without a home: HOME is its folder";
    }
  }
  // On the node: every trial folder 0700 and its account's, and what the trial wrote too.
  int folders = 0;
  for (auto& dir : fs::directory_iterator(node_dir + "/trials")) {
    struct stat s {};
    ASSERT_EQ(::stat(dir.path().c_str(), &s), 0);
    EXPECT_NE(s.st_uid, 0u) << dir.path() << " is root's";
    EXPECT_EQ(s.st_mode & 0777, 0700u) << dir.path();
    struct stat f {};
    ASSERT_EQ(::stat((dir.path() / "work/mine.txt").c_str(), &f), 0) << dir.path();
    EXPECT_EQ(f.st_uid, s.st_uid) << "a file the trial wrote belongs to its account";
    ++folders;
  }
  EXPECT_EQ(folders, 6);
  struct stat access {};
  ASSERT_EQ(::stat((node_dir + "/access").c_str(), &access), 0);
  EXPECT_EQ(access.st_uid, 0u);
  EXPECT_EQ(access.st_mode & 0777, 0700u);
  // An account the node does not have: a clear refusal of the start, naming it.
  ASSERT_EQ(as(files.token_file(), {"user", "set", "bob", "--account", "no-such-account"}).rc, 0);
  experiment_file("who1", "num_samples: 1\nmax_failures: 0\nspace: {x: {uniform: [0.0, 1.0]}}\n", ", --mode, whoami");
  auto bad = run({tune_binary(), "run", "who1.yaml", "--address", address, "--token-file", token_of("bob"), "--experiment-dir",
                  files.dir() + "/bad-who"},
                 {{"TUNE_RUNTIME_DIR", files.dir()}, {"CUDA_VISIBLE_DEVICES", ""}}, 180s, project());
  auto bad_store = experiment_store::open(files.dir() + "/bad-who");
  ASSERT_TRUE(bad_store);
  auto bad_trials = (*bad_store)->trials();
  ASSERT_TRUE(bad_trials && bad_trials->size() == 1) << bad.out << bad.err;
  EXPECT_TRUE(contains((*bad_trials)[0].error, "no Unix account no-such-account")) << (*bad_trials)[0].error;
  for (auto name : {"tunetest-ann", "tunetest-bob"}) run({"/usr/sbin/userdel", name});
}

// The head killed while users hold groups: the nodes keep the bundles, and their keys say
// whose they are, so after the restart only their owner (or the admin) claims them.
TEST_F(UsersClusterTest, AfterAHeadRestartOnlyItsOwnerClaimsAGroupTheNodesKept) {
  std::string bundles = R"([{"cpu": 1}, {"gpu": 0.5}])";
  for (auto user : {"ann", "bob"}) {
    auto made = as(token_of(user), {"group", "create", "--bundles", bundles, "--id", std::string{user} + "-keep", "--wait", "10"});
    ASSERT_EQ(made.rc, 0) << made.out << made.err;
  }
  ASSERT_GT(head_pid, 0);
  ASSERT_EQ(::kill(head_pid, SIGKILL), 0);
  ASSERT_TRUE(wait_until([&] { return ::kill(head_pid, 0) != 0; }, 5s));
  ASSERT_TRUE(start_head());
  ASSERT_TRUE(wait_until([&] {
    auto s = files.status(address);
    return !s.is_null() && s["alive_nodes"] == 1 && s["orphaned_bundles"].size() == 4;
  }, 15s, 100ms)) << files.status(address).dump();
  // Bob cannot take Ann's (the refusal names her); she claims hers, he his.
  auto taken = as(token_of("bob"), {"group", "create", "--bundles", bundles, "--id", "ann-keep", "--json"});
  EXPECT_NE(taken.rc, 0) << taken.out;
  EXPECT_TRUE(contains(taken.out + taken.err, "held on node " + node + " for ann since before the head restarted")) << taken.out << taken.err;
  for (auto user : {"ann", "bob"}) {
    auto again = as(token_of(user), {"group", "create", "--bundles", bundles, "--id", std::string{user} + "-keep", "--json"});
    ASSERT_EQ(again.rc, 0) << again.out << again.err;
    EXPECT_TRUE(contains(again.out, "\"created\"")) << user << ": " << again.out;  // adopted at once, as held
  }
  auto mine = as(token_of("ann"), {"group", "get", "ann-keep"});
  EXPECT_EQ(mine.rc, 0) << mine.err;
  auto theirs = as(token_of("ann"), {"group", "get", "bob-keep"});
  EXPECT_TRUE(contains(theirs.err, "belongs to bob")) << theirs.err;
  auto s = files.status(address);
  EXPECT_TRUE(s["orphaned_bundles"].empty()) << s.dump();
  // Her quota counts what she claimed again (2 GPUs: 0.5 held, 1.5 left).
  auto over = as(token_of("ann"), {"group", "create", "--bundles", R"([{"gpu": 2}])", "--id", "ann-more", "--json"});
  EXPECT_TRUE(contains(over.out + over.err, "quota")) << over.out << over.err;
}

// Two users of weights 2 and 1, both asking for more than the cluster has: while both
// wait for cards (after the first trials handed back what one took before the other
// asked), the GPU-time each holds, sampled from the head's records, is within 10% of the
// weights' 2:1.
TEST_F(UsersClusterTest, GpuTimeSharesFollowTheWeightsWithinTenPercent) {
  ASSERT_EQ(as(files.token_file(), {"user", "set", "ann", "--gpus", "none", "--weight", "2"}).rc, 0);
  ASSERT_EQ(as(files.token_file(), {"user", "set", "bob", "--weight", "1"}).rc, 0);
  for (auto name : {"share-ann", "share-bob"})
    // Quarter cards: 16 places, so that 2:1 can come close (10 or 11 of 16 for ann).
    // 60 trials each: the run lasts long enough (about 6 s) for the samples while both
    // wait, now that trials start with one round trip to the head (40 ended too soon).
    experiment_file(name, "num_samples: 60\nresources_per_trial: {gpu: 0.25, cpu: 0.25}\n"
                          "space: {x: {uniform: [0.0, 1.0]}, epochs: 8, sleep: 0.1}\n");
  std::atomic<int> running{2};
  run_result ra, rb;
  std::thread a([&] { ra = run_as("ann", "share-ann"); --running; });
  std::thread b([&] { rb = run_as("bob", "share-bob"); --running; });
  double ann_time = 0, bob_time = 0;  // GPUs held, summed over the samples where both wait
  int contended = 0;
  auto last = std::chrono::steady_clock::now();
  std::optional<std::chrono::steady_clock::time_point> since;
  while (running == 2) {
    auto st = nlohmann::json::parse(as(files.token_file(), {"status", "--json"}).out, nullptr, false);
    auto now = std::chrono::steady_clock::now();
    double dt = std::chrono::duration<double>(now - last).count();
    last = now;
    if (!st.is_object()) continue;
    std::map<std::string, double> held;
    std::map<std::string, int> waiting;
    for (auto& g : st["placement_groups"]) {
      auto owner = g.value("owner", ""), state = g.value("state", "");
      if (state == "created" || state == "preparing" || state == "rescheduling")
        for (auto& bundle : g["bundles"])
          for (auto& c : bundle.value("gpus", nlohmann::json::array())) held[owner] += c.value("share", 0.0);
      waiting[owner] += state == "pending";
    }
    // Both want more than they have; from 1.5 s after that was first seen (what the first
    // of them took before the other asked is handed back as its trials end, ~0.8 s each).
    if (waiting["ann"] > 0 && waiting["bob"] > 0 && !since) since = now;
    if (waiting["ann"] > 0 && waiting["bob"] > 0 && now - *since > 1500ms) {
      ann_time += held["ann"] * dt;
      bob_time += held["bob"] * dt;
      ++contended;
    }
    std::this_thread::sleep_for(20ms);
  }
  a.join();
  b.join();
  ASSERT_EQ(ra.rc, 0) << ra.out << ra.err;
  ASSERT_EQ(rb.rc, 0) << rb.out << rb.err;
  ASSERT_GE(contended, 20) << "too few samples with both users waiting to judge the shares";
  double ann_share = ann_time / (ann_time + bob_time);
  EXPECT_NEAR(ann_share, 2.0 / 3.0, 0.1 * 2.0 / 3.0) << "ann's GPU-time share over " << contended << " samples";
  std::cerr << "[ann's GPU-time share while both waited: " << ann_share << " over " << contended << " samples]\n";
}

// While ann's and bob's experiments run, each sees their own trials on the nodes whole
// (host memory, CPU) and the other's only counted, "held by" them: through the JSON and
// the text of tune status.
TEST_F(UsersClusterTest, OnTheNodesAUserSeesOtherUsersTrialsOnlyAsHeldByThem) {
  for (auto name : {"view-ann", "view-bob"})
    experiment_file(name, "num_samples: 4\nresources_per_trial: {cpu: 0.25}\n"
                          "space: {x: {uniform: [0.0, 1.0]}, epochs: 10, sleep: 0.3}\n");
  std::atomic<int> running{2};
  run_result ra, rb;
  std::thread a([&] { ra = run_as("ann", "view-ann"); --running; });
  std::thread b([&] { rb = run_as("bob", "view-bob"); --running; });
  bool seen = false, text_seen = false;
  std::string leaked;
  while (running == 2 && !(seen && text_seen)) {
    auto st = nlohmann::json::parse(as(token_of("bob"), {"status", "--json"}).out, nullptr, false);
    if (st.is_object())
      for (auto& n : st["nodes"]) {
        const auto host = n.value("trial_host", nlohmann::json::object());
        for (auto& [id, use] : host.items())
          if (use.value("owner", "") != "bob") leaked = id + " " + use.dump();
        const auto held = n.value("trials_held_by", nlohmann::json::object());
        bool anns = held.value("ann", 0) >= 1;
        seen = seen || (anns && !host.empty());
      }
    if (seen && !text_seen) text_seen = contains(as(token_of("bob"), {"status"}).out, "held by ann (");
    std::this_thread::sleep_for(100ms);
  }
  a.join();
  b.join();
  ASSERT_EQ(ra.rc, 0) << ra.out << ra.err;
  ASSERT_EQ(rb.rc, 0) << rb.out << rb.err;
  EXPECT_TRUE(seen) << "bob never saw his own trials' host use beside ann's trials counted";
  EXPECT_TRUE(text_seen) << "tune status's text never said 'held by ann (N trials)'";
  EXPECT_TRUE(leaked.empty()) << "bob's status listed another user's trial: " << leaked;
}

}  // namespace
}  // namespace tune::test
