// A program trial's command: placeholders, appended arguments, the program found.
#include "tune/trial/command.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace tune {
namespace {

namespace fs = std::filesystem;

TEST(Command, PlaceholdersTakeTheConfigsValuesAndEachArgumentStaysOne) {
  auto cfg = nlohmann::json::parse(R"({"lr": 0.001, "width": 256, "name": "a b; rm -rf / $(x) `y`",
                                       "model": {"depth": 3}, "flag": true, "ids": [1, 2]})");
  auto out = render_command({"python3", "train.py", "--lr=${lr}", "${width}", "--name", "${name}", "${model.depth}",
                             "${flag}", "${ids}", "x$${lr}", "cost $5", "${lr}${width}"},
                            cfg);
  ASSERT_TRUE(out) << out.error().message();
  EXPECT_EQ(*out, (std::vector<std::string>{"python3", "train.py", "--lr=0.001", "256", "--name",
                                            "a b; rm -rf / $(x) `y`", "3", "true", "[1,2]", "x${lr}", "cost $5",
                                            "0.001256"}));
}

TEST(Command, AnUnknownOrMalformedPlaceholderIsAnErrorNamingIt) {
  auto cfg = nlohmann::json::parse(R"({"lr": 0.1, "model": {"depth": 3}})");
  auto unknown = render_command({"x", "${lrr}"}, cfg);
  ASSERT_FALSE(unknown);
  EXPECT_NE(unknown.error().message().find("${lrr}"), std::string::npos);
  EXPECT_NE(unknown.error().message().find("it has: lr, model"), std::string::npos) << unknown.error().message();
  auto nested = render_command({"x", "${model.width}"}, cfg);
  ASSERT_FALSE(nested);
  EXPECT_NE(nested.error().message().find("\"width\" in model"), std::string::npos) << nested.error().message();
  EXPECT_FALSE(render_command({"x", "${lr"}, cfg));
  EXPECT_FALSE(render_command({"x", "${}"}, cfg));
  auto names = command_placeholders({"a", "--lr=${lr}", "${model.depth}/${x}", "$${no}"});
  ASSERT_TRUE(names);
  EXPECT_EQ(*names, (std::vector<std::string>{"lr", "model.depth", "x"}));
}

TEST(Command, AppendedArgumentsAreOnePairPerValue) {
  auto cfg = nlohmann::json::parse(R"({"lr": 0.1, "model": {"depth": 3, "act": "relu"}, "tags": [], "on": false})");
  auto out = render_command({"python3", "t.py"}, cfg, config_args::append);
  ASSERT_TRUE(out);
  EXPECT_EQ(*out, (std::vector<std::string>{"python3", "t.py", "--lr", "0.1", "--model.act", "relu", "--model.depth", "3",
                                            "--on", "false", "--tags", "[]"}));
}

TEST(Command, TheProgramIsFoundInTheWorkingCopyOrOnThePath) {
  char tmpl[] = "/tmp/command-test-XXXXXX";
  fs::path dir = ::mkdtemp(tmpl);
  fs::create_directories(dir / "bin");
  std::ofstream(dir / "bin/tool") << "#!/bin/sh\n";
  fs::permissions(dir / "bin/tool", fs::perms::owner_all);
  std::ofstream(dir / "train.py") << "print(1)\n";
  auto sh = resolve_program("sh", dir.string(), "/nonexistent:/bin:/usr/bin");
  ASSERT_TRUE(sh) << sh.error().message();
  EXPECT_EQ(*sh, "/bin/sh");
  EXPECT_EQ(*resolve_program("tool", dir.string(), "bin"), (dir / "bin/tool").string());  // a relative PATH entry
  EXPECT_EQ(*resolve_program("./bin/tool", dir.string(), ""), (dir / "bin/tool").string());
  auto missing = resolve_program("python9", dir.string(), "/usr/bin:/bin");
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().message().find("'python9' not found on PATH=/usr/bin:/bin"), std::string::npos)
      << missing.error().message();
  auto not_exec = resolve_program("./train.py", dir.string(), "");
  ASSERT_FALSE(not_exec);
  EXPECT_NE(not_exec.error().message().find("[python3, ./train.py]"), std::string::npos) << not_exec.error().message();
  EXPECT_FALSE(resolve_program("./nope.sh", dir.string(), ""));
  EXPECT_FALSE(resolve_program("", dir.string(), "/bin"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tune

namespace tune {
namespace {

TEST(Command, TheEnvironmentMayNotTouchWhatKeepsATrialOnItsCards) {
  EXPECT_TRUE(check_env_name("VIRTUAL_ENV"));
  EXPECT_TRUE(check_env_name("PYTHONPATH"));
  EXPECT_TRUE(check_env_name("_X1"));
  for (auto bad : {"CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "TUNE_TRIAL_GPUS", "TUNE_REPORT_FD", "1X", "A-B", "", "A=B"})
    EXPECT_FALSE(check_env_name(bad)) << bad;
  EXPECT_NE(check_env_name("CUDA_VISIBLE_DEVICES").message().find("set by libtune"), std::string::npos);
}

}  // namespace
}  // namespace tune
