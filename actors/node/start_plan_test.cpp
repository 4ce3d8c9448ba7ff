// The node's start plan, edge by edge: each case is what happened, in order, and the
// commands each step gives back (written as text: "fetch_program #1").
#include "start_plan.hpp"
#include "tune/core/overloaded.hpp"

#include <gtest/gtest.h>

namespace tune {
namespace {

const std::string sha(64, 'a');
const std::string other_sha(64, 'b');

std::string text(const start_command& c) {
  return std::visit(overloaded{
                        [](const starting::fetch_program& x) { return "fetch_program #" + std::to_string(x.start); },
                        [](const starting::fetch_workdir& x) { return "fetch_workdir #" + std::to_string(x.start); },
                        [](const starting::restore& x) {
                          return "restore #" + std::to_string(x.start) + " " + x.file.name + " into " + x.dir;
                        },
                        [](const starting::spawn& x) { return "spawn #" + std::to_string(x.start); },
                        [](const starting::refuse& x) {
                          return "refuse #" + std::to_string(x.start) + ": " + x.answer +
                                 (x.running ? " (runs: " + std::to_string(x.running) + ")" : "");
                        },
                        [](const starting::release& x) { return "release " + std::to_string(x.trial) + ": " + x.why; },
                        [](const starting::say& x) { return "say " + x.line; },
                    },
                    c);
}

struct StartPlan : ::testing::Test {
  reservation_table table{*node_resources::make(resource_set{}.set_cpu(quantity::whole(8)).set_memory(int64_t{8} << 30), {})};
  start_plan plan{"n1", "/work", table};
  bundle_key key{"g1/1/alice", 0};

  void SetUp() override { hold(key); }

  void hold(const bundle_key& k, bool commit = true) {
    ASSERT_TRUE(table.prepare(k, resource_set{}.set_cpu(quantity::whole(1)), {}, reservation_table::clock::now()));
    if (commit) {
      ASSERT_TRUE(table.commit(k));
    }
  }

  static wire::wire_trial_spec trainable(const std::string& id = "t1") {
    wire::wire_trial_spec s;
    s.trial_id = id;
    s.group = "g1";
    s.program_name = "train";
    s.program_sha256 = sha;
    return s;
  }
  static wire::wire_trial_spec program(const std::string& id = "t1") {
    wire::wire_trial_spec s;
    s.trial_id = id;
    s.group = "g1";
    s.command = {"python3", "train.py"};
    return s;
  }
  static start_facts fine() {
    start_facts f;
    f.from_head = f.has_work_dir = f.has_server = true;
    return f;
  }
  static std::string manifest(int iteration, std::vector<std::string> names) {
    std::string files;
    for (auto& n : names) files += std::string{files.empty() ? "" : ","} + R"({"name":")" + n + R"(","size":3,"sha256":")" + sha + "\"}";
    return R"({"iteration":)" + std::to_string(iteration) + R"(,"files":[)" + files + "]}";
  }

  std::vector<std::string> take() {
    std::vector<std::string> out;
    for (auto& c : plan.take()) out.push_back(text(c));
    return out;
  }
  using lines = std::vector<std::string>;
};

TEST_F(StartPlan, ATrainableFetchesItsProgramThenSpawnsAndRunsHere) {
  auto id = plan.begin(trainable(), key, fine());
  EXPECT_EQ(take(), lines{"fetch_program #1"});
  EXPECT_EQ(to_string(plan.find(id)->step), std::string{"fetching"});
  plan.on_fetched(id, status::ok());
  EXPECT_EQ(take(), lines{"spawn #1"});
  plan.on_spawned(id, 7);
  EXPECT_EQ(take(), lines{});
  EXPECT_EQ(plan.find(id), nullptr) << "a spawned start is over: its actor answers it";
  ASSERT_NE(plan.trial("t1"), nullptr);
  EXPECT_EQ(plan.trial("t1")->actor, 7u);
  EXPECT_EQ(plan.trial("t1")->key, key);
}

TEST_F(StartPlan, AProgramTrialFetchesItsWorkingDirectoryOrNothing) {
  auto in_folder = plan.begin(program("a"), key, fine());
  EXPECT_EQ(take(), lines{"spawn #1"}) << "no working directory: it runs in its trial folder, nothing to fetch";
  plan.on_spawned(in_folder, 1);
  auto shipped = program("b");
  shipped.workdir_sha256 = sha;
  auto id = plan.begin(shipped, key, fine());
  EXPECT_EQ(take(), lines{"fetch_workdir #2"});
  plan.on_fetched(id, status::ok());
  EXPECT_EQ(take(), lines{"spawn #2"});
}

// Each check at the beginning, in the node's order: refused at once, not logged.
TEST_F(StartPlan, ChecksRefuseAtOnceInTheirOrder) {
  struct check_case {
    std::function<void(wire::wire_trial_spec&, start_facts&, bundle_key&)> change;
    std::string answer;
  };
  std::vector<check_case> cases{
      {[](auto&, auto& f, auto&) { f.from_head = false; }, "node n1: trials start only through the head this node joined"},
      {[](auto&, auto& f, auto&) { f.has_work_dir = false; }, "node n1: this node runs no trials (it has no work folder)"},
      {[](auto& s, auto&, auto&) { s.trial_id = "../x"; }, "node n1: bad trial id \"../x\": no slashes, spaces or leading dot"},
      {[](auto& s, auto&, auto&) { s.trial_id = ""; }, "node n1: bad trial id \"\": no slashes, spaces or leading dot"},
      {[](auto&, auto& f, auto&) { f.account = {errc::invalid_argument, "node n1 runs as bob, not as root"}; },
       "node n1 runs as bob, not as root"},
      {[](auto&, auto&, auto& k) { k.bundle = 3; }, "node n1: it holds no committed bundle 3 of group g1"},
      {[](auto& s, auto&, auto&) { s.program_sha256 = "abc"; }, "node n1: the program's SHA-256 is not 64 hex digits"},
      {[](auto& s, auto&, auto&) { s.restore_dir = "/etc"; }, "node n1: restore folder /etc is not a trial's checkpoint on this node"},
      {[](auto& s, auto&, auto&) { s.restore_files = "[]"; }, "node n1: the checkpoint to restore is not a manifest"},
      {[](auto& s, auto&, auto&) { s.restore_files = manifest(3, {"../x"}); },
       "node n1: the checkpoint to restore names a file outside it: ../x"},
      {[](auto& s, auto& f, auto&) {
         s.restore_files = manifest(3, {"a"});
         f.has_server = false;
       },
       "node n1: the checkpoint to restore is not on this node and nobody serves it"},
  };
  for (auto& c : cases) {
    auto spec = trainable();
    auto facts = fine();
    auto k = key;
    c.change(spec, facts, k);
    auto id = plan.begin(spec, k, facts);
    EXPECT_EQ(take(), lines{"refuse #" + std::to_string(id) + ": " + c.answer});
    EXPECT_EQ(plan.find(id), nullptr);
  }
}

TEST_F(StartPlan, AProgramTrialsEnvironmentAndWorkingDirectoryAreChecked) {
  struct check_case {
    std::function<void(wire::wire_trial_spec&, start_facts&)> change;
    std::string answer;
  };
  std::vector<check_case> cases{
      {[](auto& s, auto&) { s.env = {"NOEQUALS"}; }, "node n1: the trial's environment: \"NOEQUALS\" is not NAME=VALUE"},
      {[](auto& s, auto&) { s.workdir_sha256 = "xyz"; }, "node n1: the working directory's SHA-256 is not 64 hex digits"},
      {[](auto& s, auto&) {
         s.workdir_sha256 = sha;
         s.workdir_path = "/home/a/project";
       },
       "node n1: a working directory is both shipped and run in place"},
      {[](auto& s, auto& f) {
         s.workdir_path = "/home/a/project";
         f.in_place = {errc::invalid_argument, "its working directory /home/a/project is not a folder here"};
       },
       "node n1: its working directory /home/a/project is not a folder here"},
  };
  for (auto& c : cases) {
    auto spec = program();
    auto facts = fine();
    c.change(spec, facts);
    auto id = plan.begin(spec, key, facts);
    EXPECT_EQ(take(), lines{"refuse #" + std::to_string(id) + ": " + c.answer});
  }
  auto spec = program();
  spec.env = {"1BAD=x"};
  plan.begin(spec, key, fine());
  auto out = take();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_NE(out[0].find("node n1: the trial's environment: "), std::string::npos) << out[0];
}

TEST_F(StartPlan, ATrialRunningHereIsNotStartedAgainAndItsActorIsNamed) {
  auto first = plan.begin(trainable(), key, fine());
  plan.on_fetched(first, status::ok());
  plan.on_spawned(first, 5);
  take();
  plan.begin(trainable(), key, fine());
  EXPECT_EQ(take(), lines{"refuse #2: node n1: trial t1 already runs here (runs: 5)"});
}

TEST_F(StartPlan, AFailedFetchRefusesTheStartAndSaysSo) {
  auto id = plan.begin(trainable(), key, fine());
  take();
  plan.on_fetched(id, {errc::not_found, "node n1: cannot fetch program train: its SHA-256 is x"});
  EXPECT_EQ(take(), (lines{"say trial t1 not started: cannot fetch program train: its SHA-256 is x",
                           "refuse #1: node n1: cannot fetch program train: its SHA-256 is x"}));
  EXPECT_EQ(plan.find(id), nullptr);
  plan.on_fetched(id, status::ok());
  EXPECT_EQ(take(), lines{}) << "a late answer for a start that ended is ignored";
}

TEST_F(StartPlan, ABundleReleasedDuringTheFetchRefusesTheStart) {
  auto id = plan.begin(trainable(), key, fine());
  take();
  table.abort(key);
  plan.on_fetched(id, status::ok());
  EXPECT_EQ(take(), (lines{"say trial t1 not started: bundle 0 of group g1 was released while its program was fetched",
                           "refuse #1: node n1: bundle 0 of group g1 was released while its program was fetched"}));
}

TEST_F(StartPlan, CheckpointFilesAreRestoredOneByOneThenItSpawns) {
  auto spec = trainable();
  spec.restore_dir = "/elsewhere/checkpoints/3";  // not this node's: the copy the client serves
  spec.restore_files = manifest(3, {"a", "b"});
  auto id = plan.begin(spec, key, fine());
  EXPECT_EQ(plan.find(id)->spec.restore_dir, "") << "a folder of another node is not where it starts from";
  EXPECT_EQ(take(), lines{"fetch_program #1"});
  plan.on_fetched(id, status::ok());
  EXPECT_EQ(take(), lines{"restore #1 b into /work/trials/t1/restore/3"});
  EXPECT_EQ(plan.find(id)->spec.restore_dir, "/work/trials/t1/restore/3");
  plan.on_restored(id, status::ok());
  EXPECT_EQ(take(), lines{"restore #1 a into /work/trials/t1/restore/3"});
  plan.on_restored(id, status::ok());
  EXPECT_EQ(take(), lines{"spawn #1"});
}

TEST_F(StartPlan, ALocalCheckpointFolderIsStartedFromInPlace) {
  auto spec = trainable();
  spec.restore_dir = "/work/trials/t1/checkpoints/4";
  spec.restore_files = manifest(4, {"a"});
  auto facts = fine();
  facts.restore_local = true;
  auto id = plan.begin(spec, key, facts);
  plan.on_fetched(id, status::ok());
  EXPECT_EQ(take(), (lines{"fetch_program #1", "spawn #1"})) << "nothing copied: the folder is on this node";
  EXPECT_EQ(plan.find(id)->spec.restore_dir, "/work/trials/t1/checkpoints/4");
}

TEST_F(StartPlan, AFailedCopyOrABundleReleasedDuringItRefusesTheStart) {
  auto spec = trainable();
  spec.restore_files = manifest(2, {"a", "b"});
  auto id = plan.begin(spec, key, fine());
  plan.on_fetched(id, status::ok());
  take();
  plan.on_restored(id, {errc::not_found, "node n1: cannot fetch checkpoint file b: gone"});
  EXPECT_EQ(take(), (lines{"say trial t1 not started: cannot fetch checkpoint file b: gone",
                           "refuse #1: node n1: cannot fetch checkpoint file b: gone"}));

  auto again = plan.begin(spec, key, fine());
  plan.on_fetched(again, status::ok());
  take();
  table.abort(key);
  plan.on_restored(again, status::ok());
  EXPECT_EQ(take(), (lines{"say trial t1 not started: bundle 0 of group g1 was released while its checkpoint was fetched",
                           "refuse #2: node n1: bundle 0 of group g1 was released while its checkpoint was fetched"}));
}

TEST_F(StartPlan, AReleasedBundleKillsItsTrialsOnce) {
  auto id = plan.begin(trainable(), key, fine());
  plan.on_fetched(id, status::ok());
  plan.on_spawned(id, 9);
  take();
  plan.on_released({"other", 0});
  EXPECT_EQ(take(), lines{});
  plan.on_released(key);
  EXPECT_EQ(take(), (lines{"say trial t1 killed: the head released its bundle g1/1/alice#0",
                           "release 9: killed on node n1: the head released its bundle g1/1/alice#0 (its placement "
                           "group was removed or placed elsewhere)"}));
  EXPECT_TRUE(plan.trial("t1")->ending);
  plan.on_released(key);
  EXPECT_EQ(take(), lines{}) << "a repeated abort kills nothing twice";
  EXPECT_EQ(plan.on_ended(9), std::optional<std::string>{"t1"});
  EXPECT_EQ(plan.trial("t1"), nullptr);
  EXPECT_EQ(plan.on_ended(9), std::nullopt);
}

// A start of a trial whose earlier process is being killed waits for its end: never two
// processes of one trial in one folder.
TEST_F(StartPlan, AStartWaitsForTheEarlierProcessOfItsTrialToEnd) {
  auto id = plan.begin(trainable(), key, fine());
  plan.on_fetched(id, status::ok());
  plan.on_spawned(id, 9);
  plan.on_released(key);
  take();
  bundle_key next{"g2/1/alice", 0};
  hold(next);
  auto later = plan.begin(trainable(), next, fine());
  EXPECT_EQ(take(), lines{"fetch_program #2"}) << "an ending trial does not refuse the start";
  plan.on_fetched(later, status::ok());
  EXPECT_EQ(take(), lines{"say trial t1 starts once its earlier process, being killed, has ended"});
  EXPECT_EQ(to_string(plan.find(later)->step), std::string{"waiting"});
  plan.on_ended(9);
  EXPECT_EQ(take(), lines{"spawn #2"});
  plan.on_spawned(later, 10);
  EXPECT_EQ(plan.trial("t1")->actor, 10u);
  EXPECT_FALSE(plan.trial("t1")->ending);
}

TEST_F(StartPlan, TwoStartsOfOneTrialNeverCopyIntoOneFolder) {
  auto spec = trainable();
  spec.restore_files = manifest(1, {"a"});
  auto a = plan.begin(spec, key, fine());
  auto b = plan.begin(spec, key, fine());
  plan.on_fetched(a, status::ok());
  plan.on_fetched(b, status::ok());
  EXPECT_EQ(take(), (lines{"fetch_program #1", "fetch_program #2", "restore #1 a into /work/trials/t1/restore/1",
                           "say trial t1 not started: trial t1 is being started here already",
                           "refuse #2: node n1: trial t1 is being started here already"}));
}

TEST_F(StartPlan, AStartWaitingWhileItsBundleGoesIsRefusedWhenTheEarlierProcessEnds) {
  auto id = plan.begin(program(), key, fine());
  plan.on_spawned(id, 9);
  plan.on_released(key);
  bundle_key next{"g2/1/alice", 0};
  hold(next);
  plan.begin(program(), next, fine());
  take();
  table.abort(next);
  plan.on_ended(9);
  EXPECT_EQ(take(), (lines{"say trial t1 not started: bundle 0 of group g1 was released while it waited for its earlier "
                           "process to end",
                           "refuse #2: node n1: bundle 0 of group g1 was released while it waited for its earlier process "
                           "to end"}));
}

TEST_F(StartPlan, AFailedSpawnRefusesTheStart) {
  auto id = plan.begin(program(), key, fine());
  take();
  plan.on_failed(id, "cannot write the trial's access secret in /work/access");
  EXPECT_EQ(take(), (lines{"say trial t1 not started: cannot write the trial's access secret in /work/access",
                           "refuse #1: cannot write the trial's access secret in /work/access"}));
  EXPECT_EQ(plan.trial("t1"), nullptr);
}

TEST(RestoreSet, ReadsAManifestAndRefusesWhatIsNotOne) {
  auto ok = parse_restore_set(R"({"iteration":7,"files":[{"name":"d/x.pt","size":12,"sha256":")" + sha + "\"}]}");
  ASSERT_TRUE(ok) << ok.error().message();
  EXPECT_EQ(ok->iteration, 7);
  ASSERT_EQ(ok->files.size(), 1u);
  EXPECT_EQ(ok->files[0].name, "d/x.pt");
  EXPECT_EQ(ok->files[0].size, 12u);
  for (auto bad : {"", "{}", R"({"iteration":1})", R"({"iteration":"1","files":[]})",
                   R"({"iteration":1,"files":[{"name":"a","size":-1,"sha256":"x"}]})",
                   R"({"iteration":1,"files":[{"name":"a","size":1}]})"})
    EXPECT_FALSE(parse_restore_set(bad)) << bad;
  EXPECT_EQ(parse_restore_set(R"({"iteration":1,"files":[{"name":"/etc/passwd","size":1,"sha256":")" + other_sha + "\"}]}")
                .error()
                .message(),
            "the checkpoint to restore names a file outside it: /etc/passwd");
}

}  // namespace
}  // namespace tune
