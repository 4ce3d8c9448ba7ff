// A trial's folder as trial_files writes it: params.json, progress.csv, result.json and
// TensorBoard's events (their bytes against tb_events' encodings; TensorBoard's own
// reader reads them in tests/trial_logs_tensorboard_test.py).
#include "trial_logs.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>

namespace tune {
namespace {

namespace fs = std::filesystem;

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

// The Events of every event file in the folder, in their names' order, each record's
// checksums checked.
std::vector<std::string> events_in(const fs::path& folder, size_t* files = nullptr) {
  std::vector<fs::path> paths;
  for (auto& e : fs::directory_iterator(folder))
    if (e.path().filename().string().starts_with("events.out.tfevents.")) paths.push_back(e.path());
  std::sort(paths.begin(), paths.end());
  if (files) *files = paths.size();
  std::vector<std::string> out;
  for (auto& p : paths) {
    auto bytes = read(p);
    for (size_t at = 0; at < bytes.size();) {
      EXPECT_GE(bytes.size() - at, 12u);
      uint64_t n = 0;
      std::memcpy(&n, bytes.data() + at, 8);
      auto event = bytes.substr(at + 12, n);
      EXPECT_EQ(tb::record(event), bytes.substr(at, 16 + n)) << p;
      out.push_back(event);
      at += 16 + n;
    }
  }
  return out;
}

struct TrialLogs : ::testing::Test {
  fs::path dir = fs::temp_directory_path() / ("trial_logs_test_" + std::to_string(::getpid()));
  void TearDown() override { fs::remove_all(dir); }
};

TEST_F(TrialLogs, ATrialsFolderHasItsParamsItsRowsItsLinesAndItsEvents) {
  trial_files files{dir.string()};
  nlohmann::json config{{"lr", 0.5}, {"model", "mlp"}, {"opt", {{"momentum", 0.9}}}, {"bn", true}};
  files.started("t1", config, 100.0);
  std::vector<std::string> names{"loss", "acc"};
  std::vector<double> values{0.25, 0.5};
  files.result("t1", {1, 101.5, R"({"acc":0.5,"loss":0.25})", names, values});
  values = {0.125, 0.75};
  files.result("t1", {2, 102.5, R"({"acc":0.75,"loss":0.125})", names, values});
  files.ended("t1", trial_state::terminated, "", 103.0);
  EXPECT_EQ(files.open_trials(), 0u);
  EXPECT_TRUE(files.take_warnings().empty());

  auto folder = dir / "trials" / "t1";
  EXPECT_EQ(nlohmann::json::parse(read(folder / "params.json")), config);
  EXPECT_EQ(read(folder / "progress.csv"),
            "loss,acc,timestamp,training_iteration,trial_id\n"
            "0.25,0.5,101,1,t1\n"
            "0.125,0.75,102,2,t1\n");
  EXPECT_EQ(read(folder / "result.json"),
            "{\"trial_id\":\"t1\",\"training_iteration\":1,\"timestamp\":101,\"acc\":0.5,\"loss\":0.25}\n"
            "{\"trial_id\":\"t1\",\"training_iteration\":2,\"timestamp\":102,\"acc\":0.75,\"loss\":0.125}\n");
  auto ev = events_in(folder);
  std::vector<std::string_view> tags{"loss", "acc"};
  std::vector<tb::hparam> hparams{{"bn", true}, {"lr", 0.5}, {"model", std::string{"mlp"}}, {"opt/momentum", 0.9}};
  double v1[] = {0.25, 0.5}, v2[] = {0.125, 0.75};
  ASSERT_EQ(ev.size(), 5u);
  EXPECT_EQ(ev[0], tb::version_event(100.0));
  EXPECT_EQ(ev[1], tb::session_start_event(hparams, "t1", 100.0));
  EXPECT_EQ(ev[2], tb::scalars_event(tags, v1, 1, 101.5));
  EXPECT_EQ(ev[3], tb::scalars_event(tags, v2, 2, 102.5));
  EXPECT_EQ(ev[4], tb::session_end_event(tb::session_status::success, 103.0));
}

TEST_F(TrialLogs, ATrialThatStartsAgainAppendsAndWritesANewEventFile) {
  trial_files files{dir.string()};
  std::vector<std::string> names{"loss"};
  std::vector<double> values{1.0};
  files.started("t1", {{"lr", 1}}, 100.0);
  files.result("t1", {1, 101, R"({"loss":1.0})", names, values});
  files.ended("t1", trial_state::paused, "", 102);  // its files closed, no session end
  files.started("t1", {{"lr", 1}}, 200.0);
  values = {0.5};
  files.result("t1", {2, 201, R"({"loss":0.5})", names, values});
  files.ended("t1", trial_state::error, "it crashed", 202);
  auto folder = dir / "trials" / "t1";
  EXPECT_EQ(read(folder / "progress.csv"),
            "loss,timestamp,training_iteration,trial_id\n1,101,1,t1\n0.5,201,2,t1\n");
  size_t n = 0;
  auto ev = events_in(folder, &n);
  EXPECT_EQ(n, 2u);
  ASSERT_EQ(ev.size(), 6u);  // version, start, scalar | version, scalar, end (failure)
  EXPECT_EQ(ev[3], tb::version_event(200.0));
  EXPECT_EQ(ev[5], tb::session_end_event(tb::session_status::failure, 202));
}

TEST_F(TrialLogs, AResultWithTextHasItInTheCsvAndOnlyItsNumbersAsScalars) {
  trial_files files{dir.string()};
  auto metrics = nlohmann::json::parse(R"({"phase":"warm, up","loss":0.5,"ok":true,"inner":{"a":2},"training_iteration":7})");
  std::vector<std::string> names;
  std::vector<double> values;
  numbers_of(metrics, names, values);
  EXPECT_EQ(names, (std::vector<std::string>{"inner/a", "loss", "training_iteration"}));
  auto text = metrics.dump();
  files.result("t2", {7, 50, text, names, values, &metrics});  // not started (a resumed run): opened anyway
  files.flush();
  auto folder = dir / "trials" / "t2";
  EXPECT_FALSE(fs::exists(folder / "params.json"));
  EXPECT_EQ(read(folder / "progress.csv"),
            "inner/a,loss,training_iteration,ok,phase,timestamp,trial_id\n2,0.5,7,true,\"warm, up\",50,t2\n");
  // training_iteration is the trial's own: not said twice.
  EXPECT_EQ(read(folder / "result.json"), "{\"trial_id\":\"t2\",\"timestamp\":50," + text.substr(1) + "\n");
  auto ev = events_in(folder);
  ASSERT_EQ(ev.size(), 2u);
  std::vector<std::string_view> tags{"inner/a", "loss", "training_iteration"};
  EXPECT_EQ(ev[1], tb::scalars_event(tags, values, 7, 50));
}

TEST_F(TrialLogs, AQuotedColumnKeepsItsPlaceWhenTheTrialStartsAgain) {
  trial_files files{dir.string()};
  std::vector<std::string> names{"a,b", "c"};
  std::vector<double> values{1, 2};
  files.result("t3", {1, 10, R"({"a,b":1.0,"c":2.0})", names, values});
  files.ended("t3", trial_state::paused, "", 11);
  values = {3, 4};
  files.result("t3", {2, 20, R"({"a,b":3.0,"c":4.0})", names, values});
  files.flush();
  EXPECT_EQ(read(dir / "trials" / "t3" / "progress.csv"),
            "\"a,b\",c,timestamp,training_iteration,trial_id\n1,2,10,1,t3\n3,4,20,2,t3\n");
}

TEST_F(TrialLogs, ATrialHoldsNoFileUntilItReportsAndOneThatFailsFirstStillHasItsSession) {
  trial_files files{dir.string()};
  files.started("waits", {{"lr", 1}}, 10);
  files.started("fails", {{"lr", 2}}, 10);
  EXPECT_EQ(files.open_trials(), 0u);
  EXPECT_FALSE(fs::exists(dir / "trials" / "waits"));
  files.ended("waits", trial_state::pending, "", 11);  // to start again later: nothing yet
  EXPECT_FALSE(fs::exists(dir / "trials" / "waits"));
  files.ended("fails", trial_state::error, "no GPU", 12);
  EXPECT_EQ(files.open_trials(), 0u);
  auto ev = events_in(dir / "trials" / "fails");
  std::vector<tb::hparam> hparams{{"lr", 2.0}};
  ASSERT_EQ(ev.size(), 3u);
  EXPECT_EQ(ev[1], tb::session_start_event(hparams, "fails", 10));
  EXPECT_EQ(ev[2], tb::session_end_event(tb::session_status::failure, 12));
  EXPECT_EQ(nlohmann::json::parse(read(dir / "trials" / "fails" / "params.json")), (nlohmann::json{{"lr", 2}}));
}

// The same calls through background_sink: the same files, written on its thread; the end
// waits for them; a warning comes back through its flush.
TEST_F(TrialLogs, InTheBackgroundTheFilesAreTheSameAndTheEndWaitsForThem) {
  auto direct = dir / "direct", queued = dir / "queued";
  fs::create_directories(queued / "trials");
  std::ofstream(queued / "trials" / "blocked") << "a file where the folder would be";
  trial_files files{direct.string()};
  background_sink bg{std::make_unique<trial_files>(queued.string())};
  std::vector<std::string> names{"loss", "acc"}, other{"x"};
  for (trial_sink* s : std::initializer_list<trial_sink*>{&files, &bg}) {
    s->started("t1", {{"lr", 0.5}}, 100);
    s->started("blocked", {{"lr", 1}}, 100);
    for (int i = 1; i <= 3000; ++i) {
      std::vector<double> v{1.0 / i, i * 0.001};
      auto text = nlohmann::json{{"acc", v[1]}, {"loss", v[0]}}.dump();
      s->result("t1", {i, 100.0 + i, text, names, v});
      if (i % 1000 == 0) s->flush();
    }
    std::vector<double> x{2};
    s->result("blocked", {1, 101, R"({"x":2.0})", other, x});
    s->ended("t1", trial_state::terminated, "", 5000);
    s->experiment_ended("t1", 5001);
  }
  auto w = bg.take_warnings();
  ASSERT_EQ(w.size(), 1u);
  EXPECT_NE(w[0].find("trial blocked's files"), std::string::npos) << w[0];
  for (auto f : {"params.json", "progress.csv", "result.json"})
    EXPECT_EQ(read(queued / "trials" / "t1" / f), read(direct / "trials" / "t1" / f)) << f;
  EXPECT_EQ(events_in(queued / "trials" / "t1"), events_in(direct / "trials" / "t1"));
  auto links = bg.take_links();
  ASSERT_EQ(links.size(), 1u);
  EXPECT_EQ(links[0].url, (queued / "trials" / "t1").string());
}

TEST_F(TrialLogs, AFolderThatCannotBeWrittenIsOneWarningAndTheRestGoesOn) {
  fs::create_directories(dir / "trials");
  std::ofstream(dir / "trials" / "blocked") << "a file where the folder would be";
  trial_files files{dir.string()};
  std::vector<std::string> names{"x"};
  std::vector<double> values{1};
  files.started("blocked", {{"a", 1}}, 1);
  files.result("blocked", {1, 2, R"({"x":1})", names, values});
  files.result("blocked", {2, 3, R"({"x":1})", names, values});
  files.started("ok", {{"a", 2}}, 1);
  files.result("ok", {1, 2, R"({"x":1})", names, values});
  files.flush();
  auto w = files.take_warnings();
  ASSERT_EQ(w.size(), 1u);
  EXPECT_NE(w[0].find("trial blocked's files: cannot make " + (dir / "trials" / "blocked").string()), std::string::npos)
      << w[0];
  EXPECT_NE(w[0].find("experiment.db"), std::string::npos) << w[0];
  EXPECT_EQ(read(dir / "trials" / "ok" / "progress.csv"), "x,timestamp,training_iteration,trial_id\n1,2,1,ok\n");
}

}  // namespace
}  // namespace tune
