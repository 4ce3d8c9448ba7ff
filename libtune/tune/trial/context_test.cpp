#include "tune/trial/context.hpp"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "tune/trial/sha256.hpp"

namespace tune {
namespace {

TEST(TrialContext, ConfigValuesAndClearErrors) {
  auto c = trial_context::make("t1", R"({"lr": 0.01, "batch": 128, "model": "cnn"})", "[]");
  ASSERT_TRUE(c) << c.error().message();
  EXPECT_DOUBLE_EQ(*c->number("lr"), 0.01);
  EXPECT_EQ(*c->integer("batch"), 128);
  EXPECT_EQ(*c->text("model"), "cnn");
  EXPECT_NE(c->number("momentum").error().message().find("no \"momentum\""), std::string::npos);
  EXPECT_NE(c->integer("lr").error().message().find("not a whole number"), std::string::npos);
  EXPECT_NE(c->number("model").error().message().find("not a number"), std::string::npos);
  EXPECT_DOUBLE_EQ(*c->number_or("momentum", 0.9), 0.9);
  EXPECT_DOUBLE_EQ(*c->number_or("lr", 0.9), 0.01);
  // A value of the wrong type is an error, not the default in disguise.
  ASSERT_FALSE(c->number_or("model", 0.9));
  EXPECT_NE(c->number_or("model", 0.9).error().message().find("\"model\" is not a number"), std::string::npos);
  EXPECT_FALSE(c->integer_or("lr", 1));
  EXPECT_FALSE(c->text_or("batch", "x"));
  EXPECT_EQ(*c->text_or("optimizer", "sgd"), "sgd");
  auto f = trial_context::make("t", R"({"a": true, "b": 0, "c": "yes", "d": 2})", "[]");
  ASSERT_TRUE(f);
  EXPECT_TRUE(*f->flag_or("a", false));
  EXPECT_FALSE(*f->flag_or("b", true));
  EXPECT_TRUE(*f->flag_or("missing", true));
  EXPECT_FALSE(f->flag_or("c", true));
  EXPECT_FALSE(f->flag_or("d", true));
  EXPECT_FALSE(trial_context::make("t", "[1,2]", "[]"));
  EXPECT_FALSE(trial_context::make("t", "{}", R"([{"no-uuid": 1}])"));
}

TEST(TrialContext, GpusAreNumberedFromZeroWithTheirPhysicalNames) {
  auto c = trial_context::make("t1", "{}",
                               R"([{"uuid": "GPU-b", "pci_bus_id": "0000:07:00.0", "index": 3, "share": 1, "memory_quota": 5},
                                   {"uuid": "GPU-a", "pci_bus_id": "0000:06:00.0", "index": 1, "share": 1}])");
  ASSERT_TRUE(c);
  ASSERT_EQ(c->gpus().size(), 2u);
  EXPECT_EQ(c->gpus()[0].local, 0);
  EXPECT_EQ(c->gpus()[0].index, 3);
  EXPECT_EQ(c->gpus()[0].uuid, "GPU-b");
  EXPECT_EQ(c->gpus()[1].local, 1);
  EXPECT_EQ(c->device_ids(), (std::vector<int>{0, 1}));
}

TEST(TrialContext, ReportsAreJsonLines) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  auto c = trial_context::make("t1", "{}", "[]", fds[1]);
  ASSERT_TRUE(c);
  ASSERT_TRUE(c->report({{"loss", 0.5}, {"acc", 0.8}}));
  ASSERT_TRUE(c->report({{"loss", 0.25}}));
  EXPECT_FALSE(c->report({{"loss", 1.0 / 0.0}}));
  ASSERT_TRUE(c->done("finished"));
  ::close(fds[1]);
  std::string all;
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) all.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  auto first = nlohmann::json::parse(all.substr(0, all.find('\n')));
  EXPECT_EQ(first["type"], "result");
  EXPECT_EQ(first["iteration"], 1);
  EXPECT_EQ(first["metrics"]["acc"], 0.8);
  EXPECT_NE(all.find(R"("iteration":2)"), std::string::npos) << all;
  EXPECT_NE(all.find(R"({"message":"finished","type":"done"})"), std::string::npos) << all;
}

TEST(TrialContext, OutsideAWorkerItSaysSo) {
  ::unsetenv("TUNE_TRIAL_ID");
  auto c = trial_context::from_environment();
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().message().find("not running as a libtune trial"), std::string::npos);
}

TEST(TrialContext, StopSignalIsSeen) {
  trial_context::watch_stop_signal();
  EXPECT_FALSE(trial_context::should_stop());
  ::raise(SIGTERM);
  EXPECT_TRUE(trial_context::should_stop());
}

TEST(Sha256, KnownValues) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_FALSE(sha256_file("/nonexistent"));
}

}  // namespace
}  // namespace tune
