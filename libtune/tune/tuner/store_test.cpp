// The experiment store for real (SQLite files in a temporary folder), including
// writers killed with SIGKILL in the middle of their writes.
#include "tune/tuner/store.hpp"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include <sqlite3.h>

namespace tune {
namespace {

namespace fs = std::filesystem;

class StoreTest : public ::testing::Test {
 protected:
  std::string dir = (fs::temp_directory_path() / ("store-test-" + std::to_string(::getpid()) + "-" +
                                                  ::testing::UnitTest::GetInstance()->current_test_info()->name()))
                        .string();
  void TearDown() override { fs::remove_all(dir); }
};

TEST_F(StoreTest, TrialsResultsAndEventsSurviveAReopen) {
  {
    auto s = experiment_store::open(dir);
    ASSERT_TRUE(s) << s.error().message();
    auto& st = **s;
    ASSERT_TRUE(st.set_meta("metric", "val_acc"));
    ASSERT_TRUE(st.add_trial("t1", {{"lr", 0.1}, {"model", "cnn"}}));
    ASSERT_TRUE(st.add_trial("t2", {{"lr", 0.01}}));
    EXPECT_EQ(st.add_trial("t1", {}).code(), errc::already_exists);
    auto added = st.add_results({{"t1", 1, 10.0, {{"val_acc", 0.5}}}, {"t1", 2, 11.0, {{"val_acc", 0.7}}},
                                 {"t2", 1, 12.0, {{"val_acc", 0.4}}}});
    ASSERT_TRUE(added) << added.error().message();
    EXPECT_EQ(*added, 3u);
    // Delivered again (e.g. after a reconnect): stored once, the first one kept.
    added = st.add_results({{"t1", 2, 13.0, {{"val_acc", 0.9}}}});
    ASSERT_TRUE(added);
    EXPECT_EQ(*added, 0u);
    ASSERT_TRUE(st.update_trial("t1", "running", "", {{"node", "node-1"}, {"pid", 42}}));
    ASSERT_TRUE(st.update_trial("t1", "terminated", "", {{"gpu_memory_peak", 1024}}));
    ASSERT_TRUE(st.update_trial("t2", "error", "the trial's process ended with exit code 3"));
    ASSERT_TRUE(st.add_event("t2", "ended", {{"exit", "exit code 3"}}));
    ASSERT_TRUE(st.add_event("", "experiment_started", {}));
  }
  auto s = experiment_store::open(dir);
  ASSERT_TRUE(s) << s.error().message();
  auto& st = **s;
  EXPECT_EQ(*st.meta("metric"), "val_acc");
  EXPECT_TRUE(st.meta("nothing")->is_null());
  auto trials = st.trials();
  ASSERT_TRUE(trials);
  ASSERT_EQ(trials->size(), 2u);
  auto t1 = st.trial("t1");
  ASSERT_TRUE(t1);
  EXPECT_EQ(t1->state, "terminated");
  EXPECT_EQ(t1->config["model"], "cnn");
  EXPECT_EQ(t1->info["node"], "node-1") << "info is merged, not replaced";
  EXPECT_EQ(t1->info["gpu_memory_peak"], 1024);
  EXPECT_EQ(st.trial("t2")->error, "the trial's process ended with exit code 3");
  auto r = st.results("t1");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[1].iteration, 2);
  EXPECT_DOUBLE_EQ((*r)[1].metrics["val_acc"].get<double>(), 0.7);
  EXPECT_EQ(*st.result_count(), 3);
  EXPECT_EQ(st.events("t2")->size(), 1u);
  EXPECT_EQ(st.events()->size(), 2u);
  EXPECT_EQ(st.trial("nope").error().code(), errc::not_found);
}

TEST_F(StoreTest, ABatchWithAResultOfAnUnknownTrialStoresNothing) {
  auto s = experiment_store::open(dir);
  ASSERT_TRUE(s);
  auto& st = **s;
  ASSERT_TRUE(st.add_trial("t1", {}));
  auto added = st.add_results({{"t1", 1, 1.0, {{"m", 1}}}, {"ghost", 1, 1.0, {{"m", 1}}}});
  ASSERT_FALSE(added);
  EXPECT_NE(added.error().message().find("trial ghost, which is not in the experiment"), std::string::npos)
      << added.error().message();
  EXPECT_EQ(*st.result_count(), 0) << "a batch is all or nothing";
  EXPECT_FALSE(st.update_trial("t1", "sleeping"));
  EXPECT_FALSE(st.add_trial("t2", {}, "weird"));
}

TEST_F(StoreTest, AnOpenBatchIsCommittedAsOneAndABadResultInsideItUndoesOnlyItself) {
  {
    auto s = experiment_store::open(dir);
    ASSERT_TRUE(s);
    auto& st = **s;
    ASSERT_TRUE(st.begin_batch());
    EXPECT_FALSE(st.begin_batch()) << "batches do not nest";
    ASSERT_TRUE(st.add_trial("t1", {{"x", 1}}));
    ASSERT_TRUE(st.add_results({{"t1", 1, 1.0, {{"m", 1}}}}));
    EXPECT_FALSE(st.add_results({{"t1", 2, 1.0, {{"m", 2}}}, {"ghost", 1, 1.0, {{"m", 1}}}}));
    ASSERT_TRUE(st.update_trial("t1", "running"));
    // Another connection sees none of it before the commit.
    sqlite3* other = nullptr;
    ASSERT_EQ(sqlite3_open_v2(st.database_path().c_str(), &other, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
    auto count = [&](const char* sql) {
      sqlite3_stmt* q = nullptr;
      sqlite3_prepare_v2(other, sql, -1, &q, nullptr);
      int n = sqlite3_step(q) == SQLITE_ROW ? sqlite3_column_int(q, 0) : -1;
      sqlite3_finalize(q);
      return n;
    };
    EXPECT_EQ(count("SELECT COUNT(*) FROM trials"), 0);
    {
      // The experiment can be opened and read while its writer holds a batch open
      // (opening an existing experiment writes nothing).
      auto reader = experiment_store::open(dir);
      ASSERT_TRUE(reader) << reader.error().message();
      EXPECT_EQ(*(*reader)->result_count(), 0);
    }
    ASSERT_TRUE(st.end_batch());
    EXPECT_FALSE(st.end_batch());
    EXPECT_EQ(count("SELECT COUNT(*) FROM trials"), 1);
    EXPECT_EQ(count("SELECT COUNT(*) FROM results"), 1) << "the bad add_results undid its own rows only";
    sqlite3_close(other);
    ASSERT_TRUE(st.begin_batch());
    ASSERT_TRUE(st.add_results({{"t1", 2, 2.0, {{"m", 2}}}}));
  }  // closed with a batch open: what it holds is kept
  auto s = experiment_store::open(dir);
  ASSERT_TRUE(s);
  EXPECT_EQ(*(*s)->result_count(), 2);
  EXPECT_EQ((*s)->trial("t1")->state, "running");
}

TEST_F(StoreTest, BadDirectoriesAndForeignFilesAreClearErrors) {
  fs::create_directories(dir);
  std::ofstream(dir + "/file") << "x";
  auto f = experiment_store::open(dir + "/file");
  ASSERT_FALSE(f);
  EXPECT_NE(f.error().message().find("is not a directory"), std::string::npos) << f.error().message();
  fs::create_directories(dir + "/junk");
  std::ofstream(dir + "/junk/experiment.db") << std::string(4096, 'j');
  auto j = experiment_store::open(dir + "/junk");
  ASSERT_FALSE(j);
  EXPECT_NE(j.error().message().find("is not a usable libtune experiment database"), std::string::npos)
      << j.error().message();
  EXPECT_NE(j.error().message().find("move it away"), std::string::npos);
  // A database from another schema version.
  {
    auto s = experiment_store::open(dir + "/other");
    ASSERT_TRUE(s);
    ASSERT_TRUE((*s)->set_meta("schema_version", 99));
  }
  auto o = experiment_store::open(dir + "/other");
  ASSERT_FALSE(o);
  EXPECT_NE(o.error().message().find("schema 99"), std::string::npos) << o.error().message();
  EXPECT_FALSE(experiment_store::open(""));
}

// A writer killed at a random moment: the database opens, passes SQLite's integrity
// check, holds every batch whose add returned, and whole batches only.
TEST_F(StoreTest, AWriterKilledMidWriteLeavesAConsistentDatabase) {
  constexpr int batch = 10;
  std::mt19937 rng{7};
  for (int round = 0; round < 6; ++round) {
    auto where = dir + "/round" + std::to_string(round);
    int acks[2];
    ASSERT_EQ(::pipe(acks), 0);
    pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      ::close(acks[0]);
      auto s = experiment_store::open(where);
      if (!s || !(*s)->add_trial("t", {})) ::_exit(3);
      for (int64_t b = 0;; ++b) {
        std::vector<result_row> rows;
        for (int i = 0; i < batch; ++i) rows.push_back({"t", b * batch + i, 1.0, {{"loss", 1.0 / double(b + 1)}}});
        if (!(*s)->add_results(rows)) ::_exit(4);
        int32_t done = static_cast<int32_t>(b + 1);
        if (::write(acks[1], &done, sizeof done) != sizeof done) ::_exit(5);
      }
    }
    ::close(acks[1]);
    int32_t acked = 0, got = 0;
    // Let it write a while, then kill it at a moment that has nothing to do with its
    // batches (the acknowledgements are read only afterwards).
    std::this_thread::sleep_for(std::chrono::microseconds(100000 + rng() % 150000));
    ::kill(child, SIGKILL);
    int status = 0;
    ::waitpid(child, &status, 0);
    while (::read(acks[0], &got, sizeof got) == sizeof got) acked = got;
    ::close(acks[0]);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the writer failed by itself: exit " << WEXITSTATUS(status);
    ASSERT_GE(acked, 1) << "the writer did not get to write";

    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open((where + "/experiment.db").c_str(), &db), SQLITE_OK);
    std::string check;
    sqlite3_exec(db, "PRAGMA integrity_check", [](void* out, int, char** v, char**) {
      *static_cast<std::string*>(out) += v[0] ? v[0] : "";
      return 0;
    }, &check, nullptr);
    sqlite3_close(db);
    EXPECT_EQ(check, "ok") << "round " << round;
    auto s = experiment_store::open(where);
    ASSERT_TRUE(s) << s.error().message();
    auto n = *(*s)->result_count();
    EXPECT_GE(n, int64_t{acked} * batch) << "a result whose add returned was lost (round " << round << ")";
    EXPECT_EQ(n % batch, 0) << "a batch was stored in part (round " << round << ")";
  }
}

}  // namespace
}  // namespace tune
